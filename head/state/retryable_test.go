package state

import (
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/wire"
)

// An attempt the worker marks not retryable fails its task at once, with
// its retries unspent and the reason saying so; the same failure without
// the mark spends a retry and requeues the task.
func TestNotRetryableFailsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name         string
		ev           *wire.AttemptEvent
		wantState    wire.TaskState
		wantRetries  uint32
		wantInReason string
	}{
		{"image not found", &wire.AttemptEvent{Kind: evFailed, Reason: `image "x:1" not found`, NotRetryable: true},
			failed, 0, `image "x:1" not found (not retried: a retry cannot fix this)`},
		{"command not found", &wire.AttemptEvent{Kind: evExited, ExitCode: 127, Reason: "command not found (exit code 127)", NotRetryable: true},
			failed, 0, "command not found (exit code 127) (not retried"},
		{"retryable failure", &wire.AttemptEvent{Kind: evFailed, Reason: "container runtime unavailable"},
			queued, 1, "container runtime unavailable"},
		{"retryable exit", &wire.AttemptEvent{Kind: evExited, ExitCode: 1},
			queued, 1, "exit code 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t)
			g, tasks := buildRows("g", "t", "a")
			tasks[0].Spec.MaxRetries = 3
			s.write(func(txn *Txn) {
				if err := txn.InsertGraph(g, tasks, 1); err != nil {
					t.Fatal(err)
				}
			})
			s.move("g/a", "w1", assigned)
			tc.ev.TaskId, tc.ev.Attempt = "g/a", 1
			s.write(func(txn *Txn) {
				if !txn.ApplyAttemptEvent("w1", tc.ev, 100, RetryBackoff{}) {
					t.Fatal("event not applied")
				}
			})
			task := s.task("g/a")
			if task.State != tc.wantState || task.RetriesUsed != tc.wantRetries || !strings.Contains(task.Reason, tc.wantInReason) {
				t.Fatalf("task %s, %d retries used, reason %q; want %s, %d, reason containing %q",
					task.State, task.RetriesUsed, task.Reason, tc.wantState, tc.wantRetries, tc.wantInReason)
			}
			if err := s.Snapshot().VerifyAccounting(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
