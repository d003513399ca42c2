package client

import "github.com/megaflow/megaflow/internal/wire"

// The wire API's records, under the names users write. They are the protobuf
// messages of package megaflow.v1 (proto/megaflow/v1), so any field documented
// there is available here.
type (
	// GraphSpec is a rollout graph as submitted: an id (optional), a tenant and tasks.
	GraphSpec = wire.GraphSpec
	// TaskSpec is one task of a graph: image, command, resources, dependencies.
	TaskSpec = wire.TaskSpec
	// Resources is CPU in millicores, memory in bytes and whole GPUs.
	Resources = wire.Resources
	// ServiceSpec describes a long-running service task.
	ServiceSpec = wire.ServiceSpec
	// Graph is a graph's row in the task table with its aggregate counts.
	Graph = wire.Graph
	// GraphMetrics aggregates a graph's task results: success rate, the
	// reward (or another field's) mean, min, max and histogram, wall time.
	GraphMetrics = wire.GraphMetrics
	// Task is a task's row in the task table, with its attempts.
	Task = wire.Task
	// Attempt is one execution of a task.
	Attempt = wire.Attempt
	// Event is one committed change of a task or graph state.
	Event = wire.Event
	// ReadMeta says how fresh a read is: the index applied and whether the
	// answer came from the leader.
	ReadMeta = wire.ReadMeta
	// ClusterStatus describes the heads, the leader, the term and the indexes.
	ClusterStatus = wire.ClusterStatusResponse
	// HeadInfo describes one head.
	HeadInfo = wire.HeadInfo
	// Worker is a worker's row: what it offers, what is allocated, its status.
	Worker = wire.Worker
	// TaskState is a task's place in its life cycle.
	TaskState = wire.TaskState
	// GraphState is a graph's state.
	GraphState = wire.GraphState
	// ReasonCode classifies a task's or attempt's reason (Task.ReasonCode,
	// Attempt.ReasonCode, Event.ReasonCode) beside its human text: compare
	// codes, never the text. docs/reasons.md lists them.
	ReasonCode = wire.ReasonCode
)

// Task states.
const (
	TaskPending   = wire.TaskState_TASK_STATE_PENDING
	TaskQueued    = wire.TaskState_TASK_STATE_QUEUED
	TaskAssigned  = wire.TaskState_TASK_STATE_ASSIGNED
	TaskRunning   = wire.TaskState_TASK_STATE_RUNNING
	TaskSucceeded = wire.TaskState_TASK_STATE_SUCCEEDED
	TaskFailed    = wire.TaskState_TASK_STATE_FAILED
	TaskCancelled = wire.TaskState_TASK_STATE_CANCELLED
	TaskTimedOut  = wire.TaskState_TASK_STATE_TIMED_OUT
)

// Reason codes a client commonly tests for; every value is in
// wire.ReasonCode (REASON_CODE_*).
const (
	// ReasonNone: no reason, or a row recorded before codes existed.
	ReasonNone = wire.ReasonCode_REASON_CODE_UNSPECIFIED
	// ReasonStoppedWithGraph: a service task stopped because every batch
	// task of its graph ended (CANCELLED, but not a cancel by anyone).
	ReasonStoppedWithGraph = wire.ReasonCode_REASON_CODE_STOPPED_WITH_GRAPH
	// ReasonCancelledByUser: a client cancelled the task or its graph.
	ReasonCancelledByUser = wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER
	// ReasonOOM, ReasonTimeout, ReasonExitCode: how an attempt failed.
	ReasonOOM      = wire.ReasonCode_REASON_CODE_OOM
	ReasonTimeout  = wire.ReasonCode_REASON_CODE_TIMEOUT
	ReasonExitCode = wire.ReasonCode_REASON_CODE_EXIT_CODE
)

// Graph states.
const (
	GraphRunning   = wire.GraphState_GRAPH_STATE_RUNNING
	GraphSucceeded = wire.GraphState_GRAPH_STATE_SUCCEEDED
	GraphFailed    = wire.GraphState_GRAPH_STATE_FAILED
	GraphCancelled = wire.GraphState_GRAPH_STATE_CANCELLED
)

// GraphTerminal reports whether a graph in state s will change no more.
func GraphTerminal(s GraphState) bool {
	return s == GraphSucceeded || s == GraphFailed || s == GraphCancelled
}

// Execution modes.
const (
	ModeEphemeral  = wire.ExecutionMode_EXECUTION_MODE_EPHEMERAL
	ModePersistent = wire.ExecutionMode_EXECUTION_MODE_PERSISTENT
)

// Task kinds.
const (
	KindBatch   = wire.TaskKind_TASK_KIND_BATCH
	KindService = wire.TaskKind_TASK_KIND_SERVICE
)
