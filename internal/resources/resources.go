// Package resources owns the arithmetic of the three quantities MegaFlow
// counts on a worker and asks for in a task: CPU in millicores, memory in
// bytes and whole GPUs. It is a leaf: it imports only the standard library,
// so the scheduler, the plan verifier and the workers may all use it.
//
// GPU model and per-GPU memory are properties of devices, not quantities to
// add up; they stay with whoever matches devices (the scheduler).
package resources

import "fmt"

// Resources is an amount of CPU, memory and GPUs: what a task asks for, what
// a worker offers, or what is allocated on it. Values are meant to be
// non-negative; Sub may make them negative, which Fits then treats as a
// shortage.
type Resources struct {
	// CPUMillis is CPU in millicores (1000 = one core).
	CPUMillis int64
	// MemoryBytes is memory in bytes.
	MemoryBytes int64
	// GPUs is a number of whole GPUs.
	GPUs int64
}

// Add returns r plus o, dimension by dimension.
func (r Resources) Add(o Resources) Resources {
	return Resources{CPUMillis: r.CPUMillis + o.CPUMillis, MemoryBytes: r.MemoryBytes + o.MemoryBytes, GPUs: r.GPUs + o.GPUs}
}

// Sub returns r minus o, dimension by dimension; a result may be negative.
func (r Resources) Sub(o Resources) Resources {
	return Resources{CPUMillis: r.CPUMillis - o.CPUMillis, MemoryBytes: r.MemoryBytes - o.MemoryBytes, GPUs: r.GPUs - o.GPUs}
}

// Fits reports whether r fits within avail: no dimension of r exceeds the
// same dimension of avail. A zero request fits anything, even a negative
// avail (an over-committed worker still takes a task asking for nothing).
func (r Resources) Fits(avail Resources) bool {
	return (r.CPUMillis <= 0 || r.CPUMillis <= avail.CPUMillis) &&
		(r.MemoryBytes <= 0 || r.MemoryBytes <= avail.MemoryBytes) &&
		(r.GPUs <= 0 || r.GPUs <= avail.GPUs)
}

// Shortfall returns how much of r does not fit in avail, per dimension:
// max(0, r - avail) where r asks for something, 0 elsewhere. It is zero
// exactly when r.Fits(avail).
func (r Resources) Shortfall(avail Resources) Resources {
	short := func(need, have int64) int64 {
		if need <= 0 || need <= have {
			return 0
		}
		return need - max(have, 0)
	}
	return Resources{
		CPUMillis:   short(r.CPUMillis, avail.CPUMillis),
		MemoryBytes: short(r.MemoryBytes, avail.MemoryBytes),
		GPUs:        short(r.GPUs, avail.GPUs),
	}
}

// IsZero reports whether r asks for nothing in any dimension.
func (r Resources) IsZero() bool { return r == Resources{} }

// String writes r for people, e.g. "2 cores, 16 GiB, 1 GPU"; dimensions that
// are zero are left out, and a zero r is "nothing".
func (r Resources) String() string {
	s := ""
	add := func(part string) {
		if s != "" {
			s += ", "
		}
		s += part
	}
	if r.CPUMillis != 0 {
		add(FormatCPU(r.CPUMillis))
	}
	if r.MemoryBytes != 0 {
		add(FormatBytes(r.MemoryBytes))
	}
	if r.GPUs != 0 {
		add(FormatGPUs(r.GPUs, ""))
	}
	if s == "" {
		return "nothing"
	}
	return s
}

// FormatCPU writes millicores for people: "1 core", "16 cores", "1.5 cores",
// "250 millicores".
func FormatCPU(m int64) string {
	switch {
	case m == 1000:
		return "1 core"
	case m%1000 == 0:
		return fmt.Sprintf("%d cores", m/1000)
	case m%100 == 0 && (m >= 1000 || m <= -1000):
		return fmt.Sprintf("%d.%d cores", m/1000, abs(m%1000)/100)
	}
	return fmt.Sprintf("%d millicores", m)
}

// FormatBytes writes a byte count for people: "16 GiB", "1.5 GiB", "512
// MiB", "100 bytes". Amounts that are not a whole number of the largest unit
// are rounded to one decimal.
func FormatBytes(b int64) string {
	units := []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}
	for _, u := range units {
		if abs(b) >= u.size {
			if b%u.size == 0 {
				return fmt.Sprintf("%d %s", b/u.size, u.name)
			}
			return fmt.Sprintf("%.1f %s", float64(b)/float64(u.size), u.name)
		}
	}
	return fmt.Sprintf("%d bytes", b)
}

// FormatGPUs writes a number of GPUs of an optional model for people: "1
// GPU", "2 H100 GPUs".
func FormatGPUs(n int64, model string) string {
	if model != "" {
		model += " "
	}
	if n == 1 {
		return "1 " + model + "GPU"
	}
	return fmt.Sprintf("%d %sGPUs", n, model)
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
