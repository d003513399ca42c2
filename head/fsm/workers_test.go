package fsm

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
	"google.golang.org/protobuf/proto"
)

const (
	alive = wire.WorkerStatus_WORKER_STATUS_ALIVE
	down  = wire.WorkerStatus_WORKER_STATUS_DOWN
	left  = wire.WorkerStatus_WORKER_STATUS_LEFT
)

func workerIDs(ws []*state.Worker) string {
	var out []string
	for _, w := range ws {
		out = append(out, w.ID())
	}
	return strings.Join(out, " ")
}

func TestWorkerUpsertAndDown(t *testing.T) {
	f := newTestFSM(t, 0)
	if !f.upsert("w2", 4000, 8, 0).Created || !f.upsert("w1", 2000, 4, 1).Created {
		t.Fatal("new workers not created")
	}
	if f.upsert("w1", 8000, 16, 2).Created {
		t.Fatal("update reported as created")
	}
	w := f.worker("w1")
	if !w.Alive() || w.Capacity().CPUMillis != 8000 || w.Info.GetRuntime() != "fake" || w.ModifyIndex != 3 || w.UpdateUnixNanos != 1003 {
		t.Fatalf("w1 %+v", w)
	}
	if got := workerIDs(f.View().Workers()); got != "w1 w2" {
		t.Fatal(got)
	}

	f.down("w2", "heartbeat missed", false)
	f.upsert("w3", 1000, 1, 0)
	f.down("w3", "drained", true)
	if w := f.worker("w2"); w.Status != down || w.Reason != "heartbeat missed" {
		t.Fatalf("w2 %+v", w)
	}
	if w := f.worker("w3"); w.Status != left || w.Reason != "drained" {
		t.Fatalf("w3 %+v", w)
	}
	if got := workerIDs(f.View().AliveWorkers()); got != "w1" {
		t.Fatal(got)
	}
	// A worker that comes back is ALIVE again, reason cleared.
	f.upsert("w2", 4000, 8, 0)
	if w := f.worker("w2"); w.Status != alive || w.Reason != "" {
		t.Fatalf("w2 back %+v", w)
	}
	if got := workerIDs(f.View().AliveWorkers()); got != "w1 w2" {
		t.Fatal(got)
	}
	// Unknown worker: nothing changes; no id: refused.
	before := dump(t, f.View())
	if res := f.down("nope", "x", false); res.Known {
		t.Fatal("unknown worker known")
	}
	f.refused(errs.InvalidArgument, OpWorkerUpsert, &wire.WorkerUpsertCommand{Info: &wire.WorkerInfo{}})
	f.refused(errs.InvalidArgument, OpWorkerUpsert, &wire.WorkerUpsertCommand{Info: &wire.WorkerInfo{Id: "a\x00b"}})
	f.refused(errs.InvalidArgument, OpWorkerDown, &wire.WorkerDownCommand{})
	f.refused(errs.InvalidArgument, OpTaskEvents, &wire.TaskEventsCommand{})
	if d := firstDiff(before, dump(t, f.View())); d != "" {
		t.Fatal(d)
	}
}

func TestPlanPlaces(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", rspec("a", 1000, 2, 1), rspec("b", 500, 1, 0, "a"), rspec("c", 2000, 4, 0)))
	f.upsert("w1", 4000, 8, 2)
	f.unplaced(map[string]string{"g/a": "no worker has room"})
	res := f.plan(pa("g/a", 1, "w1", "GPU-1"), pa("g/c", 1, "w1"))
	if strings.Join(res.Applied, " ") != "g/a g/c" || len(res.Skipped) != 0 {
		t.Fatalf("%+v", res)
	}
	if got := f.lastEvents(); got != "g/a ASSIGNED 1@w1, g/c ASSIGNED 1@w1" {
		t.Fatal(got)
	}
	a := f.task("g/a")
	at := a.CurrentAttempt()
	if a.State != assigned || a.Reason != "" || len(a.Attempts) != 1 || !at.Active() || at.Number != 1 || at.WorkerID != "w1" ||
		at.State != assigned || at.AssignUnixNanos != 1004 || at.LeaderTerm != 7 || strings.Join(at.GPUUUIDs, ",") != "GPU-1" {
		t.Fatalf("a %+v attempt %+v", a, at)
	}
	if got := f.usage("w1"); got != "3 cores, 6 GiB, 1 GPU in 2 [GPU-1]" {
		t.Fatal(got)
	}
	if h := f.worker("w1").GPUHolder("GPU-1"); h != "g/a" {
		t.Fatal(h)
	}
	if got := ids(f.View().AssignedTo("w1")); got != "g/a g/c" {
		t.Fatal(got)
	}
	f.accountingOK()
}

