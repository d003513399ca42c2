package process

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
)

// BenchmarkStartOverhead measures Start + Wait + Remove of /bin/true with
// its output appended to a log file, against a bare os/exec run of the
// same binary with the same log file, alternating the two in one run. It
// reports the median of each and their ratio (runtime/bare; the target is
// <= 1.5).
//
//	go test -run '^$' -bench StartOverhead -benchtime 500x ./runtime/process
func BenchmarkStartOverhead(b *testing.B) {
	bin, err := exec.LookPath("true")
	if err != nil {
		b.Skip("no true binary")
	}
	r, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	log := filepath.Join(b.TempDir(), "bench.log")
	ctx := context.Background()
	spec := contract.Spec{Command: []string{bin}, LogPath: log}
	viaRuntime := func() time.Duration {
		t0 := time.Now()
		id, err := r.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		if exit, err := r.Wait(ctx, id); err != nil || exit.Code != 0 {
			b.Fatalf("%+v %v", exit, err)
		}
		if err := r.Remove(ctx, id); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	bare := func() time.Duration {
		t0 := time.Now()
		f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(bin)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		f.Close()
		return time.Since(t0)
	}
	viaRuntime()
	bare()
	var rts, bares []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			rts = append(rts, viaRuntime())
			bares = append(bares, bare())
		} else {
			bares = append(bares, bare())
			rts = append(rts, viaRuntime())
		}
	}
	b.StopTimer()
	mr, mb := median(rts), median(bares)
	b.ReportMetric(float64(mr.Microseconds()), "runtime-us/task")
	b.ReportMetric(float64(mb.Microseconds()), "bare-us/task")
	b.ReportMetric(float64(mr)/float64(mb), "ratio")
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
