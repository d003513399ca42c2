package state

import (
	"slices"
	"strings"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// Task is a task's row in the table. Rows are immutable once inserted: the
// FSM changes a task by inserting a modified copy (see Txn), so a *Task
// returned by a read may be kept and read from any goroutine, and must never
// be modified.
//
// The row is kept small: Spec is shared with the command that submitted the
// graph, GraphID is a substring of ID, Tenant is shared with the graph row
// and Dependents shares the names in the specs of the graph.
type Task struct {
	// ID is "<graph id>/<task name>".
	ID string
	// GraphID is ID up to the first '/'.
	GraphID string
	// Tenant owns the graph; never empty.
	Tenant string
	// Spec is the task as submitted; shared and immutable.
	Spec *wire.TaskSpec
	// State is the task's place in the life cycle (lifecycle.go).
	State wire.TaskState
	// Priority is the effective priority: the spec's, else the graph's.
	Priority int32
	// DepsRemaining counts dependencies that have not succeeded yet (nor
	// been dropped for run_on_upstream_failure).
	DepsRemaining uint32
	// RetriesUsed counts failed attempts charged to max_retries.
	RetriesUsed uint32
	// LostCount counts attempts lost with their worker.
	LostCount uint32
	// QueueSeq orders QUEUED tasks of equal priority (FIFO); it is assigned
	// from a table-wide counter each time the task enters QUEUED.
	QueueSeq uint64
	// Reason says why the task is in its state, e.g. "upstream_failed".
	Reason string
	// ReasonCode classifies Reason (UNSPECIFIED: none, or a row recorded
	// before codes existed).
	ReasonCode wire.ReasonCode
	// Attempts are the executions so far, the current one last.
	Attempts []Attempt
	// Dependents are the names of the tasks of the same graph that depend on
	// this one, in the graph's task order.
	Dependents []string
	// Result is the JSON result recorded with success (at most 64 KiB).
	Result []byte
	// NotBeforeUnixNanos is when a task QUEUED for a retry may be placed
	// again (the leader's backoff); 0 or past: now.
	NotBeforeUnixNanos int64
	// QueuedUnixNanos is when the task last entered QUEUED (leader time).
	QueuedUnixNanos int64
	// Restarts counts the attempts of a service task that ended and were
	// replaced under its restart policy (service.go); they are not charged
	// to max_retries.
	Restarts uint32
	// CreateUnixNanos and UpdateUnixNanos are leader-chosen times in
	// nanoseconds since the Unix epoch.
	CreateUnixNanos int64
	UpdateUnixNanos int64
	// CreateIndex and ModifyIndex are the Raft indexes that created and last
	// modified the row.
	CreateIndex uint64
	ModifyIndex uint64
}

// Attempt is one execution of a task, stored by value inside its Task.
//
// An attempt is active (it holds its worker's resources and GPUs) while its
// State is ASSIGNED or RUNNING. It opens ASSIGNED when a plan places the
// task, and ends when the worker reports its end or the worker is lost;
// its State then says how it ended (SUCCEEDED, FAILED, TIMED_OUT, or
// CANCELLED when stopped). Only the current (last) attempt may be active.
// A task cancelled while ASSIGNED or RUNNING keeps its attempt active until
// the worker reports it stopped, so that the resources are not booked
// twice while the container is being stopped.
type Attempt struct {
	// Number is 1-based.
	Number   uint32
	WorkerID string
	// State is ASSIGNED or RUNNING while the attempt is active, then how
	// it ended.
	State wire.TaskState
	// Reason says why the attempt ended other than SUCCEEDED: "exit code
	// 3", "OOM killed", "worker w1 lost: <reason>", the worker's reason.
	Reason string
	// ReasonCode classifies Reason.
	ReasonCode wire.ReasonCode
	// Times in nanoseconds since the Unix epoch, chosen by the leader.
	AssignUnixNanos int64
	StartUnixNanos  int64
	FinishUnixNanos int64
	ExitCode        int32
	// LeaderTerm is the Raft term of the leader that made the assignment.
	LeaderTerm uint64
	GPUUUIDs   []string
	// ArtifactsPending: the attempt ended with artifacts still in its
	// worker's spool; cleared by the worker's ARTIFACTS_LANDED event.
	ArtifactsPending bool
	// Endpoint is where a service attempt serves ("http://host:port"),
	// set by its SERVICE_READY event; "" until then and for batch tasks.
	Endpoint string
	// ReadyUnixNanos is when Endpoint was set (leader time); 0: not ready.
	ReadyUnixNanos int64
	// Paused: a sandbox's attempt whose container is paused (docker
	// pause), as the last OpSandboxPause recorded (SetSandboxPaused,
	// rules 4); kept as it was once the attempt ended. The API shows
	// the sandbox PAUSED while its task is RUNNING on it.
	Paused bool
}

// Active reports whether the attempt still holds its worker: ASSIGNED or
// RUNNING there, even if its task was cancelled meanwhile.
func (a *Attempt) Active() bool { return IsActive(a.State) && a.WorkerID != "" }

// Name returns the task's name within its graph.
func (t *Task) Name() string { return t.ID[len(t.GraphID)+1:] }

// Queue returns the name of the queue the task waits in when QUEUED: its
// spec's type ("" is the default queue).
func (t *Task) Queue() string { return t.Spec.GetType() }

// CurrentAttempt returns the task's current (last) attempt, or nil if it has
// none. The result points into the immutable row: do not modify it.
func (t *Task) CurrentAttempt() *Attempt {
	if len(t.Attempts) == 0 {
		return nil
	}
	return &t.Attempts[len(t.Attempts)-1]
}

// ActiveAttempt returns the task's current attempt if it is active (it
// holds a worker), or nil. For a task ASSIGNED or RUNNING that is its
// current attempt; for a CANCELLED task it is the attempt its worker has
// not yet reported stopped. The result points into the immutable row.
func (t *Task) ActiveAttempt() *Attempt {
	if a := t.CurrentAttempt(); a != nil && a.Active() {
		return a
	}
	return nil
}

// Stopping reports whether the task's current attempt still runs on a
// worker although the task has moved on: it ended (it was cancelled), or
// it went back to QUEUED because its gang restarts (gang.go). The leader
// must make the worker stop the attempt, and the attempt's resources stay
// held until the worker reports its end; a QUEUED task is not placed
// again before that.
func (t *Task) Stopping() bool {
	return (IsTerminal(t.State) || t.State == queued) && t.ActiveAttempt() != nil
}

// WorkerID returns the worker of the current attempt, or "" if none.
func (t *Task) WorkerID() string {
	if a := t.CurrentAttempt(); a != nil {
		return a.WorkerID
	}
	return ""
}

// clone returns a shallow copy of t for modification inside a Txn. Slices
// are shared: a writer that changes one copies it first.
func (t *Task) clone() *Task {
	c := *t
	return &c
}

// editAttempt copies the attempts of a row being built in a Txn (a clone)
// and returns its current attempt for modification; the row must have one.
func (t *Task) editAttempt() *Attempt {
	t.Attempts = slices.Clone(t.Attempts)
	return &t.Attempts[len(t.Attempts)-1]
}

// WireOption tunes ToWire.
type WireOption uint8

// OmitSpec leaves Task.spec out of ToWire's result (smaller list pages).
const OmitSpec WireOption = 1

// ToWire converts the row into its wire form. The result shares the spec,
// dependents and result bytes with the row: callers (gRPC handlers, on any
// goroutine) may marshal it but must not modify it.
func (t *Task) ToWire(opts ...WireOption) *wire.Task {
	w := &wire.Task{}
	t.FillWire(w)
	for _, o := range opts {
		if o == OmitSpec {
			w.Spec = nil
		}
	}
	return w
}

// FillWire sets every field of w from t, like ToWire, into a message that
// was just created or Reset. The snapshot writer calls it to reuse one
// message for many rows; w shares the row's spec and slices, so reset it
// before modifying anything.
func (t *Task) FillWire(w *wire.Task) {
	w.Id = t.ID
	w.GraphId = t.GraphID
	w.Tenant = t.Tenant
	w.Spec = t.Spec
	w.State = t.State
	w.Reason = t.Reason
	w.ReasonCode = t.ReasonCode
	if len(t.Attempts) > 0 {
		w.Attempts = make([]*wire.Attempt, len(t.Attempts))
		for i := range t.Attempts {
			w.Attempts[i] = t.Attempts[i].toWire()
		}
	}
	w.CreateUnixNanos = t.CreateUnixNanos
	w.UpdateUnixNanos = t.UpdateUnixNanos
	w.CreateIndex = t.CreateIndex
	w.ModifyIndex = t.ModifyIndex
	w.Result = t.Result
	w.DepsRemaining = t.DepsRemaining
	w.RetriesUsed = t.RetriesUsed
	w.LostCount = t.LostCount
	w.QueueSeq = t.QueueSeq
	w.Priority = t.Priority
	w.Dependents = t.Dependents
	w.NotBeforeUnixNanos = t.NotBeforeUnixNanos
	w.QueuedUnixNanos = t.QueuedUnixNanos
	w.Restarts = t.Restarts
}

func (a *Attempt) toWire() *wire.Attempt {
	return &wire.Attempt{
		Number:          a.Number,
		WorkerId:        a.WorkerID,
		State:           a.State,
		Reason:          a.Reason,
		ReasonCode:      a.ReasonCode,
		AssignUnixNanos: a.AssignUnixNanos,
		StartUnixNanos:  a.StartUnixNanos,
		FinishUnixNanos: a.FinishUnixNanos,
		ExitCode:        a.ExitCode,
		LeaderTerm:      a.LeaderTerm,
		GpuUuids:        a.GPUUUIDs,

		ArtifactsPending: a.ArtifactsPending,
		Endpoint:         a.Endpoint,
		ReadyUnixNanos:   a.ReadyUnixNanos,
		Paused:           a.Paused,
	}
}

// TaskFromWire converts a task's wire form (as written by a snapshot) back
// into a row. It takes ownership of w's spec and slices. It returns an
// InvalidArgument error if the id does not start with "<graph id>/".
func TaskFromWire(w *wire.Task) (*Task, error) {
	id, gid := w.GetId(), w.GetGraphId()
	if gid == "" || !strings.HasPrefix(id, gid) || len(id) < len(gid)+2 || id[len(gid)] != '/' {
		return nil, errs.New(errs.InvalidArgument, "task %q: id does not start with graph id %q and '/'", id, gid)
	}
	t := &Task{
		ID:              id,
		GraphID:         id[:len(gid)],
		Tenant:          w.GetTenant(),
		Spec:            w.GetSpec(),
		State:           w.GetState(),
		Priority:        w.GetPriority(),
		DepsRemaining:   w.GetDepsRemaining(),
		RetriesUsed:     w.GetRetriesUsed(),
		LostCount:       w.GetLostCount(),
		QueueSeq:        w.GetQueueSeq(),
		Reason:          w.GetReason(),
		ReasonCode:      w.GetReasonCode(),
		Dependents:      w.GetDependents(),
		Result:          w.GetResult(),
		CreateUnixNanos: w.GetCreateUnixNanos(),
		UpdateUnixNanos: w.GetUpdateUnixNanos(),
		CreateIndex:     w.GetCreateIndex(),
		ModifyIndex:     w.GetModifyIndex(),

		NotBeforeUnixNanos: w.GetNotBeforeUnixNanos(),
		QueuedUnixNanos:    w.GetQueuedUnixNanos(),
		Restarts:           w.GetRestarts(),
	}
	if t.Spec == nil {
		t.Spec = &wire.TaskSpec{Name: t.Name()}
	}
	if n := len(w.GetAttempts()); n > 0 {
		t.Attempts = make([]Attempt, n)
		for i, a := range w.GetAttempts() {
			t.Attempts[i] = Attempt{
				Number:          a.GetNumber(),
				WorkerID:        a.GetWorkerId(),
				State:           a.GetState(),
				Reason:          a.GetReason(),
				ReasonCode:      a.GetReasonCode(),
				AssignUnixNanos: a.GetAssignUnixNanos(),
				StartUnixNanos:  a.GetStartUnixNanos(),
				FinishUnixNanos: a.GetFinishUnixNanos(),
				ExitCode:        a.GetExitCode(),
				LeaderTerm:      a.GetLeaderTerm(),
				GPUUUIDs:        a.GetGpuUuids(),

				ArtifactsPending: a.GetArtifactsPending(),
				Endpoint:         a.GetEndpoint(),
				ReadyUnixNanos:   a.GetReadyUnixNanos(),
				Paused:           a.GetPaused(),
			}
		}
	}
	return t, nil
}