func ids(tasks []*state.Task) string {
	var out []string
	for _, t := range tasks {
		out = append(out, t.ID)
	}
	return strings.Join(out, " ")
}

// TestPlanRechecks: the FSM is the plan's verifier; a placement that no
// longer holds is skipped, with the reason, and changes nothing.
func TestPlanRechecks(t *testing.T) {
	setup := func(t *testing.T) *testFSM {
		f := newTestFSM(t, 0)
		f.submit(graphSpec("g", rspec("a", 1000, 1, 1), rspec("b", 1000, 1, 2), rspec("p", 100, 1, 0, "a"),
			rspec("big", 5000, 1, 0), rspec("fat", 100, 9, 0), rspec("z", 0, 0, 0)))
		f.upsert("w1", 4000, 8, 2)
		f.upsert("w2", 4000, 8, 2)
		f.down("w2", "gone", false)
		f.place(pa("g/a", 1, "w1", "GPU-0"))
		return f
	}
	tests := []struct {
		name string
		p    []*wire.PlannedAttempt
		skip string // task id whose placement is skipped
		want string // in the reason
	}{
		{"unknown task", []*wire.PlannedAttempt{pa("g/nope", 1, "w1")}, "g/nope", `task "g/nope" not found`},
		{"task not queued", []*wire.PlannedAttempt{pa("g/a", 2, "w1")}, "g/a", "is TASK_STATE_ASSIGNED, not QUEUED"},
		{"task pending", []*wire.PlannedAttempt{pa("g/p", 1, "w1")}, "g/p", "is TASK_STATE_PENDING, not QUEUED"},
		{"stale attempt number", []*wire.PlannedAttempt{pa("g/z", 2, "w1")}, "g/z", "attempt 2 is not its next attempt (1)"},
		{"unknown worker", []*wire.PlannedAttempt{pa("g/z", 1, "w9")}, "g/z", `worker "w9" not found`},
		{"worker down", []*wire.PlannedAttempt{pa("g/z", 1, "w2")}, "g/z", "WORKER_STATUS_DOWN"},
		{"over cpu", []*wire.PlannedAttempt{pa("g/big", 1, "w1")}, "g/big", "lacks 2 cores"},
		{"over memory", []*wire.PlannedAttempt{pa("g/fat", 1, "w1")}, "g/fat", "lacks 2 GiB"},
		{"over gpus", []*wire.PlannedAttempt{pa("g/b", 1, "w1")}, "g/b", "lacks 1 GPU"},
		{"gpu in use", []*wire.PlannedAttempt{pa("g/z", 1, "w1"), pa("g/b", 1, "w1", "GPU-0", "GPU-1")}, "g/b", "lacks 1 GPU"},
		{"uuid count", []*wire.PlannedAttempt{pa("g/z", 1, "w1", "GPU-1")}, "g/z", "needs 0 GPUs; the plan names 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := setup(t)
			before := f.View().Task(tt.skip)
			res := f.plan(tt.p...)
			if !strings.Contains(res.Skipped[tt.skip], tt.want) {
				t.Fatalf("skipped %v, want %q for %s", res.Skipped, tt.want, tt.skip)
			}
			if after := f.View().Task(tt.skip); before != nil && after.ModifyIndex != before.ModifyIndex {
				t.Fatal("skipped placement changed its task")
			}
			f.accountingOK()
		})
	}

	// GPU UUIDs: held by another attempt, named twice, held within the same
	// plan by an earlier placement.
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", rspec("a", 0, 0, 1), rspec("b", 0, 0, 1), rspec("c", 0, 0, 2), rspec("d", 0, 0, 1)))
	f.upsert("w1", 1000, 1, 4)
	f.place(pa("g/a", 1, "w1", "GPU-0"))
	res := f.plan(pa("g/b", 1, "w1", "GPU-0"), pa("g/c", 1, "w1", "GPU-2", "GPU-2"),
		pa("g/d", 1, "w1", "GPU-3"), pa("g/c", 1, "w1", "GPU-1", "GPU-3"))
	if strings.Join(res.Applied, " ") != "g/d" ||
		!strings.Contains(res.Skipped["g/b"], `GPU "GPU-0" is held by task "g/a"`) ||
		!strings.Contains(res.Skipped["g/c"], `GPU "GPU-3" is held by task "g/d"`) {
		t.Fatalf("%+v", res)
	}
	if got := f.usage("w1"); got != "2 GPUs in 2 [GPU-0 GPU-3]" {
		t.Fatal(got)
	}
	// A task placed twice in one plan: the second is skipped.
	res = f.plan(pa("g/b", 1, "w1", "GPU-1"), pa("g/b", 1, "w1", "GPU-2"))
	if strings.Join(res.Applied, " ") != "g/b" || !strings.Contains(res.Skipped["g/b"], "not QUEUED") {
		t.Fatalf("%+v", res)
	}
	f.accountingOK()
}

