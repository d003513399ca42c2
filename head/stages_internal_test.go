package head

import (
	"reflect"
	"testing"

	"github.com/megaflow/megaflow/internal/resources"
	"github.com/megaflow/megaflow/internal/wire"
)

func TestReasonClass(t *testing.T) {
	for _, tc := range []struct {
		code wire.ReasonCode
		want string
	}{
		{wire.ReasonCode_REASON_CODE_UNSPECIFIED, "none"},
		{wire.ReasonCode_REASON_CODE_EXIT_CODE, "exit_code"},
		{wire.ReasonCode_REASON_CODE_OOM, "oom"},
		{wire.ReasonCode_REASON_CODE_TIMEOUT, "timeout"},
		{wire.ReasonCode_REASON_CODE_WORKER_LOST, "worker_lost"},
		{wire.ReasonCode_REASON_CODE_LEASE_LAPSED, "worker_lost"},
		{wire.ReasonCode_REASON_CODE_NOT_ON_WORKER, "worker_lost"},
		{wire.ReasonCode_REASON_CODE_UPSTREAM_FAILED, "upstream_failed"},
		{wire.ReasonCode_REASON_CODE_SERVICE_GONE, "upstream_failed"},
		{wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER, "cancelled"},
		{wire.ReasonCode_REASON_CODE_CANCELLED_DEADLINE, "cancelled"},
		{wire.ReasonCode_REASON_CODE_STOPPED_WITH_GRAPH, "cancelled"},
		{wire.ReasonCode_REASON_CODE_START_FAILED, "start_failed"},
		{wire.ReasonCode_REASON_CODE_UNPLACEABLE, "infeasible"},
		{wire.ReasonCode_REASON_CODE_QUEUED, "infeasible"},
		{wire.ReasonCode_REASON_CODE_WORKER_FAILED, "other"},
		{wire.ReasonCode_REASON_CODE_GPU_UNHEALTHY, "other"},
		{wire.ReasonCode(9999), "other"}, // a code from a newer head
	} {
		if got := ReasonClass(tc.code); got != tc.want {
			t.Errorf("ReasonClass(%s) = %q, want %q", tc.code, got, tc.want)
		}
	}
}

// Every code has a class, and only UNSPECIFIED reads as "none": a code
// added to the proto without a thought about its metric label fails here.
func TestReasonClassCoversEveryCode(t *testing.T) {
	values := wire.ReasonCode(0).Descriptor().Values()
	for i := 0; i < values.Len(); i++ {
		code := wire.ReasonCode(values.Get(i).Number())
		if got := ReasonClass(code); (got == "none") != (code == wire.ReasonCode_REASON_CODE_UNSPECIFIED) {
			t.Errorf("ReasonClass(%s) = %q", code, got)
		}
	}
}

