package state

import (
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/wire"
)

// gangStore holds graph g with tasks r0 and r1 in gang "train" (max_retries
// retries each, 1 CPU each) and a task "after" depending on both, placed
// and started on workers w0 and w1 of 2 CPUs.
func gangStore(t *testing.T, retries int32) *testStore {
	t.Helper()
	s := newTestStore(t)
	g, tasks := buildRows("g", "tenant", "r0", "r1", "after<r0,r1")
	for _, task := range tasks[:2] {
		task.Spec.Gang, task.Spec.MaxRetries = "train", retries
		task.Spec.Resources = &wire.Resources{CpuMillis: 1000}
	}
	s.write(func(txn *Txn) {
		for _, w := range []string{"w0", "w1"} {
			if _, err := txn.UpsertWorker(&wire.WorkerInfo{Id: w, Capacity: &wire.Resources{CpuMillis: 2000}}, 1); err != nil {
				t.Fatal(err)
			}
		}
		if err := txn.InsertGraph(g, tasks, 1); err != nil {
			t.Fatal(err)
		}
	})
	s.placeGang(t, 1)
	return s
}

// placeGang places r0 on w0 and r1 on w1 as attempt n and starts them.
func (s *testStore) placeGang(t *testing.T, n uint32) {
	t.Helper()
	s.write(func(txn *Txn) {
		for i, id := range []string{"g/r0", "g/r1"} {
			if _, err := txn.Place(&wire.PlannedAttempt{TaskId: id, Attempt: n, WorkerId: []string{"w0", "w1"}[i]}, 1, 2); err != nil {
				t.Fatal(err)
			}
		}
	})
	s.gangEvent(t, "w0", "g/r0", n, evStarted, 0)
	s.gangEvent(t, "w1", "g/r1", n, evStarted, 0)
}

func (s *testStore) gangEvent(t *testing.T, worker, task string, attempt uint32, kind wire.AttemptEventKind, code int32) {
	t.Helper()
	s.write(func(txn *Txn) {
		if !txn.ApplyAttemptEvent(worker, &wire.AttemptEvent{TaskId: task, Attempt: attempt, Kind: kind, ExitCode: code}, int64(s.index), RetryBackoff{}) {
			t.Fatalf("event %v of %s attempt %d on %s ignored", kind, task, attempt, worker)
		}
	})
}

func (s *testStore) allocated(worker string) int64 {
	return s.Snapshot().Worker(worker).Allocated.CPUMillis
}

// A failed attempt with a retry left re-queues the whole gang: the other
// task's attempt keeps its worker until the worker reports it stopped, is
// not charged, and the gang is placed again only then.
func TestGangRestartsAsAWhole(t *testing.T) {
	s := gangStore(t, 1)
	s.gangEvent(t, "w0", "g/r0", 1, evExited, 3)
	r0, r1 := s.task("g/r0"), s.task("g/r1")
	if r0.State != queued || r0.RetriesUsed != 1 {
		t.Fatalf("r0 %v retries %d; want QUEUED, 1", r0.State, r0.RetriesUsed)
	}
	if r1.State != queued || !r1.Stopping() || r1.RetriesUsed != 0 || r1.LostCount != 0 {
		t.Fatalf("r1 %v stopping=%v retries=%d lost=%d; want QUEUED, stopping, nothing charged", r1.State, r1.Stopping(), r1.RetriesUsed, r1.LostCount)
	}
	if want := `gang "train" restarts: task "r0": exit code 3`; r1.Reason != want {
		t.Fatalf("r1 reason %q; want %q", r1.Reason, want)
	}
	if got := s.allocated("w1"); got != 1000 {
		t.Fatalf("w1 allocated %d millicores while r1's attempt still runs; want 1000", got)
	}
	s.write(func(txn *Txn) {
		_, err := txn.Place(&wire.PlannedAttempt{TaskId: "g/r1", Attempt: 2, WorkerId: "w0"}, 1, 3)
		if err == nil || !strings.Contains(err.Error(), "still runs on worker") {
			t.Fatalf("placing r1 while its attempt stops: %v", err)
		}
	})
	s.gangEvent(t, "w1", "g/r1", 1, evStopped, 0)
	r1 = s.task("g/r1")
	if r1.Stopping() || r1.State != queued || r1.Attempts[0].State != cancelled {
		t.Fatalf("r1 after its stop: %v stopping=%v attempt %v", r1.State, r1.Stopping(), r1.Attempts[0].State)
	}
	if got := s.allocated("w1"); got != 0 {
		t.Fatalf("w1 allocated %d millicores after the stop; want 0", got)
	}
	s.placeGang(t, 2)
	s.gangEvent(t, "w0", "g/r0", 2, evExited, 0)
	s.gangEvent(t, "w1", "g/r1", 2, evExited, 0)
	if got := stateNames(s.task("g/r0"), s.task("g/r1"), s.task("g/after")); got != "SUCCEEDED SUCCEEDED QUEUED" {
		t.Fatalf("states %s", got)
	}
}

