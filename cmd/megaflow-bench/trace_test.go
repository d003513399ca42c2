package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, tc := range []struct {
		p, want float64
	}{{0, 1}, {20, 1}, {50, 3}, {99, 5}, {100, 5}} {
		if got := percentile(xs, tc.p); got != tc.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", xs, tc.p, got, tc.want)
		}
	}
	if xs[0] != 5 {
		t.Error("percentile sorted its input")
	}
	if !math.IsNaN(percentile(nil, 50)) {
		t.Error("percentile of nothing is not NaN")
	}
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadTrace(t *testing.T) {
	nodes := writeFile(t, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,16384,1,V100\nn1,8000,16384,2,V100\n")
	pods := writeFile(t, "pods.csv", `name,cpu_milli,memory_mib,num_gpu,creation_time,deletion_time,scheduled_time
late,1000,1024,0,300,900,310
early,2000,2048,1,100,400,100
never,1000,1024,0,200,250,
`)
	jobs, ns, skipped, total, err := loadTrace(replayOptions{pods: pods, nodes: nodes, tasks: 10, maxLife: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if total != 3 || skipped != 1 || len(jobs) != 2 || len(ns) != 2 {
		t.Fatalf("total %d, skipped %d, %d jobs, %d nodes; want 3, 1, 2, 2", total, skipped, len(jobs), len(ns))
	}
	// Sorted by creation, arrivals from the window's first task.
	if j := jobs[0]; j.name != "early" || j.arrival != 0 || j.life != 300 || j.gpus != 1 || j.memB != 2048<<20 {
		t.Errorf("first job %+v", j)
	}
	if j := jobs[1]; j.name != "late" || j.arrival != 200 || j.life != 590 || j.traceQueue != 10 {
		t.Errorf("second job %+v", j)
	}
	// The lifetime cap and the window.
	jobs, _, _, _, err = loadTrace(replayOptions{pods: pods, nodes: nodes, skip: 2, tasks: 1, maxLife: 60})
	if err != nil || len(jobs) != 1 || jobs[0].name != "late" || jobs[0].life != 60 {
		t.Errorf("skip 2, cap 60: %+v, %v", jobs, err)
	}

	for _, tc := range []struct {
		name, pods, want string
	}{
		{"missing column", "name,cpu_milli\nx,1\n", `no column "memory_mib"`},
		{"bad number", "cpu_milli,memory_mib,num_gpu,creation_time,deletion_time,scheduled_time\nlots,1,0,0,1,0\n", `:2: column cpu_milli is "lots"`},
	} {
		_, _, _, _, err := loadTrace(replayOptions{pods: writeFile(t, "p.csv", tc.pods), nodes: nodes, tasks: 10, maxLife: 10})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