func TestPlanQueueReasons(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", rspec("a", 0, 64, 0), spec("b"), spec("p", "b")))
	f.upsert("w1", 1000, 8, 0)
	res := f.unplaced(map[string]string{"g/a": "no worker has 64 GiB of memory", "g/b": "quota", "g/p": "x", "g/nope": "y"})
	if res.Reasons != 2 || f.task("g/a").Reason != "no worker has 64 GiB of memory" || f.task("g/p").Reason != "" {
		t.Fatalf("%+v %q", res, f.task("g/a").Reason)
	}
	if got := f.lastEvents(); got != "g/a QUEUED (no worker has 64 GiB of memory), g/b QUEUED (quota)" {
		t.Fatal(got)
	}
	// The same verdict again: no change, no event.
	mod := f.task("g/a").ModifyIndex
	res = f.unplaced(map[string]string{"g/a": "no worker has 64 GiB of memory", "g/b": "quota"})
	if res.Reasons != 0 || f.lastEvents() != "" || f.task("g/a").ModifyIndex != mod {
		t.Fatalf("%+v %q", res, f.lastEvents())
	}
	// A new verdict is an event; placing the task clears it.
	f.unplaced(map[string]string{"g/b": "quota of tenant default"})
	if got := f.lastEvents(); got != "g/b QUEUED (quota of tenant default)" {
		t.Fatal(got)
	}
	f.place(pa("g/b", 1, "w1"))
	if b := f.task("g/b"); b.Reason != "" || b.State != assigned {
		t.Fatalf("%+v", b)
	}
	// Not QUEUED any more: ignored.
	if res := f.unplaced(map[string]string{"g/b": "quota"}); res.Reasons != 0 || f.task("g/b").Reason != "" {
		t.Fatal("reason set on an assigned task")
	}
}

func TestTaskEventsSuccess(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", rspec("a", 1000, 1, 1), rspec("b", 1000, 1, 0, "a")))
	f.upsert("w1", 4000, 8, 1)
	f.place(pa("g/a", 1, "w1", "GPU-0"))

	if res := f.report("w1", ev("g/a", 1, kStarted), ev("g/a", 1, kStarted)); res.Applied != 1 || res.Ignored != 1 {
		t.Fatalf("%+v", res)
	}
	if got := f.lastEvents(); got != "g/a RUNNING 1@w1" {
		t.Fatal(got)
	}
	if a := f.task("g/a").CurrentAttempt(); a.State != running || a.StartUnixNanos != 1004 {
		t.Fatalf("%+v", a)
	}
	// Success, then the same EXITED delivered again with other bytes: the
	// result is recorded once.
	res := f.report("w1", exited("g/a", 1, 0, `{"reward":1}`), exited("g/a", 1, 0, `{"reward":2}`))
	if res.Applied != 1 || res.Ignored != 1 {
		t.Fatalf("%+v", res)
	}
	if got := f.lastEvents(); got != "g/a SUCCEEDED 1@w1, g/b QUEUED" {
		t.Fatal(got)
	}
	a := f.task("g/a")
	if string(a.Result) != `{"reward":1}` || f.attempt("g/a") != "1@w1 SUCCEEDED" || a.CurrentAttempt().FinishUnixNanos != 1005 {
		t.Fatalf("%s %s", a.Result, f.attempt("g/a"))
	}
	if got := f.usage("w1"); got != "nothing in 0 []" {
		t.Fatal(got)
	}
	if res := f.report("w1", exited("g/a", 1, 0, `{"reward":3}`)); res.Ignored != 1 || string(f.task("g/a").Result) != `{"reward":1}` {
		t.Fatal("late duplicate changed the result")
	}
	// EXITED 0 without STARTED: started and succeeded in one entry.
	f.place(pa("g/b", 1, "w1"))
	f.report("w1", exited("g/b", 1, 0, ""))
	if got := f.lastEvents(); got != "g/b RUNNING 1@w1, g/b SUCCEEDED 1@w1, g SUCCEEDED" {
		t.Fatal(got)
	}
	if a := f.task("g/b").CurrentAttempt(); a.StartUnixNanos == 0 || a.FinishUnixNanos == 0 {
		t.Fatalf("%+v", a)
	}
	f.accountingOK()
}

