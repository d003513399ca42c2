package fsm

import "github.com/megaflow/megaflow/head/state"

// Apply returns one of these to the proposer (through raft's ApplyFuture
// Response), or an *errs.Error for a command refused at apply time; the
// refused command changed nothing, except where its error says otherwise.

// SubmitResult is the result of OpSubmitGraph.
type SubmitResult struct {
	GraphID string
	// Committed is true once the graph is in the table: after its last
	// chunk, or for a retry of a graph already committed. False: the chunk
	// was staged.
	Committed bool
	// Existed is true when the graph was already committed with the same
	// spec digest (an idempotent retry); nothing changed.
	Existed bool
	// Index is the Raft index at which the graph became visible (its
	// create_index); 0 while staged.
	Index uint64
	// Plan is what became of the placements the submission carried
	// (rules 8, SubmitGraphCommand.plan); nil when it carried none or
	// they were not applied.
	Plan *PlanResult
}

// CancelResult is the result of OpCancel.
type CancelResult struct {
	// Cancelled counts the tasks that moved to CANCELLED, dependents
	// cancelled as "upstream_failed" included.
	Cancelled uint32
}

// DropStagedResult is the result of OpDropStaged.
type DropStagedResult struct {
	// Dropped counts the staged chunks removed.
	Dropped uint32
}

// WorkerUpsertResult is the result of OpWorkerUpsert.
type WorkerUpsertResult struct {
	// Created is true for a worker the table did not know.
	Created bool
}

// WorkerDownResult is the result of OpWorkerDown.
type WorkerDownResult struct {
	// Known is false for a worker the table does not know; nothing
	// changed.
	Known bool
	// Lost says what happened to the tasks of the attempts that held the
	// worker.
	Lost state.Losses
}

// PlanResult is the result of OpPlan: which placements the table took and
// which it skipped because they no longer held.
type PlanResult struct {
	// Applied lists the ids of the tasks placed, in plan order.
	Applied []string
	// Skipped maps the id of each task whose placement was skipped to why
	// ("task \"g/a\" is RUNNING, not QUEUED", "worker \"w1\" has ... free;
	// task ... needs ...", "worker \"w1\": GPU \"GPU-1\" is held by task ...").
	Skipped map[string]string
	// Reasons counts the unplaced tasks whose queueing reason changed.
	Reasons uint32
}

// TaskEventsResult is the result of OpTaskEvents.
type TaskEventsResult struct {
	// Applied counts the events that changed an attempt.
	Applied uint32
	// Ignored counts the events fenced off (not the current, active
	// attempt on the reporting worker) or that changed nothing
	// (duplicates).
	Ignored uint32
	// Plan is what became of the placements the batch carried (rules 9,
	// TaskEventsCommand.plan); nil when it carried none or they were not
	// applied.
	Plan *PlanResult
}

// AttemptsLostResult is the result of OpAttemptsLost.
type AttemptsLostResult struct {
	// Lost says what happened to the tasks of the attempts lost.
	Lost state.Losses
	// Ignored counts the attempts that were not current and active on the
	// worker named.
	Ignored uint32
}

// SetQuotaResult is the result of OpSetQuota.
type SetQuotaResult struct {
	// Removed is true when the quota limited nothing and was deleted.
	Removed bool
}

// FailQueuedResult is the result of OpFailQueued.
type FailQueuedResult struct {
	// Failed counts the tasks failed; the others had been placed, re-queued
	// or given another reason meanwhile.
	Failed uint32
}

// PoolWarmResult is the result of OpPoolWarm.
type PoolWarmResult struct {
	// Removed is true when a size-0 target deleted an existing one.
	Removed bool
}

// GpuHealthResult is the result of OpGpuHealth.
type GpuHealthResult struct {
	// Unhealthy counts the worker's GPUs now unhealthy.
	Unhealthy int
	// Lost counts what losing the attempts on unhealthy GPUs did.
	Lost state.Losses
}
