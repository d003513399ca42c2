package bench

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/wire"
)

// Size of the retention benchmark, before -megaflow.scale: tasks in all.
const retentionTasks = 100_000

// apply applies one command at the next index; it fails the benchmark if
// the FSM refuses it.
func (a *tableApplier) apply(b *testing.B, op fsm.Op, msg proto.Message) any {
	b.Helper()
	e, err := fsm.Encode(op, msg)
	if err != nil {
		b.Fatal(err)
	}
	a.index++
	res := a.f.Apply(&raft.Log{Index: a.index, Term: 1, Type: raft.LogCommand, Data: e})
	if err, ok := res.(error); ok {
		b.Fatalf("apply %s: %v", op, err)
	}
	return res
}

// runGraph submits graph id of tasks rollout tasks and runs each to
// SUCCEEDED on worker w with a result, through the entries a leader
// proposes: the submission, a plan, the STARTED and the EXITED events.
func (a *tableApplier) runGraph(b *testing.B, id string, tasks int, nanos int64) {
	b.Helper()
	a.submit(b, id, tasks)
	plan := &wire.PlanCommand{LeaderTerm: 1, UnixNanos: nanos}
	started := &wire.TaskEventsCommand{WorkerId: "w", UnixNanos: nanos + 1}
	exited := &wire.TaskEventsCommand{WorkerId: "w", UnixNanos: nanos + 2}
	for i := range tasks {
		tid := fmt.Sprintf("%s/rollout-%05d", id, i)
		plan.Attempts = append(plan.Attempts, &wire.PlannedAttempt{TaskId: tid, Attempt: 1, WorkerId: "w"})
		started.Events = append(started.Events, &wire.AttemptEvent{TaskId: tid, Attempt: 1,
			Kind: wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STARTED, UnixNanos: nanos + 1})
		exited.Events = append(exited.Events, &wire.AttemptEvent{TaskId: tid, Attempt: 1,
			Kind: wire.AttemptEventKind_ATTEMPT_EVENT_KIND_EXITED, UnixNanos: nanos + 2,
			Result: []byte(fmt.Sprintf(`{"reward": %d.5, "resolved": true}`, i%2))})
	}
	if res := a.apply(b, fsm.OpPlan, plan).(*fsm.PlanResult); len(res.Skipped) > 0 {
		b.Fatalf("plan of %s skipped %d attempts", id, len(res.Skipped))
	}
	a.apply(b, fsm.OpTaskEvents, started)
	a.apply(b, fsm.OpTaskEvents, exited)
}

// BenchmarkRetentionHeap measures what archiving finished graphs gives
// back (issue 17): retentionTasks rollout tasks in graphs of 100 (a
// rollout step) or of 1 (the worst case: a summary per task) are applied to an empty FSM (1-event ring: the table
// alone) under rules 5 and run to SUCCEEDED with a result each, then
// every graph is archived (OpArchiveGraphs, fsm.MaxArchiveBatch graphs an
// entry, as the leader proposes them). The live heap after two full GCs is
// read before filling, after, and after archiving; the figures are the
// table's heap before and after archiving and their ratio, min / median /
// max of 3 repetitions. Figures in results/retention.md.
func BenchmarkRetentionHeap(b *testing.B) {
	tasks := scaled(retentionTasks, 1000)
	for _, per := range []int{100, 1} {
		b.Run(fmt.Sprintf("graph=%d", per), func(b *testing.B) { retentionHeap(b, tasks, per) })
	}
}

// retentionHeap is one case of BenchmarkRetentionHeap: tasks tasks in
// graphs of per.
func retentionHeap(b *testing.B, tasks, per int) {
	graphs := (tasks + per - 1) / per
	var before, after, ratio []float64
	for range b.N {
		for rep := range 3 {
			base := heapAlloc()
			a := newTableFSM(b, 1)
			a.apply(b, fsm.OpSetRules, wrapperspb.UInt64(fsm.RulesCurrent))
			a.apply(b, fsm.OpWorkerUpsert, &wire.WorkerUpsertCommand{UnixNanos: 1, Info: &wire.WorkerInfo{Id: "w", Runtime: "fake",
				Capacity: &wire.Resources{CpuMillis: 1 << 40, MemoryBytes: 1 << 60}}})
			nanos := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano()
			ids := make([]string, graphs)
			for i := range graphs {
				ids[i] = fmt.Sprintf("ret%d-%07d", rep, i)
				a.runGraph(b, ids[i], min(per, tasks-i*per), nanos)
			}
			full := heapAlloc()
			if got := countTasks(a.f); got != tasks {
				b.Fatalf("table holds %d tasks, want %d", got, tasks)
			}
			archived := 0
			for i := 0; i < len(ids); i += fsm.MaxArchiveBatch {
				cmd := &wire.ArchiveGraphsCommand{GraphIds: ids[i:min(len(ids), i+fsm.MaxArchiveBatch)], UnixNanos: nanos + int64(7*time.Hour)}
				archived += len(a.apply(b, fsm.OpArchiveGraphs, cmd).(*fsm.ArchiveGraphsResult).Archived)
			}
			done := heapAlloc()
			if archived != graphs || countTasks(a.f) != 0 {
				b.Fatalf("archived %d of %d graphs, %d tasks left; want all, none", archived, graphs, countTasks(a.f))
			}
			runtime.KeepAlive(a)
			before = append(before, float64(full-base))
			after = append(after, float64(done-base))
			ratio = append(ratio, float64(full-base)/float64(max(done-base, 1)))
		}
	}
	hideNsPerOp(b)
	mmm := func(v []float64) (float64, float64, float64) {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[0], s[len(s)/2], s[len(s)-1]
	}
	lo, med, hi := mmm(before)
	b.ReportMetric(med/float64(tasks), "B/task-live")
	b.Logf("live table: %d tasks in %d graphs of %d: heap %.1f / %.1f / %.1f MiB (min / median / max), %.0f B per task (median)",
		tasks, graphs, per, lo/(1<<20), med/(1<<20), hi/(1<<20), med/float64(tasks))
	lo, med, hi = mmm(after)
	b.ReportMetric(med/float64(graphs), "B/graph-archived")
	b.Logf("archived: heap %.2f / %.2f / %.2f MiB, %.0f B per archived graph (median)", lo/(1<<20), med/(1<<20), hi/(1<<20), med/float64(graphs))
	lo, med, hi = mmm(ratio)
	b.ReportMetric(med, "x-smaller")
	b.Logf("ratio live / archived: %.1f / %.1f / %.1f", lo, med, hi)
}
