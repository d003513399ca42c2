package fsm

import (
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// The worker ops: workers coming and going, their GPUs' health, and the
// attempts a worker no longer has. Plans are in plan.go, attempt events in
// taskevents.go. The rules live in head/state (Txn.UpsertWorker,
// WorkerDown, LoseAttempt); these functions walk a command in a fixed
// order and count.

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
