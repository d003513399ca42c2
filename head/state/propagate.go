package state

import (
	"fmt"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// ReasonUpstreamFailed is the reason of a task cancelled because a task it
// depends on ended without succeeding.
const ReasonUpstreamFailed = "upstream_failed"

// ResolveDependents carries the outcome of a task that just became terminal
// to the tasks waiting on it, transitively. A dependent is touched only while
// PENDING. If done SUCCEEDED, or the dependent has run_on_upstream_failure,
// the dependency is resolved: deps_remaining drops by one and at zero the
// dependent becomes QUEUED. Otherwise the dependent is CANCELLED with reason
// "upstream_failed" and its own dependents are resolved the same way.
// Dependents are visited breadth first in each task's dependents order, so
// events and queue_seq are deterministic.
//
// The FSM calls it after every move to a terminal state (cancel, and the
// completion ops). It returns how many tasks it cancelled, and
// FailedPrecondition if done is not terminal.
func (t *Txn) ResolveDependents(done *Task, unixNanos int64) (cancelledCount uint32, err error) {
	if !IsTerminal(done.State) {
		return 0, errs.New(errs.FailedPrecondition, "task %q: %s is not terminal", done.ID, done.State)
	}
	work := []*Task{done}
	for len(work) > 0 {
		up := work[0]
		work = work[1:]
		ok := up.State == succeeded
		for _, name := range up.Dependents {
			id := up.GraphID + "/" + name
			d := t.Task(id)
			if d == nil {
				panic(fmt.Sprintf("state: index %d: task %q: dependent %q missing", t.index, up.ID, id))
			}
			if d.State != pending {
				continue
			}
			if d.DepsRemaining == 0 {
				panic(fmt.Sprintf("state: index %d: task %q: PENDING with no dependency left", t.index, id))
			}
			switch {
			case ok || d.Spec.GetRunOnUpstreamFailure():
				if d.DepsRemaining > 1 {
					n := d.clone()
					n.DepsRemaining--
					n.ModifyIndex = t.index
					t.putTask(d, n)
					continue
				}
				t.move(d, queued, wire.ReasonCode_REASON_CODE_UNSPECIFIED, "", unixNanos, func(n *Task) { n.DepsRemaining = 0 })
			default:
				work = append(work, t.move(d, cancelled, wire.ReasonCode_REASON_CODE_UPSTREAM_FAILED, ReasonUpstreamFailed, unixNanos, nil))
				cancelledCount++
			}
		}
	}
	return cancelledCount, nil
}

// CancelTask cancels the task with id if it is not terminal yet, with
// code, reason and the leader's time, and resolves its dependents (some of which
// may be cancelled as "upstream_failed"); the other tasks of its gang are
// cancelled too (gang.go). It returns how many tasks moved to CANCELLED
// (0 for a task already terminal) or NotFound.
func (t *Txn) CancelTask(id string, code wire.ReasonCode, reason string, unixNanos int64) (uint32, error) {
	cur := t.Task(id)
	if cur == nil {
		return 0, errs.New(errs.NotFound, "task %q not found", id)
	}
	if IsTerminal(cur.State) {
		return 0, nil
	}
	before := t.Graph(cur.GraphID).Counts[cancelled]
	n := t.move(cur, cancelled, code, reason, unixNanos, nil)
	if _, err := t.ResolveDependents(n, unixNanos); err != nil {
		panic(fmt.Sprintf("state: index %d: %v", t.index, err))
	}
	return t.Graph(cur.GraphID).Counts[cancelled] - before, nil
}

// CancelGraph cancels every task of the graph with id that is not terminal,
// in id order, with reason and the leader's time; the graph ends CANCELLED
// with that reason, its event after those of its tasks. It returns how many
// tasks moved to CANCELLED (0 for a graph already finished) or NotFound.
func (t *Txn) CancelGraph(id string, code wire.ReasonCode, reason string, unixNanos int64) (uint32, error) {
	g := t.Graph(id)
	if g == nil {
		return 0, errs.New(errs.NotFound, "graph %q not found", id)
	}
	if IsGraphTerminal(g.State) {
		return 0, nil
	}
	t.writableGraph(id).Reason = reason
	t.cancelling = id
	defer func() { t.cancelling = "" }()
	var n uint32
	for _, task := range t.TasksOfGraph(id) {
		if cur := t.Task(task.ID); !IsTerminal(cur.State) {
			t.move(cur, cancelled, code, reason, unixNanos, nil)
			n++
		}
	}
	if g := t.Graph(id); g.State != wire.GraphState_GRAPH_STATE_CANCELLED {
		panic(fmt.Sprintf("state: index %d: graph %q is %s after cancelling all its tasks", t.index, id, g.State))
	}
	return n, nil
}
