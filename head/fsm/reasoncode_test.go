package fsm

import (
	"bytes"
	"testing"

	"github.com/megaflow/megaflow/internal/wire"
)

// Every move that gives a task a reason gives it a code too, chosen from
// the command alone (its op, its event kinds and flags, its reason_code),
// never from the prose: the task, its current attempt and the task's last
// event carry it, and a snapshot keeps it. Commands from before the codes
// (no reason_code on a cancel) leave UNSPECIFIED.
func TestReasonCodes(t *testing.T) {
	const (
		unspec     = wire.ReasonCode_REASON_CODE_UNSPECIFIED
		exitCode   = wire.ReasonCode_REASON_CODE_EXIT_CODE
		oom        = wire.ReasonCode_REASON_CODE_OOM
		timeout    = wire.ReasonCode_REASON_CODE_TIMEOUT
		byUser     = wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER
		deadline   = wire.ReasonCode_REASON_CODE_CANCELLED_DEADLINE
		upstream   = wire.ReasonCode_REASON_CODE_UPSTREAM_FAILED
		workerLost = wire.ReasonCode_REASON_CODE_WORKER_LOST
		lapsed     = wire.ReasonCode_REASON_CODE_LEASE_LAPSED
		notOn      = wire.ReasonCode_REASON_CODE_NOT_ON_WORKER
		startFail  = wire.ReasonCode_REASON_CODE_START_FAILED
		wFailed    = wire.ReasonCode_REASON_CODE_WORKER_FAILED
		note       = wire.ReasonCode_REASON_CODE_RESULT_NOTE
		tooLarge   = wire.ReasonCode_REASON_CODE_RESULT_TOO_LARGE
		unplace    = wire.ReasonCode_REASON_CODE_UNPLACEABLE
		queuedWhy  = wire.ReasonCode_REASON_CODE_QUEUED
		byWorker   = wire.ReasonCode_REASON_CODE_STOPPED_BY_WORKER
	)
	failedEv := func(reason string, code wire.ReasonCode, oomKilled bool) *wire.AttemptEvent {
		e := ev("g/a", 1, kFailed)
		e.Reason, e.ReasonCode, e.OomKilled = reason, code, oomKilled
		return e
	}
	// Each case starts with graph g (a, and b after a), a QUEUED on w1's
	// fsm, retries as given; run is what happens to g/a.
	for _, tc := range []struct {
		name          string
		retries       int32
		run           func(f *testFSM)
		state         wire.TaskState
		task, attempt wire.ReasonCode
		taskB         wire.ReasonCode // g/b's code afterwards
	}{
		{name: "exit code", run: func(f *testFSM) { f.report("w1", exited("g/a", 1, 3, "")) },
			state: failed, task: exitCode, attempt: exitCode, taskB: upstream},
		{name: "exit code with the worker's words", run: func(f *testFSM) {
			e := exited("g/a", 1, 127, "")
			e.Reason, e.NotRetryable = "command not found (exit code 127; fix the task's command or image)", true
			f.report("w1", e)
		}, state: failed, task: exitCode, attempt: exitCode, taskB: upstream},
		{name: "oom as FAILED", run: func(f *testFSM) { f.report("w1", failedEv("OOM killed (memory limit 32 MiB)", unspec, true)) },
			state: failed, task: oom, attempt: oom, taskB: upstream},
		{name: "oom as EXITED 137", run: func(f *testFSM) {
			e := exited("g/a", 1, 137, "")
			e.OomKilled = true
			f.report("w1", e)
		}, state: failed, task: oom, attempt: oom, taskB: upstream},
		{name: "timeout", run: func(f *testFSM) { f.report("w1", ev("g/a", 1, kTimedOut)) },
			state: timedOut, task: timeout, attempt: timeout, taskB: upstream},
		{name: "timeout retried", retries: 1, run: func(f *testFSM) { f.report("w1", ev("g/a", 1, kTimedOut)) },
			state: queued, task: timeout, attempt: timeout},
		{name: "start failed", run: func(f *testFSM) { f.report("w1", failedEv("image \"x\" not found", startFail, false)) },
			state: failed, task: startFail, attempt: startFail, taskB: upstream},
		{name: "worker failed, no code", run: func(f *testFSM) { f.report("w1", failedEv("container disappeared", unspec, false)) },
			state: failed, task: wFailed, attempt: wFailed, taskB: upstream},
		{name: "result note", run: func(f *testFSM) {
			e := exited("g/a", 1, 0, "")
			e.Reason = "MEGAFLOW_RESULT ignored: not JSON"
			f.report("w1", e)
		}, state: succeeded, task: note, attempt: note},
		{name: "succeeded", run: func(f *testFSM) { f.report("w1", exited("g/a", 1, 0, `{"reward":1}`)) },
			state: succeeded, task: unspec, attempt: unspec},
		{name: "result too large", run: func(f *testFSM) {
			f.report("w1", exited("g/a", 1, 0, string(bytes.Repeat([]byte("x"), 65<<10))))
		}, state: failed, task: tooLarge, attempt: tooLarge, taskB: upstream},
		{name: "cancelled by user", run: func(f *testFSM) {
			c := cancelTask("g/a", "cancelled by user")
			c.ReasonCode = byUser
			f.ok(OpCancel, c)
		}, state: cancelled, task: byUser, attempt: unspec, taskB: upstream},
		{name: "cancelled by an entry from before the codes", run: func(f *testFSM) { f.ok(OpCancel, cancelTask("g/a", "cancelled by user")) },
			state: cancelled, task: unspec, attempt: unspec, taskB: upstream},
		{name: "cancelled then stopped", run: func(f *testFSM) {
			c := cancelGraph("g", "graph deadline of 5 s passed")
			c.ReasonCode = deadline
			f.ok(OpCancel, c)
			f.report("w1", ev("g/a", 1, kStopped))
		}, state: cancelled, task: deadline, attempt: deadline, taskB: deadline},
		{name: "worker down", retries: 1, run: func(f *testFSM) { f.down("w1", "gossip: dead", false) },
			state: queued, task: workerLost, attempt: workerLost},
		{name: "lease lapsed", retries: 1, run: func(f *testFSM) {
			f.ok(OpWorkerDown, &wire.WorkerDownCommand{WorkerId: "w1", Reason: "lease expired", ReasonCode: lapsed, UnixNanos: f.now()})
		}, state: queued, task: lapsed, attempt: lapsed},
		{name: "not on its worker", run: func(f *testFSM) { f.lost("worker w1 no longer runs it", pa("g/a", 1, "w1")) },
			state: queued, task: notOn, attempt: notOn},
		{name: "stopped by its worker", run: func(f *testFSM) { f.report("w1", ev("g/a", 1, kStopped)) },
			state: queued, task: byWorker, attempt: byWorker},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFSM(t, 0)
			f.upsert("w1", 64000, 64, 0)
			f.submit(graphSpec("g", retries(rspec("a", 1000, 1, 0), tc.retries), spec("b", "a")))
			f.place(pa("g/a", 1, "w1"))
			f.report("w1", ev("g/a", 1, kStarted))
			tc.run(f)
			check := func(f *testFSM, when string) {
				t.Helper()
				a := f.task("g/a")
				if a.State != tc.state || a.ReasonCode != tc.task {
					t.Fatalf("%s: g/a %s %s (%q), want %s %s", when, a.State, a.ReasonCode, a.Reason, tc.state, tc.task)
				}
				if at := a.Attempts[0]; at.ReasonCode != tc.attempt {
					t.Fatalf("%s: attempt 1 %s %s (%q), want %s", when, at.State, at.ReasonCode, at.Reason, tc.attempt)
				}
				if b := f.task("g/b"); b.ReasonCode != tc.taskB {
					t.Fatalf("%s: g/b %s %s (%q), want %s", when, b.State, b.ReasonCode, b.Reason, tc.taskB)
				}
			}
			check(f, "applied")
			evs, _, err := f.EventsAfter(Cursor{}, "g", 1000)
			if err != nil {
				t.Fatal(err)
			}
			var last *wire.Event
			for _, e := range evs {
				if e.TaskId == "g/a" {
					last = e
				}
			}
			if last.ReasonCode != tc.task {
				t.Fatalf("g/a's last event %s %s, want %s", last.TaskState, last.ReasonCode, tc.task)
			}
			dst := newTestFSM(t, 0)
			if err := dst.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, f.View()))}); err != nil {
				t.Fatal(err)
			}
			check(dst, "restored")
		})
	}
}

// A queueing reason and an unplaceable failure have their codes too.
func TestReasonCodesUnplaceable(t *testing.T) {
	f := newTestFSM(t, 0)
	f.upsert("w1", 64000, 64, 0)
	f.submit(graphSpec("g", rspec("a", 1000, 1, 0)))
	why := "no worker has 1 TiB of memory"
	f.unplaced(map[string]string{"g/a": why})
	if a := f.task("g/a"); a.ReasonCode != wire.ReasonCode_REASON_CODE_QUEUED {
		t.Fatalf("queued: %s", a.ReasonCode)
	}
	f.ok(OpFailQueued, &wire.FailQueuedCommand{TaskIds: []string{"g/a"}, Reasons: []string{why},
		QueuedBeforeUnixNanos: f.task("g/a").QueuedUnixNanos, UnixNanos: f.now()})
	if a := f.task("g/a"); a.State != failed || a.ReasonCode != wire.ReasonCode_REASON_CODE_UNPLACEABLE {
		t.Fatalf("failed queued: %s %s", a.State, a.ReasonCode)
	}
}
