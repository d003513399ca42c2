package bench

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/wire"
)

// scale multiplies the amount of work of every benchmark (commands, graphs,
// tasks), so that a developer on a shared machine can run them small:
//
//	go test -run '^$' -bench . -benchtime 1x ./bench -megaflow.scale 0.1
//
// The figures in README.md are at scale 1.
var scale = flag.Float64("megaflow.scale", 1, "multiply the work of every bench/ benchmark by this factor")

// scaled returns n times -megaflow.scale, at least min.
func scaled(n, min int) int {
	return max(min, int(float64(n)**scale))
}

// rate is what throughput measured.
type rate struct {
	perSec float64 // calls completed per second
	cores  float64 // CPU time of the whole process over wall time
}

// throughput runs do(i) for i in [0, total) from workers goroutines, each
// taking the next i from a shared counter, and returns how many calls per
// second completed and how many cores the process kept busy meanwhile
// (every node of the cluster runs in this process, so near the machine's
// core count means CPU-bound). The first error fails the benchmark.
func throughput(b *testing.B, workers, total int, do func(i int) error) rate {
	b.Helper()
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	start, cpu0 := time.Now(), cpuTime()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				if err := do(i); err != nil {
					errOnce.Do(func() { first = fmt.Errorf("call %d: %w", i, err) })
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	if first != nil {
		b.Fatal(first)
	}
	return rate{perSec: float64(total) / elapsed.Seconds(), cores: cpu.Seconds() / elapsed.Seconds()}
}

// cpuTime returns the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// latencies runs do(i) for i in [0, n) one at a time, after warmup calls
// that are not recorded, and returns the latencies sorted.
func latencies(b *testing.B, warmup, n int, do func(i int) error) []time.Duration {
	b.Helper()
	for i := range warmup {
		if err := do(-1 - i); err != nil {
			b.Fatalf("warmup call %d: %v", i, err)
		}
	}
	out := make([]time.Duration, n)
	for i := range n {
		start := time.Now()
		if err := do(i); err != nil {
			b.Fatalf("call %d: %v", i, err)
		}
		out[i] = time.Since(start)
	}
	slices.Sort(out)
	return out
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted, by the
// nearest-rank method: the smallest sample with at least p% of the samples
// at or below it.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// ms converts d to milliseconds for ReportMetric and tables.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// rolloutTask is a typical task of a rollout graph: one SWE-agent episode
// in a container, with the image, program and resources every task of the
// step shares and an instance argument of its own.
func rolloutTask(i int) *wire.TaskSpec {
	return &wire.TaskSpec{
		Name:  fmt.Sprintf("rollout-%05d", i),
		Image: "ghcr.io/megaflow/swe-rollout:2026.11",
		Command: []string{"python", "-m", "megaflow_agent.rollout",
			fmt.Sprintf("--instance=swe-bench-verified/%05d", i)},
		Env: map[string]string{
			"MODEL_ENDPOINT":  "http://vllm.model-service:8000/v1",
			"AGENT_FRAMEWORK": "openhands",
			"MAX_TURNS":       "50",
		},
		Resources: &wire.Resources{CpuMillis: 2000, MemoryBytes: 4 << 30},
		Type:      "train",
	}
}

// rolloutGraph is graph id with tasks rollout tasks.
func rolloutGraph(id string, tasks int) *wire.GraphSpec {
	g := &wire.GraphSpec{Id: id, Tenant: "rl-team", Name: "swe-rollout-step", Tasks: make([]*wire.TaskSpec, tasks)}
	for i := range tasks {
		g.Tasks[i] = rolloutTask(i)
	}
	return g
}

// row is one line of a printed table.
type row struct {
	name  string
	value string
	note  string
}

// setRow sets the row named r.name in rows, or appends it: a sub-benchmark
// that the testing package runs again with a larger b.N replaces its row.
func setRow(rows *[]row, r row) {
	for i := range *rows {
		if (*rows)[i].name == r.name {
			(*rows)[i] = r
			return
		}
	}
	*rows = append(*rows, r)
}

// summary runs a last sub-benchmark, "summary", that prints rows as a
// table (a benchmark with sub-benchmarks has its own log swallowed by the
// testing package, so the table is printed from a sub-benchmark).
func summary(b *testing.B, title string, rows *[]row) {
	b.Helper()
	b.Run("summary", func(b *testing.B) {
		hideNsPerOp(b)
		logTable(b, title, *rows)
	})
}

// hideNsPerOp drops the ns/op column: these benchmarks time fixed amounts
// of work themselves and report rates and latencies instead.
func hideNsPerOp(b *testing.B) { b.ReportMetric(0, "ns/op") }

// logTable prints rows as an aligned table through b.Log.
func logTable(b *testing.B, title string, rows []row) {
	b.Helper()
	w0, w1 := 0, 0
	for _, r := range rows {
		w0, w1 = max(w0, len(r.name)), max(w1, len(r.value))
	}
	// The testing package keeps 10 lines of a benchmark's log: the title
	// and up to 9 rows.
	out := title
	for _, r := range rows {
		out += fmt.Sprintf("\n  %-*s  %*s  %s", w0, r.name, w1, r.value, strings.TrimSpace(r.note))
	}
	b.Log(out)
}
