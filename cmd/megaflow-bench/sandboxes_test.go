package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSandboxesValidate(t *testing.T) {
	good := func() sandboxesOptions {
		return sandboxesOptions{heads: []string{"127.0.0.1:7070"}, image: "megaflow-test/busybox:1", n: 256, execs: 4,
			cpuMillis: 100, memoryBytes: 16 << 20, lifetime: time.Hour, waitReady: 10 * time.Minute,
			execTimeout: 5 * time.Minute, timeout: 30 * time.Minute}
	}
	for _, tc := range []struct {
		name string
		edit func(*sandboxesOptions)
		want string // "" when valid
	}{
		{"defaults", func(*sandboxesOptions) {}, ""},
		{"zero resources: the cluster's defaults", func(o *sandboxesOptions) { o.cpuMillis, o.memoryBytes = 0, 0 }, ""},
		{"no heads", func(o *sandboxesOptions) { o.heads = nil }, "--heads is empty"},
		{"no image", func(o *sandboxesOptions) { o.image = " " }, "--image is empty"},
		{"n 0", func(o *sandboxesOptions) { o.n = 0 }, "--n 0 is outside [1, 1024]"},
		{"n 1025", func(o *sandboxesOptions) { o.n = 1025 }, "--n 1025 is outside [1, 1024]"},
		{"execs 0", func(o *sandboxesOptions) { o.execs = 0 }, "--execs 0 is outside"},
		{"negative cpu", func(o *sandboxesOptions) { o.cpuMillis = -1 }, "--cpu-millis -1"},
		{"wait-ready over 10m", func(o *sandboxesOptions) { o.waitReady = 11 * time.Minute }, "--wait-ready 11m0s"},
		{"lifetime under 1m", func(o *sandboxesOptions) { o.lifetime = time.Second }, "--lifetime 1s"},
		{"exec-timeout 0", func(o *sandboxesOptions) { o.execTimeout = 0 }, "--exec-timeout 0s"},
		{"timeout 0", func(o *sandboxesOptions) { o.timeout = 0 }, "--timeout 0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good()
			tc.edit(&o)
			err := o.validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("validate: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("validate: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestStepFigures(t *testing.T) {
	for _, tc := range []struct {
		name               string
		lat                []float64
		wall               time.Duration
		perS, p50ms, p99ms float64
	}{
		{"one exec", []float64{0.25}, time.Second, 1, 250, 250},
		// Nearest rank: p50 of 4 is the 2nd, p99 the 4th, in any order.
		{"four", []float64{0.4, 0.1, 0.3, 0.2}, 2 * time.Second, 2, 200, 400},
		// 6 latencies: ceil(3) = the 3rd (bench/python_sandboxes.py's pct is the same).
		{"six", []float64{6, 5, 4, 3, 2, 1}, 3 * time.Second, 2, 3000, 6000},
		// 1 to 100 ms: p99 is the 99th, not the largest.
		{"hundred", hundredMs(), 10 * time.Second, 10, 50, 99},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r sandboxesResult
			stepFigures(&r, tc.lat, tc.wall)
			if r.ExecsPerS != tc.perS || r.ExecP50Ms != tc.p50ms || r.ExecP99Ms != tc.p99ms {
				t.Fatalf("execs/s %v, p50 %v ms, p99 %v ms; want %v, %v, %v", r.ExecsPerS, r.ExecP50Ms, r.ExecP99Ms, tc.perS, tc.p50ms, tc.p99ms)
			}
			if len(r.ExecLatS) != len(tc.lat) {
				t.Fatalf("%d latencies kept, want %d", len(r.ExecLatS), len(tc.lat))
			}
		})
	}
}

func TestFirstErrors(t *testing.T) {
	boom := errors.New("boom")
	if err := firstErrors("exec", []error{nil, nil}); err != nil {
		t.Fatalf("no failure: %v", err)
	}
	err := firstErrors("exec", []error{nil, boom, errors.New("later")})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "exec: 2 of 3 failed; the first: boom") {
		t.Fatalf("got %v", err)
	}
}

// hundredMs returns 1 to 100 milliseconds in seconds, largest first.
func hundredMs() []float64 {
	var out []float64
	for i := 100; i >= 1; i-- {
		out = append(out, float64(i)/1000)
	}
	return out
}
