package fsm

import (
	"fmt"
	"maps"
	"slices"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// The worker ops: workers coming and going, plans placing tasks on them,
// and what the workers report about the attempts they run. The rules live
// in head/state (Txn.UpsertWorker, WorkerDown, Place, SetQueueReason,
// ApplyAttemptEvent, LoseAttempt); these functions walk a command in a
// fixed order and count.

// applyWorkerUpsert records a worker as ALIVE with the info it announced.
func applyWorkerUpsert(txn *state.Txn, cmd *wire.WorkerUpsertCommand) (*WorkerUpsertResult, error) {
	created, err := txn.UpsertWorker(cmd.GetInfo(), cmd.GetUnixNanos())
	if err != nil {
		return nil, err
	}
	return &WorkerUpsertResult{Created: created}, nil
}

// applyWorkerDown declares a worker DOWN (or LEFT) and loses its attempts.
// An unknown worker changes nothing.
func applyWorkerDown(txn *state.Txn, cmd *wire.WorkerDownCommand) (*WorkerDownResult, error) {
	if cmd.GetWorkerId() == "" {
		return nil, errs.New(errs.InvalidArgument, "worker down: no worker id")
	}
	code := cmd.GetReasonCode()
	if code == wire.ReasonCode_REASON_CODE_UNSPECIFIED {
		code = wire.ReasonCode_REASON_CODE_WORKER_LOST
	}
	lost, err := txn.WorkerDown(cmd.GetWorkerId(), cmd.GetLeft(), code, cmd.GetReason(), cmd.GetUnixNanos())
	if errs.ClassOf(err) == errs.NotFound {
		return &WorkerDownResult{}, nil
	}
	if err != nil {
		return nil, err
	}
	return &WorkerDownResult{Known: true, Lost: lost}, nil
}

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

// applyTaskEvents applies a worker's events in order, each with the retry
// backoff the leader chose for it.
func applyTaskEvents(txn *state.Txn, cmd *wire.TaskEventsCommand) (*TaskEventsResult, error) {
	if cmd.GetWorkerId() == "" {
		return nil, errs.New(errs.InvalidArgument, "task events: no worker id")
	}
	res := &TaskEventsResult{}
	backoffs := cmd.GetRetryBackoffNanos()
	for i, ev := range cmd.GetEvents() {
		var backoff int64
		if i < len(backoffs) {
			backoff = backoffs[i]
		}
		if txn.ApplyAttemptEvent(cmd.GetWorkerId(), ev, cmd.GetUnixNanos(), backoff) {
			res.Applied++
		} else {
			res.Ignored++
		}
	}
	return res, nil
}

// applyAttemptsLost loses the attempts named, in order, where they are
// still current and active on their worker.
func applyAttemptsLost(txn *state.Txn, cmd *wire.AttemptsLostCommand) (*AttemptsLostResult, error) {
	res := &AttemptsLostResult{}
	code := cmd.GetReasonCode()
	if code == wire.ReasonCode_REASON_CODE_UNSPECIFIED {
		code = wire.ReasonCode_REASON_CODE_NOT_ON_WORKER
	}
	for _, p := range cmd.GetAttempts() {
		why := state.LostReason(p.GetWorkerId(), cmd.GetReason())
		loss := txn.LoseAttempt(p.GetTaskId(), p.GetAttempt(), p.GetWorkerId(), code, why, cmd.GetUnixNanos())
		if loss == state.LossNone {
			res.Ignored++
		}
		res.Lost.Add(loss)
	}
	return res, nil
}

// applySetQuota sets or removes a quota (the cluster limit for an empty
// tenant).
func applySetQuota(txn *state.Txn, cmd *wire.SetQuotaCommand) (*SetQuotaResult, error) {
	if cmd.GetQuota() == nil {
		return nil, errs.New(errs.InvalidArgument, "set quota: no quota")
	}
	if err := txn.SetQuota(cmd.GetQuota(), cmd.GetUnixNanos()); err != nil {
		return nil, err
	}
	q, _ := state.QuotaFromWire(cmd.GetQuota())
	return &SetQuotaResult{Removed: q.Unlimited()}, nil
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

// applyPoolWarm sets or removes a pre-warm target (state.Txn.SetPoolTarget).
func applyPoolWarm(txn *state.Txn, cmd *wire.PoolWarmCommand) (*PoolWarmResult, error) {
	removed, err := txn.SetPoolTarget(cmd.GetTarget(), cmd.GetUnixNanos())
	if err != nil {
		return nil, err
	}
	return &PoolWarmResult{Removed: removed}, nil
}

// applyGpuHealth records a worker's unhealthy GPUs and loses the attempts
// holding them (state.Txn.SetGPUHealth). An unknown worker changes nothing.
func applyGpuHealth(txn *state.Txn, cmd *wire.GpuHealthCommand) (*GpuHealthResult, error) {
	if cmd.GetWorkerId() == "" {
		return nil, errs.New(errs.InvalidArgument, "gpu health: no worker id")
	}
	n, lost, err := txn.SetGPUHealth(cmd.GetWorkerId(), cmd.GetUnhealthy(), cmd.GetUnixNanos())
	if errs.ClassOf(err) == errs.NotFound {
		return &GpuHealthResult{}, nil
	}
	if err != nil {
		return nil, err
	}
	return &GpuHealthResult{Unhealthy: n, Lost: lost}, nil
}