func TestTaskEventsFencing(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", retries(rspec("a", 1000, 1, 0), 3)))
	f.upsert("w1", 4000, 8, 0)
	f.upsert("w2", 4000, 8, 0)
	f.place(pa("g/a", 1, "w1"))
	tests := []struct {
		name   string
		worker string
		ev     *wire.AttemptEvent
	}{
		{"wrong worker", "w2", ev("g/a", 1, kStarted)},
		{"future attempt", "w1", ev("g/a", 2, kStarted)},
		{"unknown task", "w1", ev("g/zz", 1, kStarted)},
		{"unspecified kind", "w1", ev("g/a", 1, wire.AttemptEventKind_ATTEMPT_EVENT_KIND_UNSPECIFIED)},
	}
	for _, tt := range tests {
		before := dump(t, f.View())
		if res := f.report(tt.worker, tt.ev); res.Ignored != 1 || res.Applied != 0 {
			t.Errorf("%s: %+v", tt.name, res)
		}
		if d := firstDiff(before, dump(t, f.View())); d != "" {
			t.Errorf("%s changed the table: %s", tt.name, d)
		}
	}
	// Attempt 1 fails; attempt 2 goes to w2. Late events of attempt 1,
	// from either worker, are rejected.
	f.report("w1", exited("g/a", 1, 3, ""))
	f.place(pa("g/a", 2, "w2"))
	before := dump(t, f.View())
	res := f.report("w1", ev("g/a", 1, kStarted), exited("g/a", 1, 0, "{}"), ev("g/a", 2, kStarted))
	res2 := f.report("w2", exited("g/a", 1, 0, "{}"))
	if res.Ignored != 3 || res2.Ignored != 1 || firstDiff(before, dump(t, f.View())) != "" {
		t.Fatalf("stale events applied: %+v %+v", res, res2)
	}
	f.report("w2", ev("g/a", 2, kStarted), exited("g/a", 2, 0, "{}"))
	if f.task("g/a").State != succeeded {
		t.Fatal(f.task("g/a").State)
	}
	f.accountingOK()
}

func TestTaskEventsRetries(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", retries(rspec("a", 1000, 1, 0), 2), spec("after", "a"),
		rspec("t", 100, 0, 0), retries(rspec("u", 100, 0, 0), 1)))
	f.upsert("w1", 4000, 8, 0)

	// a: exit code 3, then OOM, then a worker's reason: two retries, then FAILED.
	f.place(pa("g/a", 1, "w1"))
	f.report("w1", ev("g/a", 1, kStarted), exited("g/a", 1, 3, ""))
	a := f.task("g/a")
	if a.State != queued || a.RetriesUsed != 1 || a.LostCount != 0 || f.attempt("g/a") != "1@w1 FAILED exit=3 (exit code 3)" {
		t.Fatalf("%s %d %s", a.State, a.RetriesUsed, f.attempt("g/a"))
	}
	if got := f.lastEvents(); got != "g/a RUNNING 1@w1, g/a QUEUED 1@w1 (exit code 3)" {
		t.Fatal(got)
	}
	if got := f.usage("w1"); got != "nothing in 0 []" {
		t.Fatal(got)
	}
	f.place(pa("g/a", 2, "w1"))
	oom := ev("g/a", 2, kFailed)
	oom.OomKilled, oom.ExitCode = true, 137
	f.report("w1", ev("g/a", 2, kStarted), oom)
	if a := f.task("g/a"); a.State != queued || a.RetriesUsed != 2 || f.attempt("g/a") != "2@w1 FAILED exit=137 (OOM killed)" {
		t.Fatalf("%s %s", a.State, f.attempt("g/a"))
	}
	f.place(pa("g/a", 3, "w1"))
	bad := ev("g/a", 3, kFailed)
	bad.Reason = "image not found"
	f.report("w1", bad) // before start: ASSIGNED -> FAILED
	if got := f.lastEvents(); got != "g/a FAILED 3@w1 (image not found), g/after CANCELLED (upstream_failed)" {
		t.Fatal(got)
	}
	if a := f.task("g/a"); a.RetriesUsed != 2 || len(a.Attempts) != 3 || f.attempt("g/a") != "3@w1 FAILED (image not found)" ||
		a.Attempts[0].State != failed || a.Attempts[1].Reason != "OOM killed" {
		t.Fatalf("%+v", a.Attempts)
	}

	// t: no retries; TIMED_OUT while ASSIGNED starts it, then TIMED_OUT.
	f.place(pa("g/t", 1, "w1"))
	to := ev("g/t", 1, kTimedOut)
	to.Reason = "timeout of 60s"
	f.report("w1", to)
	if got := f.lastEvents(); !strings.HasPrefix(got, "g/t RUNNING 1@w1, g/t TIMED_OUT 1@w1 (timeout of 60s)") {
		t.Fatal(got)
	}
	// u: one retry; TIMED_OUT re-queues, the attempt says TIMED_OUT.
	f.place(pa("g/u", 1, "w1"))
	f.report("w1", ev("g/u", 1, kStarted), ev("g/u", 1, kTimedOut))
	if u := f.task("g/u"); u.State != queued || u.RetriesUsed != 1 || f.attempt("g/u") != "1@w1 TIMED_OUT (timed out)" {
		t.Fatalf("%s %s", u.State, f.attempt("g/u"))
	}
	f.place(pa("g/u", 2, "w1"))
	f.report("w1", ev("g/u", 2, kTimedOut))
	if u := f.task("g/u"); u.State != timedOut {
		t.Fatal(u.State)
	}
	if got := f.View().Graph("g").State; got != wire.GraphState_GRAPH_STATE_FAILED {
		t.Fatal(got)
	}
	f.accountingOK()
}

