package state

import (
	"fmt"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// SetTaskState moves a task to state to, checked by CanTransition, with a
// reason and the leader's time in nanoseconds. Entering QUEUED assigns a new
// queue_seq. An active attempt (see Attempt.Active) follows the task: it
// starts with RUNNING and ends with the task's terminal state, or FAILED
// when the task goes back to QUEUED; a cancel leaves it active until its
// worker reports its end (Txn.ApplyAttemptEvent). The graph's counts and
// state follow too, and so does the accounting of the attempt's worker. It
// returns the new row, NotFound for an unknown task, and FailedPrecondition
// for a move the life cycle forbids (changing nothing). Dependents are not
// touched: see ResolveDependents.
func (t *Txn) SetTaskState(id string, to wire.TaskState, reason string, unixNanos int64) (*Task, error) {
	cur := t.Task(id)
	if cur == nil {
		return nil, errs.New(errs.NotFound, "task %q not found", id)
	}
	if !CanTransition(cur.State, to) {
		return nil, errs.New(errs.FailedPrecondition, "task %q: cannot move from %s to %s", id, cur.State, to)
	}
	return t.move(cur, to, wire.ReasonCode_REASON_CODE_UNSPECIFIED, reason, unixNanos, nil), nil
}

// move changes cur to state to, which the caller has checked; edit, if not
// nil, changes other fields of the new row first. An edit that ends the
// current attempt itself (setting its state and reason) keeps move from
// ending it the default way.
func (t *Txn) move(cur *Task, to wire.TaskState, code wire.ReasonCode, reason string, nanos int64, edit func(*Task)) *Task {
	return t.moveTask(cur, to, code, reason, nanos, edit, false)
}

// moveTask is move; keepAttempt leaves an active attempt active whatever
// the task's new state (a gang restart: the attempt runs until its worker
// stops it). A move of a gang's task is followed by its gang (gangFollow).
func (t *Txn) moveTask(cur *Task, to wire.TaskState, code wire.ReasonCode, reason string, nanos int64, edit func(*Task), keepAttempt bool) *Task {
	if !CanTransition(cur.State, to) {
		panic(fmt.Sprintf("state: index %d: task %q: illegal move from %s to %s", t.index, cur.ID, cur.State, to))
	}
	n := cur.clone()
	if edit != nil {
		edit(n)
	}
	n.State, n.Reason, n.ReasonCode = to, reason, code
	n.UpdateUnixNanos, n.ModifyIndex = nanos, t.index
	if to == queued {
		n.QueueSeq = t.takeQueueSeq()
		n.QueuedUnixNanos = nanos
	}
	if a := n.CurrentAttempt(); IsActive(cur.State) && a != nil && IsActive(a.State) && to != cancelled && !keepAttempt {
		// The active attempt follows the task; a cancelled task's attempt
		// stays active until its worker reports it stopped.
		a = n.editAttempt()
		switch to {
		case running:
			a.State = running
			if a.StartUnixNanos == 0 {
				a.StartUnixNanos = nanos
			}
		case queued: // the attempt failed or was lost; the task retries
			a.State, a.Reason, a.ReasonCode, a.FinishUnixNanos = failed, reason, code, nanos
		default:
			a.State, a.Reason, a.ReasonCode, a.FinishUnixNanos = to, reason, code, nanos
		}
	}
	t.putTask(cur, n)
	t.emitTask(n, nanos)
	t.countMove(n.GraphID, cur.State, to, nanos)
	g := t.writableGraph(n.GraphID)
	g.Metrics.observe(g, cur.State, n, nanos)
	if n.Spec.GetGang() != "" {
		t.gangFollow(cur.State, n, nanos)
	}
	switch {
	case !IsTerminal(to):
	case n.ServiceName() != "":
		t.serviceEnded(n, nanos) // also when stopped with its graph or in a graph's cancel: waiters elsewhere may be left
	case t.cancelling != n.GraphID:
		t.stopGraphServices(n.GraphID, nanos)
	}
	return n
}

// countMove updates a graph's counts for one task moving from one state to
// another and derives the graph's state, emitting its event if it changed.
func (t *Txn) countMove(graphID string, from, to wire.TaskState, nanos int64) {
	g := t.writableGraph(graphID)
	if g.Counts[from] == 0 {
		panic(fmt.Sprintf("state: index %d: graph %q counts no task in %s", t.index, graphID, from))
	}
	g.Counts[from]--
	g.Counts[to]++
	g.ModifyIndex = t.index
	s := DeriveGraphState(g.Counts, g.TaskCount, t.cancelling == graphID)
	if IsGraphTerminal(s) && t.cancelling != graphID && g.Counts[cancelled] > 0 {
		// Services stopped with their graph are neither success nor
		// failure (service.go).
		if k := t.stoppedWithGraph(graphID); k > 0 {
			c := g.Counts
			c[cancelled] -= k
			c[succeeded] += k
			s = DeriveGraphState(c, g.TaskCount, false)
		}
	}
	if s == g.State {
		return
	}
	g.State = s
	if IsGraphTerminal(s) {
		g.FinishUnixNanos = nanos
	}
	t.emitGraph(g, nanos)
}
