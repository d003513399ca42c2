package state

import (
	"fmt"
	"time"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// Place opens the attempt p describes: the task's new attempt p.Attempt on
// worker p.WorkerId, ASSIGNED at the leader's time with the leader's term
// and the GPUs by UUID, the task ASSIGNED with its queueing reason cleared,
// and the attempt's resources booked on the worker. The FSM calls it for
// each placement of an OpPlan, in order, so each sees the ones before.
//
// Place is the verifier of the leader's optimistic plan: it re-checks the
// placement against the table and refuses, changing nothing, one that no
// longer holds: NotFound for an unknown task or worker, FailedPrecondition
// when the task is not QUEUED, the attempt number is not the task's next,
// the worker is not ALIVE or lacks room for the task's CPU, memory or GPUs,
// or the GPU UUIDs are not exactly as many as the task asks for, repeat
// one, or name one an attempt on the worker holds. The error's message says
// which.
func (t *Txn) Place(p *wire.PlannedAttempt, leaderTerm uint64, unixNanos int64) (*Task, error) {
	cur, err := t.CheckPlace(p)
	if err != nil {
		return nil, err
	}
	uuids := p.GetGpuUuids()
	return t.move(cur, assigned, wire.ReasonCode_REASON_CODE_UNSPECIFIED, "", unixNanos, func(n *Task) {
		attempts := make([]Attempt, len(n.Attempts), len(n.Attempts)+1)
		copy(attempts, n.Attempts)
		n.Attempts = append(attempts, Attempt{Number: p.GetAttempt(), WorkerID: p.GetWorkerId(), State: assigned,
			AssignUnixNanos: unixNanos, LeaderTerm: leaderTerm, GPUUUIDs: uuids})
	}), nil
}

// CheckPlace runs Place's checks of p against the table without changing
// anything, and returns the task's row or Place's error. The FSM checks
// every placement of a gang before it places any.
func (t *Txn) CheckPlace(p *wire.PlannedAttempt) (*Task, error) {
	id, wid := p.GetTaskId(), p.GetWorkerId()
	cur := t.Task(id)
	if cur == nil {
		return nil, errs.New(errs.NotFound, "task %q not found", id)
	}
	if cur.State != queued {
		return nil, errs.New(errs.FailedPrecondition, "task %q is %s, not QUEUED", id, cur.State)
	}
	if a := cur.ActiveAttempt(); a != nil {
		return nil, errs.New(errs.FailedPrecondition, "task %q: its attempt %d still runs on worker %q (being stopped)", id, a.Number, a.WorkerID)
	}
	if next := uint32(len(cur.Attempts)) + 1; p.GetAttempt() != next {
		return nil, errs.New(errs.FailedPrecondition, "task %q: attempt %d is not its next attempt (%d)", id, p.GetAttempt(), next)
	}
	w := t.Worker(wid)
	if w == nil {
		return nil, errs.New(errs.NotFound, "worker %q not found", wid)
	}
	if !w.Alive() {
		return nil, errs.New(errs.FailedPrecondition, "worker %q is %s", wid, w.Status)
	}
	need := ResourcesOf(cur.Spec.GetResources())
	if free := w.Free(); !need.Fits(free) {
		return nil, errs.New(errs.FailedPrecondition, "worker %q lacks %s for task %q (it needs %s; %s of the worker's %s are free)",
			wid, need.Shortfall(free), id, need, free, w.Capacity())
	}
	uuids := p.GetGpuUuids()
	if len(uuids) > 0 {
		if len(uuids) != int(need.GPUs) {
			return nil, errs.New(errs.FailedPrecondition, "task %q needs %d GPUs; the plan names %d", id, need.GPUs, len(uuids))
		}
		for i, u := range uuids {
			if u == "" {
				return nil, errs.New(errs.FailedPrecondition, "task %q: empty GPU UUID", id)
			}
			for _, v := range uuids[:i] {
				if u == v {
					return nil, errs.New(errs.FailedPrecondition, "task %q: GPU %q named twice", id, u)
				}
			}
			if r := w.UnhealthyGPUs()[u]; r != "" {
				return nil, errs.New(errs.FailedPrecondition, "worker %q: GPU %q is unhealthy (%s)", wid, u, r)
			}
			if h := w.GPUHolder(u); h != "" {
				return nil, errs.New(errs.FailedPrecondition, "worker %q: GPU %q is held by task %q", wid, u, h)
			}
		}
	}
	return cur, nil
}

// SetQueueReason records why a QUEUED task could not be placed (e.g. "no
// worker has 64 GiB of memory"), for the task's readers. It changes
// nothing, and emits no event, when the task is not QUEUED or already has
// that reason, so that a scheduler repeating its verdict every round does
// not flood watchers. The FSM calls it for the unplaced tasks of an OpPlan,
// in task id order. It returns whether the reason changed.
func (t *Txn) SetQueueReason(taskID, reason string, unixNanos int64) bool {
	cur := t.Task(taskID)
	if cur == nil || cur.State != queued || cur.Reason == reason {
		return false
	}
	n := cur.clone()
	n.Reason, n.ReasonCode = reason, wire.ReasonCode_REASON_CODE_QUEUED
	n.UpdateUnixNanos, n.ModifyIndex = unixNanos, t.index
	t.putTask(cur, n)
	t.emitTask(n, unixNanos)
	return true
}

// FailQueued fails the task with taskID, with reason, if it is still QUEUED
// with that queueing reason and entered QUEUED at or before
// queuedBefore (the leader found it unplaceable for too long); its
// dependents are resolved. Otherwise it changes nothing. The FSM calls it
// for each task of an OpFailQueued, in order. It returns whether the task
// failed.
func (t *Txn) FailQueued(taskID, reason string, queuedBefore, unixNanos int64) bool {
	cur := t.Task(taskID)
	if cur == nil || cur.State != queued || cur.Reason != reason || cur.QueuedUnixNanos > queuedBefore {
		return false
	}
	waited := time.Duration(unixNanos - cur.QueuedUnixNanos).Round(time.Second)
	n := t.move(cur, failed, wire.ReasonCode_REASON_CODE_UNPLACEABLE, fmt.Sprintf("%s (gave up after %v queued: the heads' --max-queue-wait)", reason, waited), unixNanos, nil)
	if _, err := t.ResolveDependents(n, unixNanos); err != nil {
		panic(fmt.Sprintf("state: index %d: %v", t.index, err))
	}
	return true
}