func TestResultLimit(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", retries(spec("a"), 5), spec("b"), spec("c", "a")))
	f.upsert("w1", 4000, 8, 0)
	f.place(pa("g/a", 1, "w1"), pa("g/b", 1, "w1"))
	f.report("w1", exited("g/a", 1, 0, strings.Repeat("x", state.MaxResultBytes+1)),
		exited("g/b", 1, 0, strings.Repeat("y", state.MaxResultBytes)))
	a, b := f.task("g/a"), f.task("g/b")
	if a.State != failed || a.Reason != "result of 65537 bytes exceeds 64 KiB" || a.Result != nil || a.RetriesUsed != 0 {
		t.Fatalf("a %s %q %d", a.State, a.Reason, len(a.Result))
	}
	if b.State != succeeded || len(b.Result) != 64<<10 {
		t.Fatalf("b %s %d", b.State, len(b.Result))
	}
	if c := f.task("g/c"); c.State != cancelled || c.Reason != state.ReasonUpstreamFailed {
		t.Fatalf("c %s", c.State)
	}
	f.accountingOK()
}

// TestLostCountsApart: lost attempts count in lost_count, failures in
// retries_used; MaxLostAttempts losses fail the task whatever its retries.
func TestLostCountsApart(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", retries(rspec("a", 1000, 1, 1), 1), spec("after", "a")))
	f.upsert("w1", 4000, 8, 1)
	f.place(pa("g/a", 1, "w1", "GPU-0"))
	f.report("w1", exited("g/a", 1, 1, ""))
	for n := uint32(2); n <= 3; n++ {
		f.place(pa("g/a", n, "w1", "GPU-0"))
		res := f.lost("not running after reconnect", pa("g/a", n, "w1"))
		if res.Lost.Requeued != 1 || res.Ignored != 0 {
			t.Fatalf("%+v", res)
		}
		if a := f.task("g/a"); a.State != queued || a.LostCount != n-1 || a.RetriesUsed != 1 ||
			f.attempt("g/a") != "2@w1 FAILED (worker w1 lost: not running after reconnect)" && n == 2 {
			t.Fatalf("%s lost %d retries %d %s", a.State, a.LostCount, a.RetriesUsed, f.attempt("g/a"))
		}
		if got := f.usage("w1"); got != "nothing in 0 []" {
			t.Fatal(got)
		}
	}
	f.place(pa("g/a", 4, "w1", "GPU-0"))
	f.report("w1", ev("g/a", 4, kStarted))
	res := f.lost("gone", pa("g/a", 4, "w1"))
	if res.Lost.Failed != 1 {
		t.Fatalf("%+v", res)
	}
	if got := f.lastEvents(); got != "g/a FAILED 4@w1 (lost 3 times), g/after CANCELLED (upstream_failed), g FAILED" {
		t.Fatal(got)
	}
	if a := f.task("g/a"); a.LostCount != 3 || a.RetriesUsed != 1 || f.attempt("g/a") != "4@w1 FAILED (worker w1 lost: gone)" {
		t.Fatalf("%d %d %s", a.LostCount, a.RetriesUsed, f.attempt("g/a"))
	}
	f.accountingOK()
}

