package worker

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// DetectCapacity returns what this machine has: runtime.NumCPU()*1000
// millicores, /proc/meminfo's MemTotal bytes, and no GPUs (GPU discovery
// belongs to gpu/). New calls it for the zero fields of Config.Capacity.
func DetectCapacity() (Capacity, error) {
	c := Capacity{CPUMillis: int64(runtime.NumCPU()) * 1000}
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return c, fmt.Errorf("detect memory: %w (set the memory capacity explicitly)", err)
	}
	mem, err := parseMemTotal(b)
	if err != nil {
		return c, err
	}
	c.MemoryBytes = mem
	return c, nil
}

// parseMemTotal reads the "MemTotal: N kB" line of /proc/meminfo.
func parseMemTotal(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("detect memory: bad MemTotal line %q", sc.Text())
			}
			if len(f) >= 3 && f[2] != "kB" {
				return 0, fmt.Errorf("detect memory: MemTotal unit %q, want kB", f[2])
			}
			return n * 1024, nil
		}
	}
	return 0, fmt.Errorf("detect memory: no MemTotal in /proc/meminfo")
}
