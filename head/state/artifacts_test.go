package state

import (
	"testing"

	"github.com/megaflow/megaflow/internal/wire"
)

// TestArtifactsPending: a final event with artifacts_pending marks its
// attempt; ARTIFACTS_LANDED clears it only from the worker that ran the
// attempt, after the end, and changes nothing else; the flag survives the
// wire form (snapshots).
func TestArtifactsPending(t *testing.T) {
	type step struct {
		worker string
		ev     *wire.AttemptEvent
		// applied is ApplyAttemptEvent's answer; pending the flag after.
		applied, pending bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
		state wire.TaskState
	}{
		{"exit 0 pending then landed", []step{
			{"w1", &wire.AttemptEvent{TaskId: "g/a", Attempt: 1, Kind: evExited, ArtifactsPending: true}, true, true},
			{"w2", &wire.AttemptEvent{TaskId: "g/a", Attempt: 1, Kind: evLanded}, false, true},
			{"w1", &wire.AttemptEvent{TaskId: "g/a", Attempt: 2, Kind: evLanded}, false, true},
			{"w1", &wire.AttemptEvent{TaskId: "g/a", Attempt: 1, Kind: evLanded}, true, false},
			{"w1", &wire.AttemptEvent{TaskId: "g/a", Attempt: 1, Kind: evLanded}, false, false},
		}, succeeded},
		{"failure pending", []step{
			{"w1", &wire.AttemptEvent{TaskId: "g/a", Attempt: 1, Kind: evFailed, Reason: "x", ArtifactsPending: true}, true, true},
		}, failed},
		{"landed before anything pending", []step{
			{"w1", &wire.AttemptEvent{TaskId: "g/a", Attempt: 1, Kind: evLanded}, false, false},
			{"w1", &wire.AttemptEvent{TaskId: "g/a", Attempt: 1, Kind: evExited}, true, false},
		}, succeeded},
		{"fenced final event sets nothing", []step{
			{"w9", &wire.AttemptEvent{TaskId: "g/a", Attempt: 1, Kind: evExited, ArtifactsPending: true}, false, false},
		}, running},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t)
			s.insert("g", "t", "a")
			s.move("g/a", "w1", assigned, running)
			for i, st := range tc.steps {
				s.write(func(txn *Txn) {
					if got := txn.ApplyAttemptEvent(st.worker, st.ev, 100, RetryBackoff{}); got != st.applied {
						t.Fatalf("step %d: applied %v, want %v", i, got, st.applied)
					}
				})
				if got := s.Snapshot().Task("g/a").Attempts[0].ArtifactsPending; got != st.pending {
					t.Fatalf("step %d: pending %v, want %v", i, got, st.pending)
				}
			}
			task := s.Snapshot().Task("g/a")
			if task.State != tc.state {
				t.Fatalf("state %s, want %s", task.State, tc.state)
			}
			back, err := TaskFromWire(task.ToWire())
			if err != nil || back.Attempts[0].ArtifactsPending != task.Attempts[0].ArtifactsPending {
				t.Fatalf("wire round trip lost the flag: %v", err)
			}
			if err := s.Snapshot().VerifyAccounting(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
