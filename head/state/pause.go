package state

import (
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// Sandbox pause (docs/sandboxes.md, "Pause and resume"): a READY
// sandbox's running attempt carries a mark, Attempt.Paused, that every
// head reads to show the sandbox PAUSED and to refuse its execs and file
// calls. The worker pauses the container before the leader commits the
// mark and unpauses it after the leader commits its removal, so the mark
// is never set on a container that runs.

// RulesSandboxPause is the first rules version that has sandbox pause:
// OpSandboxPause applies (SetSandboxPaused; refused below it, changing
// nothing). Heads pause sandboxes only from it on.
const RulesSandboxPause uint64 = 4

// SetSandboxPaused marks (paused true) or unmarks attempt number of
// sandbox graph id paused, at leader time nanos, and reports whether that
// changed the row: marking a paused attempt, or unmarking one that is
// not, changes nothing. The FSM calls it for an OpSandboxPause (rules 4).
// Errors, changing nothing: NotFound (no such sandbox), FailedPrecondition
// (the graph is not a sandbox; its task is not RUNNING: not started yet,
// or ended; number is not its running attempt).
func (t *Txn) SetSandboxPaused(id string, number uint32, paused bool, nanos int64) (bool, error) {
	if t.Graph(id) == nil {
		return false, errs.New(errs.NotFound, "sandbox %s not found", id)
	}
	cur := t.Task(spec.SandboxTaskID(id))
	if cur == nil || cur.Spec.GetSandbox() == nil {
		return false, errs.New(errs.FailedPrecondition, "graph %s is not a sandbox: only a sandbox can be paused or resumed", id)
	}
	if cur.State != wire.TaskState_TASK_STATE_RUNNING {
		return false, errs.New(errs.FailedPrecondition, "sandbox %s is not running (its task is %s): only a READY or PAUSED sandbox can be paused or resumed", id, cur.State)
	}
	a := cur.ActiveAttempt()
	if a == nil || a.Number != number || a.State != wire.TaskState_TASK_STATE_RUNNING {
		return false, errs.New(errs.FailedPrecondition, "sandbox %s: attempt %d is not its running attempt: get the sandbox again", id, number)
	}
	if a.Paused == paused {
		return false, nil
	}
	n := cur.clone()
	n.editAttempt().Paused = paused
	n.UpdateUnixNanos, n.ModifyIndex = nanos, t.index
	t.putTask(cur, n)
	return true, nil
}
