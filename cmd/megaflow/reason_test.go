package main

import (
	"testing"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/wire"
)

func TestTaskReasonSaysWhyAnEarlierAttemptEnded(t *testing.T) {
	lost := &client.Attempt{Number: 1, State: client.TaskFailed, Reason: "stopped by worker w1: its megaflow-init exited"}
	failed := &client.Attempt{Number: 1, State: client.TaskFailed, Reason: "exit code 1"}
	cur := &client.Attempt{Number: 2, State: client.TaskRunning}
	for _, c := range []struct {
		name string
		task *client.Task
		want string
	}{
		{"first attempt running", &client.Task{State: client.TaskRunning, Attempts: []*client.Attempt{cur}}, ""},
		{"running again after a lost attempt", &client.Task{State: client.TaskRunning, Attempts: []*client.Attempt{lost, cur}},
			"attempt 1 ended (failed): stopped by worker w1: its megaflow-init exited"},
		{"succeeded on its second attempt", &client.Task{State: client.TaskSucceeded, Attempts: []*client.Attempt{lost, cur}},
			"attempt 1 ended (failed): stopped by worker w1: its megaflow-init exited"},
		{"queued again: the queue's reason and the attempt's", &client.Task{State: client.TaskQueued, Reason: "waiting for the retry backoff",
			Attempts: []*client.Attempt{failed}}, "waiting for the retry backoff; attempt 1 ended (failed): exit code 1"},
		{"queued again, no reason of its own", &client.Task{State: client.TaskQueued, Attempts: []*client.Attempt{failed}},
			"attempt 1 ended (failed): exit code 1"},
		{"the same reason once", &client.Task{State: client.TaskQueued, Reason: "exit code 1", Attempts: []*client.Attempt{failed}}, "exit code 1"},
		{"failed in the end: its own reason", &client.Task{State: client.TaskFailed, Reason: "exit code 2",
			Attempts: []*client.Attempt{failed, {Number: 2, State: client.TaskFailed, Reason: "exit code 2"}}}, "exit code 2"},
		{"never run", &client.Task{State: client.TaskQueued, Reason: "no worker has 64 cores"}, "no worker has 64 cores"},
		{"an earlier attempt without a reason", &client.Task{State: client.TaskRunning, Attempts: []*client.Attempt{{Number: 1}, cur}}, ""},
	} {
		if got := taskReason(c.task); got != c.want {
			t.Errorf("%s: taskReason = %q, want %q", c.name, got, c.want)
		}
	}
}

// The watch's progress line says why a graph that runs nothing waits.
func TestStuckNote(t *testing.T) {
	const why = "no worker runs the docker runtime (the task asks for runtime: docker; a worker's is its --runtime)"
	for _, c := range []struct {
		name   string
		counts *wire.StateCounts
		reason string
		want   string
	}{
		{"all queued", &wire.StateCounts{Queued: 2}, why, "  (queued: " + why + ")"},
		{"some running", &wire.StateCounts{Queued: 2, Running: 1}, why, ""},
		{"some assigned", &wire.StateCounts{Queued: 2, Assigned: 1}, why, ""},
		{"none queued", &wire.StateCounts{Succeeded: 2}, why, ""},
		{"no reason yet", &wire.StateCounts{Queued: 2}, "", ""},
	} {
		if got := stuckNote(c.counts, c.reason); got != c.want {
			t.Errorf("%s: stuckNote = %q, want %q", c.name, got, c.want)
		}
	}
}
