package fsm

import (
	"testing"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

const (
	pending   = wire.TaskState_TASK_STATE_PENDING
	queued    = wire.TaskState_TASK_STATE_QUEUED
	assigned  = wire.TaskState_TASK_STATE_ASSIGNED
	running   = wire.TaskState_TASK_STATE_RUNNING
	succeeded = wire.TaskState_TASK_STATE_SUCCEEDED
	failed    = wire.TaskState_TASK_STATE_FAILED
	cancelled = wire.TaskState_TASK_STATE_CANCELLED
)

// move stands in for the task-completion ops of the next step: it moves a
// task through the given states in one entry and resolves its dependents
// when it ends terminal.
func (f *testFSM) move(id string, path ...wire.TaskState) {
	f.tb.Helper()
	f.index++
	txn := f.store.WriteTxn(f.index)
	var task *state.Task
	var err error
	for _, s := range path {
		if task, err = txn.SetTaskState(id, s, "test", int64(f.index)); err != nil {
			f.tb.Fatal(err)
		}
	}
	if state.IsTerminal(task.State) {
		if _, err := txn.ResolveDependents(task, int64(f.index)); err != nil {
			f.tb.Fatal(err)
		}
	}
	events := txn.TakeEvents()
	txn.Commit()
	f.publish(f.index, events)
}

func cancelGraph(id, reason string) *wire.CancelCommand {
	return &wire.CancelCommand{GraphId: id, Reason: reason, UnixNanos: 500}
}

func cancelTask(id, reason string) *wire.CancelCommand {
	return &wire.CancelCommand{TaskId: id, Reason: reason, UnixNanos: 500}
}

func TestCancelGraph(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", spec("a"), spec("b", "a"), spec("c"), spec("d"), spec("e")))
	f.move("g/c", assigned, running, succeeded)
	f.move("g/d", assigned)
	f.move("g/e", assigned, running)
	res := f.ok(OpCancel, cancelGraph("g", "user asked")).(*CancelResult)
	if res.Cancelled != 4 {
		t.Fatalf("cancelled %d, want 4", res.Cancelled)
	}
	if got := states(f, "g/a", "g/b", "g/c", "g/d", "g/e"); got != "CANCELLED CANCELLED SUCCEEDED CANCELLED CANCELLED" {
		t.Fatal(got)
	}
	if a := f.task("g/a"); a.Reason != "user asked" || a.UpdateUnixNanos != 500 {
		t.Fatalf("a: %+v", a)
	}
	g := f.View().Graph("g")
	if g.State != wire.GraphState_GRAPH_STATE_CANCELLED || g.Reason != "user asked" || g.FinishUnixNanos != 500 ||
		g.Counts[cancelled] != 4 || g.Counts[succeeded] != 1 {
		t.Fatalf("graph %+v", g)
	}
	// Again: nothing left to cancel.
	if res := f.ok(OpCancel, cancelGraph("g", "again")).(*CancelResult); res.Cancelled != 0 {
		t.Fatalf("second cancel: %d", res.Cancelled)
	}
	if g := f.View().Graph("g"); g.Reason != "user asked" {
		t.Fatalf("second cancel changed the graph: %+v", g)
	}
}

func TestCancelGraphAfterFailureIsCancelled(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", spec("a"), spec("b")))
	f.move("g/a", assigned, running, failed)
	f.ok(OpCancel, cancelGraph("g", ""))
	g := f.View().Graph("g")
	if g.State != wire.GraphState_GRAPH_STATE_CANCELLED || g.Reason != defaultCancelReason {
		t.Fatalf("graph %+v", g)
	}
}

func TestCancelTaskPropagates(t *testing.T) {
	// a -> b -> c; a -> d (runs on upstream failure, also waits on e);
	// a -> f (runs on upstream failure, waits on nothing else); g apart.
	tasks := []*wire.TaskSpec{spec("a"), spec("b", "a"), spec("c", "b"), spec("d", "a", "e"), spec("e"),
		spec("f", "a"), spec("g")}
	tasks[3].RunOnUpstreamFailure = true
	tasks[5].RunOnUpstreamFailure = true
	f := newTestFSM(t, 0)
	f.submit(graphSpec("x", tasks...))
	res := f.ok(OpCancel, cancelTask("x/a", "no longer needed")).(*CancelResult)
	if res.Cancelled != 3 {
		t.Fatalf("cancelled %d, want 3 (a, b, c)", res.Cancelled)
	}
	if got := states(f, "x/a", "x/b", "x/c", "x/d", "x/e", "x/f", "x/g"); got != "CANCELLED CANCELLED CANCELLED PENDING QUEUED QUEUED QUEUED" {
		t.Fatal(got)
	}
	if b := f.task("x/b"); b.Reason != state.ReasonUpstreamFailed {
		t.Fatalf("b: reason %q", b.Reason)
	}
	if d := f.task("x/d"); d.DepsRemaining != 1 {
		t.Fatalf("d: deps_remaining %d", d.DepsRemaining)
	}
	if fq := f.task("x/f"); fq.DepsRemaining != 0 || fq.QueueSeq == 0 {
		t.Fatalf("f: %+v", fq)
	}
	f.move("x/e", assigned, running, succeeded)
	if d := f.task("x/d"); d.State != queued || d.DepsRemaining != 0 {
		t.Fatalf("d after e succeeded: %+v", d)
	}
	// Finish the rest: no task failed, so the graph ends CANCELLED.
	for _, id := range []string{"x/d", "x/f", "x/g"} {
		f.move(id, assigned, running, succeeded)
	}
	if g := f.View().Graph("x"); g.State != wire.GraphState_GRAPH_STATE_CANCELLED {
		t.Fatalf("graph %s", g.State)
	}
}

func TestCancelTaskTerminalOrUnknown(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", spec("a"), spec("b")))
	f.move("g/a", assigned, running, succeeded)
	if res := f.ok(OpCancel, cancelTask("g/a", "late")).(*CancelResult); res.Cancelled != 0 {
		t.Fatalf("cancelled a finished task: %d", res.Cancelled)
	}
	f.refused(errs.NotFound, OpCancel, cancelTask("g/zz", ""))
	f.refused(errs.NotFound, OpCancel, cancelGraph("nope", ""))
	f.refused(errs.InvalidArgument, OpCancel, &wire.CancelCommand{})
	f.refused(errs.InvalidArgument, OpCancel, &wire.CancelCommand{GraphId: "h", TaskId: "g/b"})
	f.refused(errs.InvalidArgument, OpCancel, &wire.CancelCommand{TaskId: "no-slash"})
}

func TestDropStaged(t *testing.T) {
	f := newTestFSM(t, 0)
	a := chunkCmds(graphSpec("a", spec("1"), spec("2"), spec("3")), 1, 1)
	b := chunkCmds(graphSpec("b", spec("1"), spec("2")), 1, 2)
	f.ok(OpSubmitGraph, a[0])
	f.ok(OpSubmitGraph, a[1])
	f.ok(OpSubmitGraph, b[0])
	f.submit(graphSpec("c", spec("1")))
	res := f.ok(OpDropStaged, &wire.DropStagedCommand{GraphIds: []string{"a", "c", "zz"}}).(*DropStagedResult)
	if res.Dropped != 2 {
		t.Fatalf("dropped %d", res.Dropped)
	}
	v := f.View()
	if sg := v.StagedGraphs(); len(sg) != 1 || sg[0].GraphID != "b" || v.Graph("c") == nil {
		t.Fatalf("staged %+v", sg)
	}
	// The last chunk of a now finds chunks missing.
	f.refused(errs.FailedPrecondition, OpSubmitGraph, a[2])
}
