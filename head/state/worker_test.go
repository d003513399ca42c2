package state

import (
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/resources"
	"github.com/megaflow/megaflow/internal/wire"
)

func TestResourcesOf(t *testing.T) {
	if got := ResourcesOf(nil); !got.IsZero() {
		t.Fatal(got)
	}
	got := ResourcesOf(&wire.Resources{CpuMillis: -5, MemoryBytes: 7, Gpus: -1, GpuModel: "H100"})
	if got != (resources.Resources{MemoryBytes: 7}) {
		t.Fatal(got)
	}
	if w := resourcesToWire(resources.Resources{CPUMillis: 1, MemoryBytes: 2, GPUs: 3}); w.CpuMillis != 1 || w.MemoryBytes != 2 || w.Gpus != 3 {
		t.Fatal(w)
	}
}

func TestWorkerWire(t *testing.T) {
	s := newTestStore(t)
	s.insert("g", "t", "a")
	s.move("g/a", "w1", assigned)
	w := s.Snapshot().Worker("w1")
	back, err := WorkerFromWire(w.ToWire())
	if err != nil || back.ID() != "w1" || back.Info != w.Info || back.Status != w.Status || back.ActiveAttempts != 1 ||
		back.Allocated != w.Allocated || back.ModifyIndex != w.ModifyIndex || back.UpdateUnixNanos != w.UpdateUnixNanos {
		t.Fatalf("%+v %v", back, err)
	}
	for _, bad := range []*wire.Worker{{}, {Info: &wire.WorkerInfo{}}, {Info: &wire.WorkerInfo{Id: "a\x00"}}} {
		if _, err := WorkerFromWire(bad); errs.ClassOf(err) != errs.InvalidArgument {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

// TestCancelKeepsAttempt: a task cancelled while its attempt runs keeps the
// attempt active (and listed on its worker) until the attempt ends.
func TestCancelKeepsAttempt(t *testing.T) {
	s := newTestStore(t)
	s.insert("g", "t", "a", "b", "c")
	s.move("g/a", "w1", assigned, running)
	s.move("g/b", "w1", assigned)
	s.move("g/c", "w1", assigned, running)
	s.write(func(txn *Txn) {
		if _, err := txn.CancelTask("g/a", wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER, "user", 50); err != nil {
			t.Fatal(err)
		}
		if _, err := txn.CancelGraph("g", wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER, "all", 51); err != nil {
			t.Fatal(err)
		}
	})
	v := s.Snapshot()
	for _, id := range []string{"g/a", "g/b", "g/c"} {
		task := v.Task(id)
		if task.State != cancelled || !task.Stopping() || task.ActiveAttempt() == nil || task.CurrentAttempt().FinishUnixNanos != 0 {
			t.Fatalf("%s: %s %+v", id, task.State, task.CurrentAttempt())
		}
	}
	if got := ids(v.AssignedTo("w1")); strings.Join(got, " ") != "g/a g/b g/c" || v.Worker("w1").ActiveAttempts != 3 {
		t.Fatal(got)
	}
	if err := v.VerifyAccounting(); err != nil {
		t.Fatal(err)
	}
	// The worker reports a ended; loses b.
	s.write(func(txn *Txn) {
		if !txn.ApplyAttemptEvent("w1", &wire.AttemptEvent{TaskId: "g/a", Attempt: 1, Kind: evStopped}, 60, RetryBackoff{}) {
			t.Fatal("STOPPED of a stopping attempt ignored")
		}
		if txn.LoseAttempt("g/b", 1, "w1", wire.ReasonCode_REASON_CODE_NOT_ON_WORKER, "gone", 60) != LossStopped {
			t.Fatal("lost stopping attempt")
		}
		if len(txn.TakeEvents()) != 0 {
			t.Fatal("ending the attempt of a cancelled task emitted events")
		}
	})
	v = s.Snapshot()
	if a := v.Task("g/a").CurrentAttempt(); a.State != cancelled || a.Reason != "user" || a.FinishUnixNanos != 60 || a.Active() {
		t.Fatalf("%+v", a)
	}
	if a := v.Task("g/b").CurrentAttempt(); a.State != cancelled || a.Reason != "gone" || v.Task("g/b").LostCount != 0 {
		t.Fatalf("%+v", a)
	}
	if got := ids(v.AssignedTo("w1")); strings.Join(got, " ") != "g/c" || v.Worker("w1").ActiveAttempts != 1 {
		t.Fatal(got)
	}
	if err := v.VerifyAccounting(); err != nil {
		t.Fatal(err)
	}
}

// TestRefusalsChangeNothing: refused placements, ignored events and lost
// attempts that are not there write nothing and emit nothing.
func TestRefusalsChangeNothing(t *testing.T) {
	s := newTestStore(t)
	s.insert("g", "t", "a", "b")
	s.move("g/a", "w1", assigned)
	before := s.Snapshot()
	ev := s.write(func(txn *Txn) {
		if _, err := txn.Place(&wire.PlannedAttempt{TaskId: "g/b", Attempt: 1, WorkerId: "w9"}, 1, 9); errs.ClassOf(err) != errs.NotFound {
			t.Errorf("unknown worker: %v", err)
		}
		if _, err := txn.Place(&wire.PlannedAttempt{TaskId: "g/a", Attempt: 2, WorkerId: "w1"}, 1, 9); errs.ClassOf(err) != errs.FailedPrecondition {
			t.Errorf("assigned task: %v", err)
		}
		if txn.ApplyAttemptEvent("w2", &wire.AttemptEvent{TaskId: "g/a", Attempt: 1, Kind: evStarted}, 9, RetryBackoff{}) {
			t.Error("event from the wrong worker applied")
		}
		if txn.LoseAttempt("g/a", 2, "w1", wire.ReasonCode_REASON_CODE_NOT_ON_WORKER, "x", 9) != LossNone || txn.LoseAttempt("g/b", 1, "w1", wire.ReasonCode_REASON_CODE_NOT_ON_WORKER, "x", 9) != LossNone {
			t.Error("lost an attempt that is not there")
		}
		if txn.SetQueueReason("g/a", "x", 9) || txn.SetQueueReason("g/zz", "x", 9) {
			t.Error("queue reason on a task that is not QUEUED")
		}
		if _, err := txn.WorkerDown("w9", false, wire.ReasonCode_REASON_CODE_WORKER_LOST, "x", 9); errs.ClassOf(err) != errs.NotFound {
			t.Errorf("unknown worker down: %v", err)
		}
	})
	if len(ev) != 0 {
		t.Fatalf("events %s", evString(ev))
	}
	after := s.Snapshot()
	for _, id := range []string{"g/a", "g/b"} {
		if after.Task(id) != before.Task(id) {
			t.Errorf("%s rewritten", id)
		}
	}
	if after.Worker("w1") != before.Worker("w1") {
		t.Error("worker rewritten")
	}
}

// TestVerifyAccountingCatches: the check finds a worker row that disagrees
// with the attempts, and an active attempt that is not current.
func TestVerifyAccountingCatches(t *testing.T) {
	s := newTestStore(t)
	s.insert("g", "t", "a", "b")
	s.move("g/a", "w1", assigned, running)
	if err := s.Snapshot().VerifyAccounting(); err != nil {
		t.Fatal(err)
	}
	s.write(func(txn *Txn) {
		w := txn.Worker("w1").clone()
		w.ActiveAttempts = 2
		must(txn.mem.Insert(tableWorkers, w))
		b := txn.Task("g/b").clone()
		b.Attempts = []Attempt{{Number: 1, WorkerID: "w1", State: running}, {Number: 2, WorkerID: "w1", State: failed}}
		must(txn.mem.Insert(tableTasks, b))
	})
	err := s.Snapshot().VerifyAccounting()
	if err == nil || !strings.Contains(err.Error(), `worker "w1": table says 2 attempts`) ||
		!strings.Contains(err.Error(), `task "g/b": attempt 1 is active but not current`) {
		t.Fatal(err)
	}
}