func TestComputeFragmentation(t *testing.T) {
	r := func(cpu, memGiB, gpus int64) resources.Resources {
		return resources.Resources{CPUMillis: cpu, MemoryBytes: memGiB << 30, GPUs: gpus}
	}
	for _, tc := range []struct {
		name   string
		free   []resources.Resources
		ref    resources.Resources
		hasRef bool
		want   Fragmentation
	}{
		{"no reference task", []resources.Resources{r(4000, 8, 0)}, resources.Resources{}, false, Fragmentation{}},
		{"nothing free", []resources.Resources{r(0, 0, 0)}, r(1000, 1, 0), true, Fragmentation{OK: true}},
		{"everything usable", []resources.Resources{r(2000, 4, 0), r(1000, 2, 0)}, r(1000, 1, 0), true, Fragmentation{OK: true}},
		// Worker b's 500 millicores cannot hold a 1-core task: 500 of 2500 free are stranded.
		{"cpu crumbs", []resources.Resources{r(2000, 4, 0), r(500, 4, 0)}, r(1000, 1, 0), true,
			Fragmentation{CPU: 0.2, Memory: 0.5, OK: true}},
		// Free CPU without the memory to go with it is stranded too.
		{"memory-bound", []resources.Resources{r(3000, 0, 0), r(1000, 2, 0)}, r(1000, 1, 0), true,
			Fragmentation{CPU: 0.75, Memory: 0, OK: true}},
		{"gpu task", []resources.Resources{r(8000, 32, 0), r(8000, 32, 1)}, r(1000, 1, 1), true,
			Fragmentation{CPU: 0.5, Memory: 0.5, OK: true}},
		{"over-committed worker counts nothing free", []resources.Resources{r(-1000, -1, 0), r(1000, 1, 0)}, r(1000, 1, 0), true,
			Fragmentation{OK: true}},
	} {
		if got := ComputeFragmentation(tc.free, tc.ref, tc.hasRef); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// The stage tracker turns a task's committed events into one observation
// per stage per attempt, and one ended attempt per attempt, whatever
// happens: a retry, a lost worker, a cancel while queued.
func TestStageTracker(t *testing.T) {
	const s = int64(1e9)
	ev := func(task string, st wire.TaskState, at int64, reason string, code ...wire.ReasonCode) *wire.Event {
		e := &wire.Event{TaskId: task, TaskState: st, UnixNanos: at * s, Reason: reason}
		if len(code) > 0 {
			e.ReasonCode = code[0]
		}
		return e
	}
	const (
		pending  = wire.TaskState_TASK_STATE_PENDING
		queued   = wire.TaskState_TASK_STATE_QUEUED
		assigned = wire.TaskState_TASK_STATE_ASSIGNED
		running  = wire.TaskState_TASK_STATE_RUNNING
		ok       = wire.TaskState_TASK_STATE_SUCCEEDED
		failed   = wire.TaskState_TASK_STATE_FAILED
		cancel   = wire.TaskState_TASK_STATE_CANCELLED
	)
	tr := newStageTracker(func(string) string { return "eval" })
	var got []stageObservation
	for _, e := range []*wire.Event{
		ev("g/a", pending, 0, ""), ev("g/a", queued, 1, ""), ev("g/a", assigned, 3, ""), ev("g/a", running, 4, ""),
		ev("g/a", queued, 10, "exit code 2", wire.ReasonCode_REASON_CODE_EXIT_CODE), // failed, retried
		ev("g/a", assigned, 11, ""), ev("g/a", running, 13, ""), ev("g/a", ok, 20, ""),
		ev("g/b", queued, 1, ""), ev("g/b", assigned, 2, ""), ev("g/b", queued, 5, "worker w1 lost: dead", wire.ReasonCode_REASON_CODE_WORKER_LOST), // lost before it started
		ev("g/b", assigned, 6, ""), ev("g/b", running, 7, ""), ev("g/b", failed, 8, "OOM killed", wire.ReasonCode_REASON_CODE_OOM),
		ev("g/c", queued, 1, ""), ev("g/c", cancel, 2, "cancelled by the client", wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER), // never ran: no attempt ended
		{GraphId: "g", GraphState: wire.GraphState_GRAPH_STATE_FAILED}, // graph events are ignored
	} {
		got = append(got, tr.observe(e)...)
	}
	d := func(stage string, sec float64) stageObservation {
		return stageObservation{Stage: stage, Queue: "eval", Seconds: sec}
	}
	end := func(outcome, class string) stageObservation {
		return stageObservation{Queue: "eval", Outcome: outcome, ReasonClass: class}
	}
	want := []stageObservation{
		d("queued", 2), d("starting", 1), d("running", 6), end("failed", "exit_code"),
		d("queued", 1), d("starting", 2), d("running", 7), end("succeeded", "none"),
		d("queued", 1), end("lost", "worker_lost"),
		d("queued", 1), d("starting", 1), d("running", 1), end("failed", "oom"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("observations:\n got %+v\nwant %+v", got, want)
	}
	if len(tr.tasks) != 0 {
		t.Fatalf("tracker still holds %d finished tasks", len(tr.tasks))
	}
}
