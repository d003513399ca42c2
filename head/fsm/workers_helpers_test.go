package fsm

import (
	"fmt"
	"math"
	"strings"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/wire"
)

const (
	gib      = int64(1) << 30
	timedOut = wire.TaskState_TASK_STATE_TIMED_OUT

	kStarted  = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STARTED
	kExited   = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_EXITED
	kFailed   = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_FAILED
	kTimedOut = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_TIMED_OUT
	kStopped  = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STOPPED
)

// now is the leader time stamped into the next command: 1000 + its index.
func (f *testFSM) now() int64 { return 1000 + int64(f.index) + 1 }

// rspec is a task spec asking for cpu millicores, mem GiB and gpus.
func rspec(name string, cpu, mem int64, gpus int32, deps ...string) *wire.TaskSpec {
	s := spec(name, deps...)
	s.Resources = &wire.Resources{CpuMillis: cpu, MemoryBytes: mem * gib, Gpus: gpus}
	return s
}

// retries sets a spec's max_retries.
func retries(s *wire.TaskSpec, n int32) *wire.TaskSpec {
	s.MaxRetries = n
	return s
}

func (f *testFSM) upsert(id string, cpu, mem int64, gpus int32) *WorkerUpsertResult {
	f.tb.Helper()
	return f.ok(OpWorkerUpsert, &wire.WorkerUpsertCommand{UnixNanos: f.now(), Info: &wire.WorkerInfo{Id: id,
		Runtime: "fake", Capacity: &wire.Resources{CpuMillis: cpu, MemoryBytes: mem * gib, Gpus: gpus}}}).(*WorkerUpsertResult)
}

func (f *testFSM) down(id, reason string, left bool) *WorkerDownResult {
	f.tb.Helper()
	return f.ok(OpWorkerDown, &wire.WorkerDownCommand{WorkerId: id, Reason: reason, Left: left, UnixNanos: f.now()}).(*WorkerDownResult)
}

// pa is a placement.
func pa(task string, attempt uint32, worker string, uuids ...string) *wire.PlannedAttempt {
	return &wire.PlannedAttempt{TaskId: task, Attempt: attempt, WorkerId: worker, GpuUuids: uuids}
}

// plan commits placements with leader term 7.
func (f *testFSM) plan(ps ...*wire.PlannedAttempt) *PlanResult {
	f.tb.Helper()
	return f.ok(OpPlan, &wire.PlanCommand{Attempts: ps, LeaderTerm: 7, UnixNanos: f.now()}).(*PlanResult)
}

// place commits placements that must all apply.
func (f *testFSM) place(ps ...*wire.PlannedAttempt) {
	f.tb.Helper()
	if res := f.plan(ps...); len(res.Skipped) > 0 {
		f.tb.Fatalf("plan skipped %v", res.Skipped)
	}
}

func (f *testFSM) unplaced(reasons map[string]string) *PlanResult {
	f.tb.Helper()
	return f.ok(OpPlan, &wire.PlanCommand{Unplaced: reasons, LeaderTerm: 7, UnixNanos: f.now()}).(*PlanResult)
}

func (f *testFSM) report(worker string, evs ...*wire.AttemptEvent) *TaskEventsResult {
	f.tb.Helper()
	return f.ok(OpTaskEvents, &wire.TaskEventsCommand{WorkerId: worker, Events: evs, UnixNanos: f.now()}).(*TaskEventsResult)
}

func (f *testFSM) lost(reason string, ps ...*wire.PlannedAttempt) *AttemptsLostResult {
	f.tb.Helper()
	return f.ok(OpAttemptsLost, &wire.AttemptsLostCommand{Attempts: ps, Reason: reason, UnixNanos: f.now()}).(*AttemptsLostResult)
}

func ev(task string, attempt uint32, kind wire.AttemptEventKind) *wire.AttemptEvent {
	return &wire.AttemptEvent{TaskId: task, Attempt: attempt, Kind: kind, UnixNanos: 1}
}

func exited(task string, attempt uint32, code int32, result string) *wire.AttemptEvent {
	e := ev(task, attempt, kExited)
	e.ExitCode, e.Result = code, []byte(result)
	return e
}

func (f *testFSM) worker(id string) *state.Worker {
	f.tb.Helper()
	w := f.View().Worker(id)
	if w == nil {
		f.tb.Fatalf("worker %q not found", id)
	}
	return w
}

// usage renders what a worker holds: "2 cores, 4 GiB in 1 [GPU-0]".
func (f *testFSM) usage(id string) string {
	f.tb.Helper()
	w := f.worker(id)
	return fmt.Sprintf("%s in %d %v", w.Allocated, w.ActiveAttempts, w.GPUsInUse())
}

// accountingOK fails the test if a worker's accounting disagrees with the
// attempts.
func (f *testFSM) accountingOK() {
	f.tb.Helper()
	if err := f.View().VerifyAccounting(); err != nil {
		f.tb.Fatalf("accounting: %v", err)
	}
}

// lastEvents renders the events of the last entry: "g/a ASSIGNED 1@w1, g SUCCEEDED".
func (f *testFSM) lastEvents() string {
	f.tb.Helper()
	evs, _, err := f.EventsAfter(Cursor{Index: f.index - 1, Seq: math.MaxUint32}, "", 1000)
	if err != nil {
		f.tb.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		if e.TaskId == "" {
			out = append(out, e.GraphId+" "+strings.TrimPrefix(e.GraphState.String(), "GRAPH_STATE_"))
			continue
		}
		s := e.TaskId + " " + strings.TrimPrefix(e.TaskState.String(), "TASK_STATE_")
		if e.Attempt != 0 {
			s += fmt.Sprintf(" %d@%s", e.Attempt, e.WorkerId)
		}
		if e.Reason != "" {
			s += " (" + e.Reason + ")"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// attempt renders a task's current attempt: "2@w1 FAILED exit=3 (exit code 3)".
func (f *testFSM) attempt(id string) string {
	f.tb.Helper()
	a := f.task(id).CurrentAttempt()
	if a == nil {
		return "none"
	}
	s := fmt.Sprintf("%d@%s %s", a.Number, a.WorkerID, strings.TrimPrefix(a.State.String(), "TASK_STATE_"))
	if a.ExitCode != 0 {
		s += fmt.Sprintf(" exit=%d", a.ExitCode)
	}
	if a.Reason != "" {
		s += " (" + a.Reason + ")"
	}
	return s
}
