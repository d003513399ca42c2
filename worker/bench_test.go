package worker

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/runtime/process"
)

// benchWindow is how many attempts BenchmarkAttempts keeps assigned at
// once, as a head keeps a worker's capacity filled.
const benchWindow = 16

// BenchmarkAttempts measures the worker's per-attempt path end to end for
// no-op tasks that print nothing: b.N assignments from a fake head on
// loopback, at most benchWindow outstanding, each started, waited for,
// reported (EXITED, acknowledged) and removed by one real worker whose
// data directory is on the test's temporary directory. rt=fake uses the
// fake runtime (a container exits 0 at once, as in megaflow-bench
// throughput); rt=process runs `true` under the process runtime with its
// state directory under the data directory, as the daemon does. It
// reports attempts/s and the median and p90 of assignment-to-EXITED.
//
//	go test -run '^$' -bench Attempts -benchtime 2000x ./worker
func BenchmarkAttempts(b *testing.B) {
	for _, name := range []string{"fake", "process"} {
		b.Run("rt="+name, func(b *testing.B) {
			dir := b.TempDir()
			var rt contract.Runtime
			command := "true"
			switch name {
			case "fake":
				rt = fake.New(clock.Real())
			case "process":
				bin, err := exec.LookPath("true")
				if err != nil {
					b.Skip("no true binary")
				}
				command = bin
				p, err := process.New(process.Config{StateDir: filepath.Join(dir, "process")})
				if err != nil {
					b.Fatal(err)
				}
				rt = p
			}
			benchAttempts(b, rt, dir, command)
		})
	}
}

func benchAttempts(b *testing.B, rt contract.Runtime, dir, command string) {
	head := newFakeHead(b, "h1")
	ended := make(chan string, b.N+benchWindow)
	seen := map[uint64]bool{}
	head.set(func(h *fakeHead) {
		h.onBatch = func(batch *wire.EventBatch) {
			if seen[batch.GetSeq()] {
				return
			}
			seen[batch.GetSeq()] = true
			for _, e := range batch.GetEvents() {
				switch e.GetKind() {
				case kindExited:
					ended <- e.GetTaskId()
				case kindFailed, kindStopped, kindTimedOut:
					ended <- "failed " + e.GetTaskId() + ": " + e.GetReason()
				}
			}
		}
	})
	cfg := testConfig(b, rt, dir, head.addr)
	cfg.Logger = nil
	startWorker(b, cfg)
	s := spec("busybox", command)
	sentAt := make(map[string]time.Time, b.N)
	lat := make([]time.Duration, 0, b.N)
	send := func(i int) {
		id := fmt.Sprintf("g/t%d", i)
		sentAt[id] = time.Now()
		head.send(assignMsg(id, 1, s))
	}
	b.ResetTimer()
	t0 := time.Now()
	sent := 0
	for ; sent < min(b.N, benchWindow); sent++ {
		send(sent)
	}
	timeout := time.NewTimer(5 * time.Minute)
	defer timeout.Stop()
	for done := 0; done < b.N; done++ {
		select {
		case id := <-ended:
			at, ok := sentAt[id]
			if !ok {
				b.Fatalf("attempt %s", id)
			}
			lat = append(lat, time.Since(at))
		case <-timeout.C:
			b.Fatalf("%d of %d attempts ended within 5 minutes", done, b.N)
		}
		if sent < b.N {
			send(sent)
			sent++
		}
	}
	elapsed := time.Since(t0)
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "attempts/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, "p90-ms")
	b.ReportMetric(0, "ns/op")
}
