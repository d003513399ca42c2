package fsm

import (
	"bytes"
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/wire"
)

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string     { return "mem" }
func (s *memSink) Close() error   { s.closed = true; return nil }
func (s *memSink) Cancel() error  { s.cancelled = true; return nil }
func (s *memSink) String() string { return "memSink" }

func sampleFSM(t *testing.T) *testFSM {
	f := newTestFSM(t, 0)
	g := graphSpec("g1", spec("a"), spec("b", "a"), spec("c", "b"))
	g.Labels = map[string]string{"team": "rl", "step": "7"}
	g.Tasks[0].Env = map[string]string{"Z": "1", "A": "2", "M": "3"}
	g.Tasks[0].Resources = &wire.Resources{CpuMillis: 500, Gpus: 1, GpuModel: "H100"}
	f.submit(g)
	f.submit(graphSpec("g2", spec("x"), spec("y")))
	f.move("g2/x", assigned, running, succeeded)
	f.ok(OpCancel, cancelTask("g1/b", "nope"))
	f.ok(OpSubmitGraph, chunkCmds(graphSpec("staged", spec("p"), spec("q")), 1, 9)[0])
	return f
}

func TestSnapshotRoundTrip(t *testing.T) {
	src := sampleFSM(t)
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Changes after Snapshot are not in it.
	before := dump(t, src.View())
	src.submit(graphSpec("late", spec("l")))
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil || !sink.closed {
		t.Fatalf("persist: %v closed %v", err, sink.closed)
	}
	snap.Release()

	dst := newTestFSM(t, 0)
	dst.submit(graphSpec("to-be-replaced", spec("r")))
	if err := dst.Restore(nopCloser{bytes.NewReader(sink.Bytes())}); err != nil {
		t.Fatal(err)
	}
	if d := firstDiff(before, dump(t, dst.View())); d != "" {
		t.Fatalf("restored table differs: %s", d)
	}
	v := dst.View()
	if v.Index() != 5 || dst.AppliedIndex() != 5 || v.Graph("to-be-replaced") != nil || len(v.StagedGraphs()) != 1 {
		t.Fatalf("index %d applied %d", v.Index(), dst.AppliedIndex())
	}
	// The restored table goes on: queue_seq continues, staging commits.
	dst.index = 5
	dst.ok(OpSubmitGraph, chunkCmds(graphSpec("staged", spec("p"), spec("q")), 1, 9)[1])
	if p, q := dst.task("staged/p"), dst.task("staged/q"); p.QueueSeq != 4 || q.QueueSeq != 5 {
		t.Fatalf("queue_seq %d %d after restore", p.QueueSeq, q.QueueSeq)
	}
	if a := dst.task("g1/a"); a.Spec.Resources.GetGpuModel() != "H100" || a.Spec.Env["M"] != "3" || a.Name() != "a" {
		t.Fatalf("spec %v", a.Spec)
	}
}

func TestRestoreRejectsBadSnapshots(t *testing.T) {
	good := snapshotBytes(t, sampleFSM(t).View())
	tests := map[string][]byte{
		"empty":     nil,
		"bad magic": append([]byte("not-a-snapshot-at-all"), good[21:]...),
		"truncated": good[:len(good)-30],
		"no end":    good[:len(good)-3],
		"bad kind":  append(append([]byte{}, good[:len(snapshotMagic)]...), 0x42, 0),
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			f := newTestFSM(t, 0)
			f.submit(graphSpec("keep", spec("k")))
			before := dump(t, f.View())
			if err := f.Restore(nopCloser{bytes.NewReader(data)}); err == nil {
				t.Fatal("no error")
			}
			if dump(t, f.View()) != before || f.AppliedIndex() != 1 {
				t.Fatal("failed restore changed the table")
			}
		})
	}
}

