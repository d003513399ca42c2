package state

import "github.com/megaflow/megaflow/internal/wire"

// The task life cycle. Every change of Task.State in this package goes
// through CanTransition; nothing else decides which moves are legal.
//
//	new task -------- no dependencies ---------+
//	   |                                       v
//	   +------> PENDING ---- deps done ----> QUEUED <------------------------+
//	               |                           |                             |
//	               |                         placed --> FAILED (no worker    |
//	               |                           |     could run it, for longer|
//	               |                           v     than MaxQueueWait)      |
//	               |                       ASSIGNED ------------------------>+ retry: the attempt
//	               |                           |   |                         |   was lost or failed,
//	               |                        started +--> FAILED (did not     |   retries are left
//	               |                           v          start, no retries) |
//	               |                        RUNNING ------------------------>+
//	               |                           |
//	               |                           +--> SUCCEEDED | FAILED | TIMED_OUT
//	               v
//	           CANCELLED <-- a cancel, from PENDING, QUEUED, ASSIGNED or RUNNING;
//	                         from PENDING also when an upstream task did not succeed
//
// SUCCEEDED, FAILED, CANCELLED and TIMED_OUT are terminal: nothing leaves
// them. ASSIGNED -> FAILED covers an attempt that failed before it started
// (an image that cannot be pulled) with no retries left.
//
// Attempts (task.go) have a life of their own: one opens ASSIGNED when a
// plan places the task (Txn.Place), and is active, holding its worker's
// resources and GPUs, until its worker reports its end or is lost
// (attempt.go). A failed or timed-out attempt sends the task back to QUEUED
// while retries_used < max_retries; a lost one while lost_count stays below
// MaxLostAttempts; the two counts are apart. A task CANCELLED while
// ASSIGNED or RUNNING keeps its attempt active until the worker reports it
// stopped (Task.Stopping); so does a task of a gang sent back to QUEUED
// because another task of its gang failed (gang.go).

// Short names for the states, used throughout the package.
const (
	unspecified = wire.TaskState_TASK_STATE_UNSPECIFIED
	pending     = wire.TaskState_TASK_STATE_PENDING
	queued      = wire.TaskState_TASK_STATE_QUEUED
	assigned    = wire.TaskState_TASK_STATE_ASSIGNED
	running     = wire.TaskState_TASK_STATE_RUNNING
	succeeded   = wire.TaskState_TASK_STATE_SUCCEEDED
	failed      = wire.TaskState_TASK_STATE_FAILED
	cancelled   = wire.TaskState_TASK_STATE_CANCELLED
	timedOut    = wire.TaskState_TASK_STATE_TIMED_OUT

	numTaskStates = int(timedOut) + 1
)

// transitions[from] is the set of states a task in state from may move to,
// as a bit set indexed by the target state. from == UNSPECIFIED stands for
// "not in the table yet": a new task starts PENDING or QUEUED.
var transitions = [numTaskStates]uint16{
	unspecified: bits(pending, queued),
	pending:     bits(queued, cancelled),
	queued:      bits(assigned, cancelled, failed),
	assigned:    bits(running, queued, failed, cancelled),
	running:     bits(succeeded, failed, cancelled, timedOut, queued),
}

func bits(states ...wire.TaskState) uint16 {
	var b uint16
	for _, s := range states {
		b |= 1 << uint(s)
	}
	return b
}

// CanTransition reports whether a task may move from state from to state to.
// from == TASK_STATE_UNSPECIFIED asks whether to is a valid initial state.
// It is the one place the life cycle is decided; the FSM and the leader call
// it from any goroutine (it is a pure function).
func CanTransition(from, to wire.TaskState) bool {
	if from < 0 || int(from) >= numTaskStates || to < 0 || int(to) >= numTaskStates {
		return false
	}
	return transitions[from]&(1<<uint(to)) != 0
}

// IsTerminal reports whether s is SUCCEEDED, FAILED, CANCELLED or TIMED_OUT.
func IsTerminal(s wire.TaskState) bool {
	switch s {
	case succeeded, failed, cancelled, timedOut:
		return true
	}
	return false
}

// IsActive reports whether s is ASSIGNED or RUNNING, the states in which a
// task's current attempt occupies a worker.
func IsActive(s wire.TaskState) bool { return s == assigned || s == running }

// IsGraphTerminal reports whether a graph in state s is finished for good.
func IsGraphTerminal(s wire.GraphState) bool {
	switch s {
	case wire.GraphState_GRAPH_STATE_SUCCEEDED, wire.GraphState_GRAPH_STATE_FAILED,
		wire.GraphState_GRAPH_STATE_CANCELLED:
		return true
	}
	return false
}

// DeriveGraphState returns the state of a graph of total tasks whose tasks
// are counted by c. While some task is not terminal the graph is RUNNING.
// Then: CANCELLED if the graph itself was cancelled (graphCancelled),
// SUCCEEDED if every task succeeded, CANCELLED if no task failed or timed out
// (only cancellations kept it from succeeding), FAILED otherwise.
func DeriveGraphState(c StateCounts, total uint32, graphCancelled bool) wire.GraphState {
	done := c[succeeded] + c[failed] + c[cancelled] + c[timedOut]
	switch {
	case done < total:
		return wire.GraphState_GRAPH_STATE_RUNNING
	case graphCancelled:
		return wire.GraphState_GRAPH_STATE_CANCELLED
	case c[succeeded] == total:
		return wire.GraphState_GRAPH_STATE_SUCCEEDED
	case c[failed]+c[timedOut] == 0:
		return wire.GraphState_GRAPH_STATE_CANCELLED
	}
	return wire.GraphState_GRAPH_STATE_FAILED
}
