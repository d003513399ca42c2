package spec

import "fmt"

// formatCPU writes millicores for people: "16 cores", "1500 millicores".
func formatCPU(m int64) string {
	switch {
	case m == 1000:
		return "1 core"
	case m%1000 == 0:
		return fmt.Sprintf("%d cores", m/1000)
	}
	return fmt.Sprintf("%d millicores", m)
}

// formatBytes writes a byte count for people: "16 GiB", "1.5 GiB (1610612736
// bytes)", "512 bytes".
func formatBytes(b int64) string {
	units := []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}
	for _, u := range units {
		if b >= u.size {
			if b%u.size == 0 {
				return fmt.Sprintf("%d %s", b/u.size, u.name)
			}
			return fmt.Sprintf("%.1f %s (%d bytes)", float64(b)/float64(u.size), u.name, b)
		}
	}
	return fmt.Sprintf("%d bytes", b)
}

// formatSeconds writes a bound in seconds for people: "7 days", "12 hours".
func formatSeconds(s int64) string {
	const day, hour = 86400, 3600
	switch {
	case s >= day && s%day == 0:
		if s == day {
			return "1 day"
		}
		return fmt.Sprintf("%d days", s/day)
	case s >= hour && s%hour == 0:
		if s == hour {
			return "1 hour"
		}
		return fmt.Sprintf("%d hours", s/hour)
	}
	return fmt.Sprintf("%d seconds", s)
}
