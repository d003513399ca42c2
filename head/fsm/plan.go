package fsm

import (
	"fmt"
	"maps"
	"slices"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// The plan ops: placing tasks on workers (gangs all at once), refreshing
// queueing reasons, and failing what no worker can run. The rules live in
// head/state (Txn.Place, SetQueueReason); these functions walk a command
// in a fixed order and count.

// applyPlan applies the placements of a plan in order, skipping those the
// table refuses (state.Txn.Place) and those that would take a tenant or the
// cluster over quota (state.QuotaGuard, counting the placements before
// them), then records the queueing reasons of the unplaced tasks in task id
// order.
func applyPlan(txn *state.Txn, cmd *wire.PlanCommand) (*PlanResult, error) {
	res := &PlanResult{}
	nanos := cmd.GetUnixNanos()
	guard := txn.QuotaGuard()
	skip := func(id string, err error) {
		if res.Skipped == nil {
			res.Skipped = map[string]string{}
		}
		res.Skipped[id] = err.Error()
	}
	gangs := map[string]bool{} // graph + "/" + gang -> applied or refused
	for _, p := range cmd.GetAttempts() {
		if t := txn.Task(p.GetTaskId()); t != nil && t.Spec.GetGang() != "" {
			k := t.GraphID + "/" + t.Spec.GetGang()
			if !gangs[k] {
				gangs[k] = true
				applyGang(txn, cmd, t, guard, res, skip)
			}
			continue
		}
		if guard != nil {
			if t := txn.Task(p.GetTaskId()); t != nil && t.State == wire.TaskState_TASK_STATE_QUEUED {
				if err := guard.Admit(t); err != nil {
					skip(p.GetTaskId(), err)
					continue
				}
			}
		}
		placed, err := txn.Place(p, cmd.GetLeaderTerm(), nanos)
		if err != nil {
			skip(p.GetTaskId(), err)
			continue
		}
		if guard != nil {
			guard.Charge(placed)
		}
		res.Applied = append(res.Applied, p.GetTaskId())
	}
	unplaced := cmd.GetUnplaced()
	for _, id := range slices.Sorted(maps.Keys(unplaced)) {
		if txn.SetQueueReason(id, unplaced[id], nanos) {
			res.Reasons++
		}
	}
	return res, nil
}

// applyGang applies the placements of cmd for the gang of task t all
// together, or none: the plan must place every task of the gang, each on
// its own worker, every placement must pass Place's checks, and the gang
// must fit the quotas as a whole. A refused gang's placements are all
// skipped with the same error.
func applyGang(txn *state.Txn, cmd *wire.PlanCommand, t *state.Task, guard *state.QuotaGuard, res *PlanResult, skip func(string, error)) {
	gang := t.Spec.GetGang()
	var ps []*wire.PlannedAttempt
	var tasks []*state.Task
	for _, p := range cmd.GetAttempts() {
		if o := txn.Task(p.GetTaskId()); o != nil && o.GraphID == t.GraphID && o.Spec.GetGang() == gang {
			ps = append(ps, p)
			tasks = append(tasks, o)
		}
	}
	refuse := func(err error) {
		for _, p := range ps {
			skip(p.GetTaskId(), err)
		}
	}
	members := len(txn.GangTasks(t.GraphID, gang))
	if len(ps) != members {
		refuse(errs.New(errs.FailedPrecondition, "gang %q of graph %q: the plan places %d of its %d tasks; a gang is placed whole", gang, t.GraphID, len(ps), members))
		return
	}
	workers := map[string]string{}
	for _, p := range ps {
		if o, dup := workers[p.GetWorkerId()]; dup {
			refuse(errs.New(errs.FailedPrecondition, "gang %q of graph %q: tasks %q and %q both placed on worker %q; a gang takes one worker per task",
				gang, t.GraphID, o, p.GetTaskId(), p.GetWorkerId()))
			return
		}
		workers[p.GetWorkerId()] = p.GetTaskId()
		if _, err := txn.CheckPlace(p); err != nil {
			refuse(errs.New(errs.FailedPrecondition, "gang %q of graph %q: %v", gang, t.GraphID, err))
			return
		}
	}
	if guard != nil {
		if err := guard.AdmitAll(tasks); err != nil {
			refuse(errs.New(errs.FailedPrecondition, "gang %q of graph %q: %v", gang, t.GraphID, err))
			return
		}
	}
	for _, p := range ps {
		// Checked above, one worker each: nothing a placement books can
		// change the verdict on another.
		placed, err := txn.Place(p, cmd.GetLeaderTerm(), cmd.GetUnixNanos())
		if err != nil {
			panic(fmt.Sprintf("fsm: gang %q of graph %q: placement checked, then refused: %v", gang, t.GraphID, err))
		}
		if guard != nil {
			guard.Charge(placed)
		}
		res.Applied = append(res.Applied, p.GetTaskId())
	}
}

// applyFailQueued fails, in order, the tasks the leader found unplaceable
// for too long, where they still are (state.Txn.FailQueued).
func applyFailQueued(txn *state.Txn, cmd *wire.FailQueuedCommand) (*FailQueuedResult, error) {
	ids, reasons := cmd.GetTaskIds(), cmd.GetReasons()
	if len(ids) != len(reasons) {
		return nil, errs.New(errs.InvalidArgument, "fail queued: %d task ids but %d reasons", len(ids), len(reasons))
	}
	res := &FailQueuedResult{}
	for i, id := range ids {
		if txn.FailQueued(id, reasons[i], cmd.GetQueuedBeforeUnixNanos(), cmd.GetUnixNanos()) {
			res.Failed++
		}
	}
	return res, nil
}