// typicalGraph returns a graph of n typical tasks: an image of about 40
// bytes, a 4-element command, 3 env vars and 2 dependencies.
func typicalGraph(id string, n int) *wire.GraphSpec {
	g := &wire.GraphSpec{Id: id, Tenant: "acme"}
	for i := range n {
		s := &wire.TaskSpec{
			Name:      fmt.Sprintf("t%06d", i),
			Image:     "ghcr.io/megaflow/swe-env-python:3.12-2025",
			Command:   []string{"python", "-m", "agent.run", fmt.Sprintf("--episode=%d", i)},
			Env:       map[string]string{"SEED": fmt.Sprint(i), "MODE": "eval", "LOG_LEVEL": "info"},
			Resources: &wire.Resources{CpuMillis: 1000, MemoryBytes: 2 << 30},
			Type:      "eval",
		}
		if i >= 2 {
			s.DependsOn = []string{fmt.Sprintf("t%06d", i-1), fmt.Sprintf("t%06d", i-2)}
		}
		g.Tasks = append(g.Tasks, s)
	}
	return g
}

// fillTasks submits graphs of 1,000 typical tasks until the table holds n,
// each graph in one entry, decoded from its encoding as on a follower.
func fillTasks(tb testing.TB, f *testFSM, n int) {
	const per = 1000
	base := typicalGraph("x", per)
	for gi := 0; gi*per < n; gi++ {
		base.Id = fmt.Sprintf("graph-%05d", gi)
		if left := n - gi*per; left < per {
			base.Tasks = base.Tasks[:left]
		}
		f.ok(OpSubmitGraph, submitCmd(base, int64(gi)))
	}
}

func heapAlloc() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkHeapPerTask measures the heap one typical task costs in the
// table, its spec and index entries included, through the real submit path
// (goal: at most 2 KiB per replica; bench/ compares it with the goal).
func BenchmarkHeapPerTask(b *testing.B) {
	const n = 100_000
	for range b.N {
		f := newTestFSM(b, 1) // keep the event ring out of the measurement
		before := heapAlloc()
		fillTasks(b, f, n)
		after := heapAlloc()
		b.ReportMetric(float64(after-before)/n, "heap-B/task")
		runtime.KeepAlive(f)
	}
}

var snapshotTasks = flag.Int("snapshot-tasks", 1_000_000, "tasks in BenchmarkSnapshotRestore's table")

// BenchmarkSnapshotRestore measures Persist and Restore of a table of
// -snapshot-tasks typical tasks: 1,000,000 by default, where the goal is at
// most 10 s for both together on two cores. The snapshot goes to memory
// (grown beforehand) so that the disk's speed stays out of the number. Run
// it with -benchtime 1x.
func BenchmarkSnapshotRestore(b *testing.B) {
	n := *snapshotTasks
	src := newTestFSM(b, 1)
	fillTasks(b, src, n)
	sink := &memSink{}
	sink.Grow(n * 300)
	b.ResetTimer()
	for range b.N {
		sink.Reset()
		start := time.Now()
		snap, _ := src.Snapshot()
		if err := snap.Persist(sink); err != nil {
			b.Fatal(err)
		}
		persisted := time.Since(start)

		dst := newTestFSM(b, 1)
		start = time.Now()
		if err := dst.Restore(nopCloser{bytes.NewReader(sink.Bytes())}); err != nil {
			b.Fatal(err)
		}
		restored := time.Since(start)
		b.ReportMetric(persisted.Seconds(), "persist-s")
		b.ReportMetric(restored.Seconds(), "restore-s")
		b.ReportMetric(float64(sink.Len())/float64(n), "bytes/task")
		b.Logf("%d tasks: persist %v, restore %v, total %v, %d MB", n, persisted.Round(time.Millisecond),
			restored.Round(time.Millisecond), (persisted + restored).Round(time.Millisecond), sink.Len()>>20)
		if dst.AppliedIndex() != src.AppliedIndex() || len(dst.View().TasksOfGraph("graph-00000")) != min(n, 1000) {
			b.Fatal("restored table differs")
		}
	}
}