func TestAttemptsLostFencing(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", spec("a"), spec("b")))
	f.upsert("w1", 4000, 8, 0)
	f.upsert("w2", 4000, 8, 0)
	f.place(pa("g/a", 1, "w1"), pa("g/b", 1, "w1"))
	before := dump(t, f.View())
	res := f.lost("x", pa("g/a", 1, "w2"), pa("g/a", 2, "w1"), pa("g/nope", 1, "w1"))
	if res.Ignored != 3 || res.Lost.Total() != 0 || firstDiff(before, dump(t, f.View())) != "" {
		t.Fatalf("%+v", res)
	}
	res = f.lost("x", pa("g/b", 1, "w1"), pa("g/b", 1, "w1"))
	if res.Ignored != 1 || res.Lost.Requeued != 1 {
		t.Fatalf("%+v", res)
	}
	f.accountingOK()
}

// TestCancelWhileRunning: a cancelled task keeps its attempt (and the
// worker's resources and GPUs) until the worker reports it stopped.
func TestCancelWhileRunning(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", rspec("a", 2000, 4, 1), rspec("b", 1000, 1, 0), rspec("c", 1000, 1, 1), spec("d", "a")))
	f.upsert("w1", 4000, 8, 1)
	f.place(pa("g/a", 1, "w1", "GPU-0"), pa("g/b", 1, "w1"))
	f.report("w1", ev("g/a", 1, kStarted))

	f.ok(OpCancel, cancelTask("g/a", "user"))
	a := f.task("g/a")
	if a.State != cancelled || !a.Stopping() || a.ActiveAttempt() == nil || f.attempt("g/a") != "1@w1 RUNNING" {
		t.Fatalf("%s %s", a.State, f.attempt("g/a"))
	}
	if got := f.usage("w1"); got != "3 cores, 5 GiB, 1 GPU in 2 [GPU-0]" {
		t.Fatal(got)
	}
	if got := ids(f.View().AssignedTo("w1")); got != "g/a g/b" {
		t.Fatal(got)
	}
	page, _, err := f.View().ListTasks(state.TaskFilter{WorkerID: "w1"}, "", 10)
	if err != nil || ids(page) != "g/a g/b" {
		t.Fatalf("%v %v", ids(page), err)
	}
	// The GPU is still taken: a plan for it is skipped.
	if res := f.plan(pa("g/c", 1, "w1", "GPU-0")); res.Skipped["g/c"] == "" {
		t.Fatalf("%+v", res)
	}
	// Events of the stopping attempt are accepted; STOPPED ends it.
	if res := f.report("w1", ev("g/a", 1, kStarted)); res.Ignored != 1 {
		t.Fatal("duplicate STARTED applied")
	}
	stop := ev("g/a", 1, kStopped)
	stop.ExitCode = 137
	if res := f.report("w1", stop, stop); res.Applied != 1 || res.Ignored != 1 {
		t.Fatalf("%+v", res)
	}
	if got := f.lastEvents(); got != "" {
		t.Fatalf("attempt end of a cancelled task emitted %s", got)
	}
	a = f.task("g/a")
	if a.State != cancelled || a.Stopping() || f.attempt("g/a") != "1@w1 CANCELLED exit=137 (user)" || a.CurrentAttempt().FinishUnixNanos == 0 {
		t.Fatalf("%s", f.attempt("g/a"))
	}
	if got := f.usage("w1"); got != "1 core, 1 GiB in 1 []" {
		t.Fatal(got)
	}
	f.place(pa("g/c", 1, "w1", "GPU-0"))
	f.accountingOK()

	// The graph cancelled with b ASSIGNED and c RUNNING: b's worker
	// reports it exited 0 after all (no result recorded, task stays
	// CANCELLED); c's worker is lost.
	f.report("w1", ev("g/c", 1, kStarted))
	f.ok(OpCancel, cancelGraph("g", "stop all"))
	if got := f.View().Graph("g").State; got != wire.GraphState_GRAPH_STATE_CANCELLED {
		t.Fatal(got)
	}
	if got := f.usage("w1"); got != "2 cores, 2 GiB, 1 GPU in 2 [GPU-0]" {
		t.Fatal(got)
	}
	f.report("w1", exited("g/b", 1, 0, `{"late":true}`))
	if b := f.task("g/b"); b.State != cancelled || b.Result != nil || f.attempt("g/b") != "1@w1 SUCCEEDED" {
		t.Fatalf("%s %s %s", b.State, b.Result, f.attempt("g/b"))
	}
	res := f.down("w1", "heartbeat", false)
	if res.Lost.Stopped != 1 || res.Lost.Total() != 1 {
		t.Fatalf("%+v", res)
	}
	if f.attempt("g/c") != "1@w1 CANCELLED (worker w1 lost: heartbeat)" || f.task("g/c").LostCount != 0 {
		t.Fatal(f.attempt("g/c"))
	}
	if got := f.usage("w1"); got != "nothing in 0 []" {
		t.Fatal(got)
	}
	f.accountingOK()
}

