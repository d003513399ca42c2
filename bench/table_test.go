package bench

import (
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/megaflow/megaflow/head/fsm"
)

// These benchmarks build one head's task table directly through head/fsm,
// applying the same log entries a leader proposes for a submission (one
// SubmitGraph entry per graph, as head.submit builds it), with no Raft or
// network around it: what they measure is the table of one replica.

// tableApplier feeds SubmitGraph entries to an FSM at increasing indexes.
type tableApplier struct {
	f     *fsm.FSM
	index uint64
}

// newTableFSM returns an empty FSM as a head creates it, with an event ring
// of ring events (the head's default when ring is 0).
func newTableFSM(b *testing.B, ring int) *tableApplier {
	b.Helper()
	cfg := fsm.DefaultConfig()
	if ring > 0 {
		cfg.EventRingSize = ring
	}
	f, err := fsm.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return &tableApplier{f: f}
}

// submit applies graph id of tasks rollout tasks as one entry, built as
// the leader builds it (submitEntry). It fails the benchmark if the FSM
// refuses it.
func (a *tableApplier) submit(b *testing.B, id string, tasks int) {
	a.index++
	res := a.f.Apply(&raft.Log{Index: a.index, Term: 1, Type: raft.LogCommand, Data: submitEntry(b, id, tasks)})
	if err, ok := res.(error); ok {
		b.Fatalf("apply graph %s: %v", id, err)
	}
}

// fill applies graphs of perGraph tasks until the table holds total tasks.
func (a *tableApplier) fill(b *testing.B, prefix string, total, perGraph int) {
	for i := 0; i*perGraph < total; i++ {
		a.submit(b, fmt.Sprintf("%s-%07d", prefix, i), min(perGraph, total-i*perGraph))
	}
}

// heapAlloc returns the live heap after two full collections.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Sizes of the table benchmarks, before -megaflow.scale.
const (
	heapTasks     = 100_000
	snapshotTasks = 1_000_000
	snapshotGraph = 1_000 // tasks per graph in the snapshot benchmark
)

// BenchmarkTableHeap measures the live heap one replica's table holds per
// task (goal ≤ 2 KiB): heapTasks rollout tasks are applied to an empty FSM
// in graphs of 100 tasks (a rollout step) and of 1 task (the worst case: a
// graph row and a submission per task), and HeapAlloc after a full GC is
// compared with before. The event ring, bounded and the same size whatever
// the table holds, is measured apart: "table" uses a 1-event ring, "replica"
// the head's default ring, filled by the submissions' events.
func BenchmarkTableHeap(b *testing.B) {
	tasks := scaled(heapTasks, 1000)
	var rows []row
	for _, per := range []int{100, 1} {
		for _, ring := range []struct {
			name string
			size int
		}{{"table", 1}, {"replica", 0}} {
			b.Run(fmt.Sprintf("graph=%d/%s", per, ring.name), func(b *testing.B) {
				var perTask float64
				for range b.N {
					before := heapAlloc()
					a := newTableFSM(b, ring.size)
					a.fill(b, "heap", tasks, per)
					after := heapAlloc()
					if got := countTasks(a.f); got != tasks {
						b.Fatalf("table holds %d tasks, want %d", got, tasks)
					}
					runtime.KeepAlive(a)
					perTask = float64(after-before) / float64(tasks)
				}
				hideNsPerOp(b)
				b.ReportMetric(perTask, "B/task")
				b.ReportMetric(perTask/2048, "x-goal")
				setRow(&rows, row{
					fmt.Sprintf("%s, %d-task graphs", ring.name, per),
					fmt.Sprintf("%.0f B/task", perTask),
					fmt.Sprintf("%d tasks; goal <= 2048 B (%.2f x)", tasks, perTask/2048),
				})
			})
		}
	}
	summary(b, "BenchmarkTableHeap (live heap per task, one replica)", &rows)
}

func countTasks(f *fsm.FSM) int {
	n := 0
	for range f.View().Tasks() {
		n++
	}
	return n
}

// BenchmarkSnapshotRestore measures what Raft does with a head's table of
// snapshotTasks tasks (goal: snapshot + restore ≤ 10 s): Snapshot and
// Persist into a raft.FileSnapshotStore on disk (as a head's Raft does when
// it compacts its log, fsync included), then Open and Restore into a fresh
// FSM (as a restarting head, or a follower receiving InstallSnapshot,
// does). The source table is dropped before the restore, as in a restart.
func BenchmarkSnapshotRestore(b *testing.B) {
	tasks := scaled(snapshotTasks, 1000)
	store, err := raft.NewFileSnapshotStore(b.TempDir(), 1, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	var snapDur, restoreDur time.Duration
	var size int64
	for iter := range b.N {
		a := newTableFSM(b, 0)
		buildStart := time.Now()
		a.fill(b, fmt.Sprintf("snap%d", iter), tasks, snapshotGraph)
		build := time.Since(buildStart)
		index := a.index

		b.ResetTimer()
		start := time.Now()
		snap, err := a.f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		sink, err := store.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := snap.Persist(sink); err != nil {
			b.Fatal(err)
		}
		snap.Release()
		snapDur += time.Since(start)

		a = nil // a restarting head has no table yet
		runtime.GC()

		b2 := newTableFSM(b, 0)
		start = time.Now()
		meta, rc, err := store.Open(sink.ID())
		if err != nil {
			b.Fatal(err)
		}
		if err := b2.f.Restore(rc); err != nil {
			b.Fatal(err)
		}
		restoreDur += time.Since(start)
		b.StopTimer()
		size = meta.Size
		if got := countTasks(b2.f); got != tasks || b2.f.View().Index() != index {
			b.Fatalf("restored %d tasks at index %d, want %d at %d", got, b2.f.View().Index(), tasks, index)
		}
		b.Logf("built %d tasks in %v (%.0f tasks/s applied)", tasks, build.Round(time.Millisecond), float64(tasks)/build.Seconds())
		b.StartTimer()
	}
	snapDur /= time.Duration(b.N)
	restoreDur /= time.Duration(b.N)
	total := snapDur + restoreDur
	hideNsPerOp(b)
	b.ReportMetric(snapDur.Seconds(), "snapshot-s")
	b.ReportMetric(restoreDur.Seconds(), "restore-s")
	b.ReportMetric(total.Seconds(), "total-s")
	b.ReportMetric(float64(size)/float64(tasks), "snapshot-B/task")
	logTable(b, "BenchmarkSnapshotRestore (one replica's table, file snapshot store)", []row{
		{"snapshot (Snapshot + Persist, fsync)", fmt.Sprintf("%.2f s", snapDur.Seconds()), fmt.Sprintf("%d tasks, %.1f MB on disk", tasks, float64(size)/1e6)},
		{"restore (Open + Restore)", fmt.Sprintf("%.2f s", restoreDur.Seconds()), ""},
		{"snapshot + restore", fmt.Sprintf("%.2f s", total.Seconds()), "goal <= 10 s"},
	})
}
