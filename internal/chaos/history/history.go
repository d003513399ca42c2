// Package history owns the chaos harness's record of what clients did and
// saw: one Op per client call, with its invoke and return times (offsets
// from the start of the run, in nanoseconds) and, for reads, what each task
// looked like. An Op whose outcome is unknown (a timeout: the call may or
// may not have taken effect) has Return = Unknown. The types are plain
// values, free of the wire API, so that internal/chaos/check can be tested
// on hand-written histories.
//
// Imported by internal/chaos/harness, internal/chaos/check and
// cmd/megaflow-bench.
package history

import (
	"math"
	"sync"
	"time"
)

// Unknown is the Return of an operation whose outcome is unknown; the
// checker lets it take effect at any time after its call, or never.
const Unknown = math.MaxInt64

// State is a task's state as a client reads it (the task life cycle of
// DESIGN: PENDING -> QUEUED -> ASSIGNED -> RUNNING -> a terminal state; a
// lost or failed attempt with retries left goes back to QUEUED).
type State uint8

// The task states.
const (
	Pending State = iota + 1
	Queued
	Assigned
	Running
	Succeeded
	Failed
	Cancelled
	TimedOut
)

var stateNames = [...]string{"?", "PENDING", "QUEUED", "ASSIGNED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"}

// String is the state's name as in the wire API, without its prefix.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "?"
}

// Terminal reports whether a task in state s changes no more.
func (s State) Terminal() bool { return s >= Succeeded }

// Active reports whether an attempt in state s holds a worker.
func (s State) Active() bool { return s == Assigned || s == Running }

// Kind is what a client operation did.
type Kind uint8

// The operation kinds.
const (
	// Submit submitted a graph; Tasks are its tasks.
	Submit Kind = iota + 1
	// CancelTask cancelled one task of a 1-task graph: Cancelled is exact.
	CancelTask
	// CancelGraph cancelled a graph; Cancelled is exact only for a 1-task graph.
	CancelGraph
	// Read read tasks (GetTask, or ListTasks of a graph).
	Read
	// Watch is one event a Watch stream delivered (Return = Call).
	Watch
)

var kindNames = [...]string{"?", "submit", "cancel-task", "cancel-graph", "read", "watch"}

// String names the kind.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "?"
}

// Attempt is one attempt as read.
type Attempt struct {
	Number uint32
	Worker string
	State  State
}

// TaskView is one task as a read returned it.
type TaskView struct {
	ID    string
	Found bool
	State State
	// Attempts, the current one last.
	Attempts []Attempt
	// Result is a digest of the recorded result (0: none).
	Result uint64
	// Lost counts the attempts lost with their worker (its lease lapsed or
	// it was declared down) and retried without counting as a failure.
	Lost uint32
}

// Op is one client operation.
type Op struct {
	// Client numbers the client (one goroutine, one client.Client each).
	Client int
	Kind   Kind
	Graph  string
	// Tasks are the ids of the tasks the operation concerns.
	Tasks []string
	// Call and Return are nanoseconds since the start of the run; Return
	// is Unknown for an operation whose outcome is unknown.
	Call, Return int64
	// Linearizable marks a read served by the leader after it confirmed
	// its leadership (ReadOptions.RequireLeader); other reads are
	// session-consistent.
	Linearizable bool
	// NotFound: the operation answered that the graph or task does not
	// exist (a definite answer).
	NotFound bool
	// Failed: a definite error that changed nothing (invalid argument,
	// already exists); Err says which.
	Failed bool
	Err    string
	// Cancelled is what a cancel returned.
	Cancelled uint32
	// Views are what a read saw, one per task of Tasks (same order).
	Views []TaskView
	// Index is the Raft index the answer carried (0: none).
	Index uint64
}

// Acknowledged reports whether the operation returned a definite success.
func (o *Op) Acknowledged() bool { return o.Return != Unknown && !o.Failed && !o.NotFound }

// Recorder collects operations from many goroutines. Its zero value is
// not usable: call NewRecorder.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
}

// NewRecorder returns a Recorder whose times count from start.
func NewRecorder(start time.Time) *Recorder { return &Recorder{start: start} }

// Now returns the current offset from the start, in nanoseconds.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Start returns the time offsets count from.
func (r *Recorder) Start() time.Time { return r.start }

// Add appends op (its Call and Return already set).
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Ops returns a copy of the operations recorded so far, in the order they
// were added.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}
