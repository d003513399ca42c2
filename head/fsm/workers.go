package fsm

import (
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
	lost, err := txn.WorkerDown(cmd.GetWorkerId(), cmd.GetLeft(), cmd.GetReason(), cmd.GetUnixNanos())
	if errs.ClassOf(err) == errs.NotFound {
		return &WorkerDownResult{}, nil
	}
	if err != nil {
		return nil, err
	}
	return &WorkerDownResult{Known: true, Lost: lost}, nil
}

// applyPlan applies the placements of a plan in order, skipping those the
// table refuses, then records the queueing reasons of the unplaced tasks in
// task id order.
func applyPlan(txn *state.Txn, cmd *wire.PlanCommand) (*PlanResult, error) {
	res := &PlanResult{}
	nanos := cmd.GetUnixNanos()
	for _, p := range cmd.GetAttempts() {
		if _, err := txn.Place(p, cmd.GetLeaderTerm(), nanos); err != nil {
			if res.Skipped == nil {
				res.Skipped = map[string]string{}
			}
			res.Skipped[p.GetTaskId()] = err.Error()
			continue
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

// applyTaskEvents applies a worker's events in order.
func applyTaskEvents(txn *state.Txn, cmd *wire.TaskEventsCommand) (*TaskEventsResult, error) {
	if cmd.GetWorkerId() == "" {
		return nil, errs.New(errs.InvalidArgument, "task events: no worker id")
	}
	res := &TaskEventsResult{}
	for _, ev := range cmd.GetEvents() {
		if txn.ApplyAttemptEvent(cmd.GetWorkerId(), ev, cmd.GetUnixNanos()) {
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
	for _, p := range cmd.GetAttempts() {
		why := state.LostReason(p.GetWorkerId(), cmd.GetReason())
		loss := txn.LoseAttempt(p.GetTaskId(), p.GetAttempt(), p.GetWorkerId(), why, cmd.GetUnixNanos())
		if loss == state.LossNone {
			res.Ignored++
		}
		res.Lost.Add(loss)
	}
	return res, nil
}