// A task of the gang failing for good cancels the others; their attempts
// are stopped, and the gang's dependents are cancelled.
func TestGangFailsTogether(t *testing.T) {
	s := gangStore(t, 0)
	s.gangEvent(t, "w1", "g/r1", 1, evExited, 2)
	r0 := s.task("g/r0")
	if r0.State != cancelled || !r0.Stopping() {
		t.Fatalf("r0 %v stopping=%v; want CANCELLED and stopping", r0.State, r0.Stopping())
	}
	if want := `gang "train": task "r1" failed: exit code 2`; r0.Reason != want {
		t.Fatalf("r0 reason %q; want %q", r0.Reason, want)
	}
	if got := s.task("g/after"); got.State != cancelled || got.Reason != ReasonUpstreamFailed {
		t.Fatalf("after %v %q", got.State, got.Reason)
	}
	s.gangEvent(t, "w0", "g/r0", 1, evStopped, 0)
	if got := s.allocated("w0"); got != 0 {
		t.Fatalf("w0 allocated %d", got)
	}
	if g := s.Snapshot().Graph("g"); g.State != wire.GraphState_GRAPH_STATE_FAILED {
		t.Fatalf("graph %v", g.State)
	}
}

// Once a task of the gang succeeded, another's failure is final even with
// retries left.
func TestGangNoRetryAfterASuccess(t *testing.T) {
	s := gangStore(t, 3)
	s.gangEvent(t, "w0", "g/r0", 1, evExited, 0)
	s.gangEvent(t, "w1", "g/r1", 1, evExited, 1)
	r1 := s.task("g/r1")
	if r1.State != failed || !strings.Contains(r1.Reason, `not retried: task "r0" of gang "train" already succeeded`) {
		t.Fatalf("r1 %v %q", r1.State, r1.Reason)
	}
}

// A lost worker re-queues its task and restarts the rest of the gang.
func TestGangWorkerDownRestartsTheGang(t *testing.T) {
	s := gangStore(t, 0)
	s.write(func(txn *Txn) {
		if _, err := txn.WorkerDown("w0", false, wire.ReasonCode_REASON_CODE_WORKER_LOST, "gossip: dead", int64(s.index)); err != nil {
			t.Fatal(err)
		}
	})
	r0, r1 := s.task("g/r0"), s.task("g/r1")
	if r0.State != queued || r0.LostCount != 1 || r1.State != queued || !r1.Stopping() || r1.LostCount != 0 {
		t.Fatalf("r0 %v lost %d, r1 %v stopping=%v lost %d", r0.State, r0.LostCount, r1.State, r1.Stopping(), r1.LostCount)
	}
	// w1's stream reconciles: the attempt it no longer runs is lost, the
	// task stays QUEUED and nothing is charged.
	s.write(func(txn *Txn) {
		if l := txn.LoseAttempt("g/r1", 1, "w1", wire.ReasonCode_REASON_CODE_NOT_ON_WORKER, "gone", int64(s.index)); l != LossStopped {
			t.Fatalf("loss %v", l)
		}
	})
	if r1 = s.task("g/r1"); r1.State != queued || r1.Stopping() || r1.LostCount != 0 {
		t.Fatalf("r1 %v stopping=%v lost %d", r1.State, r1.Stopping(), r1.LostCount)
	}
}

// Cancelling the graph cancels a gang with the graph's reason.
func TestGangCancelGraph(t *testing.T) {
	s := gangStore(t, 0)
	s.write(func(txn *Txn) {
		if _, err := txn.CancelGraph("g", wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER, "enough", int64(s.index)); err != nil {
			t.Fatal(err)
		}
	})
	for _, id := range []string{"g/r0", "g/r1", "g/after"} {
		if got := s.task(id); got.State != cancelled || got.Reason != "enough" {
			t.Fatalf("%s %v %q", id, got.State, got.Reason)
		}
	}
}

func TestGangLess(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"rank-2", "rank-10", true},
		{"rank-10", "rank-2", false},
		{"a", "b", true},
		{"node", "node-0", true},
		{"r01", "r1", true}, // equal as numbers: byte order
		{"r1", "r01", false},
		{"x9y", "x10a", true},
		{"same", "same", false},
	} {
		if got := GangLess(c.a, c.b); got != c.want {
			t.Errorf("GangLess(%q, %q) = %v; want %v", c.a, c.b, got, c.want)
		}
	}
}

// Every task of a gang cancelled because of one names that one, not the
// task that happened to pass the news on.
func TestGangReasonsNameTheFirstTask(t *testing.T) {
	s := newTestStore(t)
	g, tasks := buildRows("g", "tenant", "r0", "r1", "r2")
	for _, task := range tasks {
		task.Spec.Gang = "train"
	}
	s.write(func(txn *Txn) {
		if err := txn.InsertGraph(g, tasks, 1); err != nil {
			t.Fatal(err)
		}
	})
	s.write(func(txn *Txn) {
		if n, err := txn.CancelTask("g/r1", wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER, "not needed", 2); err != nil || n != 3 {
			t.Fatalf("cancelled %d tasks, %v; want the 3 of the gang", n, err)
		}
	})
	for _, id := range []string{"g/r0", "g/r2"} {
		if got, want := s.task(id).Reason, `gang "train": task "r1" cancelled: not needed`; got != want {
			t.Errorf("%s reason %q; want %q", id, got, want)
		}
	}
}