// TestWorkerDownRequeues: every attempt on a dead worker is lost; its
// tasks go back to QUEUED and can be placed elsewhere.
func TestWorkerDownRequeues(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", rspec("a", 1000, 1, 1), rspec("b", 1000, 1, 0), rspec("c", 1000, 1, 0)))
	f.upsert("w1", 4000, 8, 1)
	f.upsert("w2", 4000, 8, 1)
	f.place(pa("g/a", 1, "w1", "GPU-0"), pa("g/b", 1, "w1"), pa("g/c", 1, "w2"))
	f.report("w1", ev("g/a", 1, kStarted))

	res := f.down("w1", "no heartbeat for 30s", false)
	if !res.Known || res.Lost.Requeued != 2 || res.Lost.Total() != 2 {
		t.Fatalf("%+v", res)
	}
	if got := f.lastEvents(); got != "g/a QUEUED 1@w1 (worker w1 lost: no heartbeat for 30s), g/b QUEUED 1@w1 (worker w1 lost: no heartbeat for 30s)" {
		t.Fatal(got)
	}
	if a := f.task("g/a"); a.LostCount != 1 || a.RetriesUsed != 0 || f.attempt("g/a") != "1@w1 FAILED (worker w1 lost: no heartbeat for 30s)" {
		t.Fatalf("%d %s", a.LostCount, f.attempt("g/a"))
	}
	if w := f.worker("w1"); w.Status != down || w.ActiveAttempts != 0 || !w.Allocated.IsZero() || len(w.GPUsInUse()) != 0 {
		t.Fatalf("%+v", w)
	}
	if f.task("g/c").State != assigned {
		t.Fatal("a task on another worker was touched")
	}
	// Late events from the dead worker are rejected; the tasks go elsewhere.
	if r := f.report("w1", exited("g/a", 1, 0, "{}")); r.Ignored != 1 {
		t.Fatal("event of a lost attempt applied")
	}
	if r := f.plan(pa("g/a", 2, "w1", "GPU-0")); r.Skipped["g/a"] == "" {
		t.Fatal("placed on a dead worker")
	}
	f.place(pa("g/a", 2, "w2", "GPU-0"))
	// The worker comes back, holding nothing.
	f.upsert("w1", 4000, 8, 1)
	f.place(pa("g/b", 2, "w1"))
	if got := f.usage("w1"); got != "1 core, 1 GiB in 1 []" {
		t.Fatal(got)
	}
	// Down again, LEFT this time.
	f.down("w1", "drained", true)
	if w := f.worker("w1"); w.Status != left || f.task("g/b").LostCount != 2 {
		t.Fatalf("%s %d", w.Status, f.task("g/b").LostCount)
	}
	f.accountingOK()
}

// TestStoppedByWorker: a STOPPED the head did not ask for (the task is not
// cancelled) counts as a lost attempt.
func TestStoppedByWorker(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", spec("a")))
	f.upsert("w1", 4000, 8, 0)
	f.place(pa("g/a", 1, "w1"))
	stop := ev("g/a", 1, kStopped)
	stop.Reason = "worker shutting down"
	f.report("w1", ev("g/a", 1, kStarted), stop)
	if a := f.task("g/a"); a.State != queued || a.LostCount != 1 || a.RetriesUsed != 0 ||
		f.attempt("g/a") != "1@w1 FAILED (stopped by worker w1: worker shutting down)" {
		t.Fatalf("%s %s", a.State, f.attempt("g/a"))
	}
	f.accountingOK()
}

// workersFSM has workers in every status, attempts active with pinned GPUs,
// a cancelled task still being stopped and ended attempts.
func workersFSM(t *testing.T) *testFSM {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", rspec("a", 1000, 2, 2), rspec("b", 500, 1, 1), rspec("c", 100, 0, 0), spec("d", "a")))
	f.upsert("w1", 4000, 8, 4)
	f.upsert("w2", 2000, 4, 1)
	f.upsert("w3", 2000, 4, 0)
	f.ok(OpWorkerUpsert, &wire.WorkerUpsertCommand{UnixNanos: f.now(), Info: &wire.WorkerInfo{Id: "w0",
		Labels: map[string]string{"z": "1", "a": "2", "m": "3"}, Images: []string{"img"}, MaxConcurrentStarts: 4}})
	f.place(pa("g/a", 1, "w1", "GPU-3", "GPU-1"), pa("g/b", 1, "w2", "GPU-0"), pa("g/c", 1, "w1"))
	f.report("w1", ev("g/a", 1, kStarted))
	f.report("w2", ev("g/b", 1, kStarted))
	f.ok(OpCancel, cancelTask("g/b", "user"))
	f.report("w1", exited("g/c", 1, 2, ""))
	f.down("w3", "gone", true)
	f.accountingOK()
	return f
}

