package state

import (
	"github.com/megaflow/megaflow/internal/wire"
)

// Graph is a graph's row in the table with its aggregate. Like Task, it is
// immutable once inserted and may be read from any goroutine.
type Graph struct {
	ID string
	// Tenant owns the graph; "default" when the client left it empty.
	Tenant string
	// Name is the human-readable name from the spec.
	Name string
	// Priority is inherited by tasks whose own priority is 0.
	Priority int32
	// Labels are the spec's labels; shared with the submit command.
	Labels map[string]string
	// State is RUNNING until every task is terminal (DeriveGraphState).
	State wire.GraphState
	// TaskCount is the number of tasks; Counts counts them by state.
	TaskCount uint32
	Counts    StateCounts
	// CreateUnixNanos is the submission time; FinishUnixNanos the time the
	// last task became terminal (0 while RUNNING). Nanoseconds since the
	// Unix epoch, chosen by the leader.
	CreateUnixNanos int64
	FinishUnixNanos int64
	// CreateIndex and ModifyIndex are Raft indexes.
	CreateIndex uint64
	ModifyIndex uint64
	// DeadlineSeconds is the whole-graph deadline from submission; 0: none.
	DeadlineSeconds int64
	// SpecDigest is the SHA-256 of the submitted spec, chosen by the leader.
	SpecDigest []byte
	// Reason says why the graph is in its state (a cancel's reason).
	Reason string
	// Metrics aggregates the task results (metrics.go).
	Metrics GraphMetrics
}

// StateCounts counts a graph's tasks by state, indexed by wire.TaskState
// (UNSPECIFIED, always 0, through TIMED_OUT).
type StateCounts [9]uint32

// StateCounts has one slot per task state.
var _ [numTaskStates]uint32 = StateCounts{}

// done returns how many tasks are terminal.
func (c *StateCounts) done() uint32 {
	return c[succeeded] + c[failed] + c[cancelled] + c[timedOut]
}

// ToWire converts the counts into their wire form.
func (c *StateCounts) ToWire() *wire.StateCounts {
	return &wire.StateCounts{
		Pending:   c[pending],
		Queued:    c[queued],
		Assigned:  c[assigned],
		Running:   c[running],
		Succeeded: c[succeeded],
		Failed:    c[failed],
		Cancelled: c[cancelled],
		TimedOut:  c[timedOut],
	}
}

func countsFromWire(w *wire.StateCounts) StateCounts {
	var c StateCounts
	c[pending] = w.GetPending()
	c[queued] = w.GetQueued()
	c[assigned] = w.GetAssigned()
	c[running] = w.GetRunning()
	c[succeeded] = w.GetSucceeded()
	c[failed] = w.GetFailed()
	c[cancelled] = w.GetCancelled()
	c[timedOut] = w.GetTimedOut()
	return c
}

func (g *Graph) clone() *Graph {
	c := *g
	return &c
}

// ToWire converts the row into its wire form. The result shares labels and
// digest with the row: callers may marshal it but must not modify it.
func (g *Graph) ToWire() *wire.Graph {
	return &wire.Graph{
		Id:              g.ID,
		Tenant:          g.Tenant,
		Name:            g.Name,
		Priority:        g.Priority,
		Labels:          g.Labels,
		State:           g.State,
		TaskCount:       g.TaskCount,
		Counts:          g.Counts.ToWire(),
		CreateUnixNanos: g.CreateUnixNanos,
		FinishUnixNanos: g.FinishUnixNanos,
		CreateIndex:     g.CreateIndex,
		ModifyIndex:     g.ModifyIndex,
		DeadlineSeconds: g.DeadlineSeconds,
		SpecDigest:      g.SpecDigest,
		Reason:          g.Reason,
		Metrics:         g.Metrics.toWire(g),
	}
}

// GraphFromWire converts a graph's wire form (as written by a snapshot) back
// into a row, taking ownership of its map and bytes.
func GraphFromWire(w *wire.Graph) *Graph {
	return &Graph{
		ID:              w.GetId(),
		Tenant:          w.GetTenant(),
		Name:            w.GetName(),
		Priority:        w.GetPriority(),
		Labels:          w.GetLabels(),
		State:           w.GetState(),
		TaskCount:       w.GetTaskCount(),
		Counts:          countsFromWire(w.GetCounts()),
		CreateUnixNanos: w.GetCreateUnixNanos(),
		FinishUnixNanos: w.GetFinishUnixNanos(),
		CreateIndex:     w.GetCreateIndex(),
		ModifyIndex:     w.GetModifyIndex(),
		DeadlineSeconds: w.GetDeadlineSeconds(),
		SpecDigest:      w.GetSpecDigest(),
		Reason:          w.GetReason(),
		Metrics:         metricsFromWire(w.GetMetrics()),
	}
}
