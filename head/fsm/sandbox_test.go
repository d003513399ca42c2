package fsm

import (
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/megaflow/megaflow/internal/wire"
)

// Under rules 2 a sandbox's attempt lost after it started fails its task
// with SANDBOX_LOST (never re-queued: its state was in the container);
// under rules 1 it re-queues like any task. A sandbox lost before it
// started, and a plain task, re-queue under both.
func TestSandboxLossUnderRules(t *testing.T) {
	const (
		queued     = wire.TaskState_TASK_STATE_QUEUED
		failedSt   = wire.TaskState_TASK_STATE_FAILED
		sbxLost    = wire.ReasonCode_REASON_CODE_SANDBOX_LOST
		workerLost = wire.ReasonCode_REASON_CODE_WORKER_LOST
		byWorker   = wire.ReasonCode_REASON_CODE_STOPPED_BY_WORKER
		notOn      = wire.ReasonCode_REASON_CODE_NOT_ON_WORKER
	)
	lose := map[string]func(f *testFSM){
		"attempts lost": func(f *testFSM) { f.lost("gone", pa("g/a", 1, "w1")) },
		"worker down":   func(f *testFSM) { f.down("w1", "dead", false) },
		"stopped by worker": func(f *testFSM) {
			e := ev("g/a", 1, kStopped)
			e.Reason = "lease lapsed"
			f.report("w1", e)
		},
	}
	for _, tc := range []struct {
		name    string
		rules   uint64
		sandbox bool
		started bool
		state   wire.TaskState
		// code is the task's code; for a re-queued task, that of its last attempt.
		code map[string]wire.ReasonCode
	}{
		{"rules 2 sandbox started", 2, true, true, failedSt, map[string]wire.ReasonCode{"attempts lost": sbxLost, "worker down": sbxLost, "stopped by worker": sbxLost}},
		{"rules 2 sandbox not started", 2, true, false, queued, map[string]wire.ReasonCode{"attempts lost": notOn, "worker down": workerLost, "stopped by worker": byWorker}},
		{"rules 2 plain task started", 2, false, true, queued, map[string]wire.ReasonCode{"attempts lost": notOn, "worker down": workerLost, "stopped by worker": byWorker}},
		{"rules 1 sandbox started", 1, true, true, queued, map[string]wire.ReasonCode{"attempts lost": notOn, "worker down": workerLost, "stopped by worker": byWorker}},
	} {
		for how, loseIt := range lose {
			t.Run(tc.name+"/"+how, func(t *testing.T) {
				f := newTestFSM(t, 0)
				f.ok(OpSetRules, wrapperspb.UInt64(tc.rules))
				f.upsert("w1", 64000, 64, 0)
				s := rspec("a", 1000, 1, 0)
				if tc.sandbox {
					s.Sandbox = &wire.SandboxSpec{IdleTimeoutSeconds: 60}
				}
				f.submit(graphSpec("g", s))
				f.place(pa("g/a", 1, "w1"))
				if tc.started {
					f.report("w1", ev("g/a", 1, kStarted))
				}
				loseIt(f)
				task := f.task("g/a")
				if task.State != tc.state {
					t.Fatalf("task %s (%s); want %s", task.State, task.Reason, tc.state)
				}
				code := task.ReasonCode
				if tc.state == queued {
					code = task.Attempts[len(task.Attempts)-1].ReasonCode
				}
				if want := tc.code[how]; code != want {
					t.Fatalf("code %s (reason %q); want %s", code, task.Reason, want)
				}
				if tc.state == failedSt {
					if a := task.Attempts[0]; a.State != failedSt || a.ReasonCode != sbxLost || a.FinishUnixNanos == 0 {
						t.Fatalf("attempt %s %s finish %d; want FAILED SANDBOX_LOST, finished", a.State, a.ReasonCode, a.FinishUnixNanos)
					}
					if w := f.worker("w1"); w.ActiveAttempts != 0 {
						t.Fatalf("worker still holds %d attempts", w.ActiveAttempts)
					}
				}
			})
		}
	}
}