func TestSnapshotWithWorkers(t *testing.T) {
	src := workersFSM(t)
	before := dump(t, src.View())
	snap := snapshotBytes(t, src.View())
	dst := newTestFSM(t, 0)
	if err := dst.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
		t.Fatal(err)
	}
	dst.index = src.index
	if d := firstDiff(before, dump(t, dst.View())); d != "" {
		t.Fatalf("restored table differs: %s", d)
	}
	if !bytes.Equal(snap, snapshotBytes(t, dst.View())) {
		t.Fatal("snapshot of the restored table differs")
	}
	// The GPUs in use, which snapshots do not carry, came back from the
	// attempts: a plan for them is still refused, and the stopping
	// attempt still releases its GPU when it ends.
	if got := dst.usage("w1"); got != "1 core, 2 GiB, 2 GPUs in 1 [GPU-1 GPU-3]" {
		t.Fatal(got)
	}
	if h := dst.worker("w2").GPUHolder("GPU-0"); h != "g/b" {
		t.Fatal(h)
	}
	dst.accountingOK()
	dst.ok(OpSubmitGraph, submitCmd(graphSpec("h", rspec("x", 0, 0, 1)), 1))
	if res := dst.plan(pa("h/x", 1, "w1", "GPU-1")); !strings.Contains(res.Skipped["h/x"], "held by task") {
		t.Fatalf("%+v", res)
	}
	dst.report("w2", ev("g/b", 1, kStopped))
	dst.place(pa("h/x", 1, "w2", "GPU-0"))
	dst.accountingOK()

	// Equal tables give equal snapshots: the same history applied again.
	if again := snapshotBytes(t, workersFSM(t).View()); !bytes.Equal(snap, again) {
		t.Fatal("equal tables, different snapshots")
	}
}

// TestRestoreRejectsInconsistentWorkers: a snapshot whose workers disagree
// with the attempts of its tasks is refused.
func TestRestoreRejectsInconsistentWorkers(t *testing.T) {
	snap := snapshotBytes(t, workersFSM(t).View())
	tamper := func(edit func(w *wire.Worker)) []byte {
		out := []byte(snapshotMagic)
		rest := snap[len(snapshotMagic):]
		for len(rest) > 0 {
			kind := rest[0]
			size, k := binary.Uvarint(rest[1:])
			payload := rest[1+k : 1+k+int(size)]
			rest = rest[1+k+int(size):]
			if kind == recWorker {
				w := &wire.Worker{}
				if err := proto.Unmarshal(payload, w); err != nil {
					t.Fatal(err)
				}
				edit(w)
				var err error
				if payload, err = marshalOpts.Marshal(w); err != nil {
					t.Fatal(err)
				}
			}
			out = appendRecord(out, kind, payload)
		}
		return out
	}
	if err := newTestFSM(t, 0).Restore(nopCloser{bytes.NewReader(tamper(func(*wire.Worker) {}))}); err != nil {
		t.Fatalf("untouched records: %v", err)
	}
	tests := map[string]func(w *wire.Worker){
		"allocated": func(w *wire.Worker) {
			if w.Info.Id == "w1" {
				w.Allocated.CpuMillis++
			}
		},
		"active attempts": func(w *wire.Worker) {
			if w.Info.Id == "w2" {
				w.ActiveAttempts = 0
			}
		},
		"worker missing": func(w *wire.Worker) {
			if w.Info.Id == "w2" {
				w.Info.Id = "w9"
			}
		},
		"no id": func(w *wire.Worker) { w.Info.Id = "" },
	}
	for name, edit := range tests {
		t.Run(name, func(t *testing.T) {
			f := newTestFSM(t, 0)
			f.submit(graphSpec("keep", spec("k")))
			before := dump(t, f.View())
			err := f.Restore(nopCloser{bytes.NewReader(tamper(edit))})
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			if dump(t, f.View()) != before {
				t.Fatal("failed restore changed the table")
			}
		})
	}
}
