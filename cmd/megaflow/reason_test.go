package main

import (
	"testing"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/wire"
)

func TestTaskReasonSaysWhyAnEarlierAttemptEnded(t *testing.T) {
	lost := &client.Attempt{Number: 1, State: client.TaskFailed, Reason: "stopped by worker w1: its megaflow-init exited",
		ReasonCode: wire.ReasonCode_REASON_CODE_STOPPED_BY_WORKER}
	lapsed := &client.Attempt{Number: 1, State: client.TaskFailed, Reason: "worker w2 lease lapsed", ReasonCode: wire.ReasonCode_REASON_CODE_LEASE_LAPSED}
	startFailed := &client.Attempt{Number: 1, State: client.TaskFailed, Reason: "no such image", ReasonCode: wire.ReasonCode_REASON_CODE_START_FAILED}
	failed := &client.Attempt{Number: 1, State: client.TaskFailed, Reason: "exit code 1"}
	cur := &client.Attempt{Number: 2, State: client.TaskRunning}
	for _, c := range []struct {
		name string
		task *client.Task
		want string
	}{
		{"first attempt running", &client.Task{State: client.TaskRunning, Attempts: []*client.Attempt{cur}}, ""},
		{"running again after a lost attempt", &client.Task{State: client.TaskRunning, Attempts: []*client.Attempt{lost, cur}},
			"attempt 1 was lost (run again, not counted as a failure): stopped by worker w1: its megaflow-init exited"},
		{"succeeded on its second attempt", &client.Task{State: client.TaskSucceeded, Attempts: []*client.Attempt{lost, cur}},
			"attempt 1 was lost (run again, not counted as a failure): stopped by worker w1: its megaflow-init exited"},
		{"queued again after a lapsed lease", &client.Task{State: client.TaskQueued, Attempts: []*client.Attempt{lapsed}},
			"attempt 1 was lost (run again, not counted as a failure): worker w2 lease lapsed"},
		{"running again after a failed start: a failure", &client.Task{State: client.TaskRunning, Attempts: []*client.Attempt{startFailed, cur}},
			"attempt 1 ended (failed): no such image"},
		{"queued again: the queue's reason and the attempt's", &client.Task{State: client.TaskQueued, Reason: "waiting for the retry backoff",
			Attempts: []*client.Attempt{failed}}, "waiting for the retry backoff; attempt 1 ended (failed): exit code 1"},
		{"queued again, no reason of its own", &client.Task{State: client.TaskQueued, Attempts: []*client.Attempt{failed}},
			"attempt 1 ended (failed): exit code 1"},
		{"the same reason once", &client.Task{State: client.TaskQueued, Reason: "exit code 1", Attempts: []*client.Attempt{failed}}, "exit code 1"},
		{"failed in the end: its own reason", &client.Task{State: client.TaskFailed, Reason: "exit code 2",
			Attempts: []*client.Attempt{failed, {Number: 2, State: client.TaskFailed, Reason: "exit code 2"}}}, "exit code 2"},
		{"never run", &client.Task{State: client.TaskQueued, Reason: "no worker has 64 cores"}, "no worker has 64 cores"},
		{"an earlier attempt without a reason", &client.Task{State: client.TaskRunning, Attempts: []*client.Attempt{{Number: 1}, cur}}, ""},
		{"cancelled because a dependency did not succeed", &client.Task{State: client.TaskCancelled, Reason: "upstream_failed"},
			"a dependency did not succeed (upstream_failed)"},
		{"failed after its attempts were lost: the last cause", &client.Task{State: client.TaskFailed, Reason: "lost 3 times",
			Attempts: []*client.Attempt{lost, lapsed, {Number: 3, State: client.TaskFailed, Reason: "worker w3 lost: lease expired"}}},
			"lost 3 times (the last: worker w3 lost: lease expired)"},
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

// A PENDING task's reason names the dependencies it waits for when the
// listing shows them all, and counts them when it does not; a dependency
// that ended (a failed one, which a task that runs on upstream failure no
// longer waits for) is not among them.
func TestPendingReason(t *testing.T) {
	task := func(id string, state client.TaskState, deps uint32, dependents ...string) *client.Task {
		return &client.Task{Id: "g/" + id, GraphId: "g", State: state, DepsRemaining: deps, Dependents: dependents}
	}
	listed := []*client.Task{
		task("a", client.TaskRunning, 0, "c", "d"), task("b", client.TaskSucceeded, 0, "c"), task("x", client.TaskQueued, 0, "d"),
		task("f", client.TaskFailed, 0, "c"),
		task("c", client.TaskPending, 1), task("d", client.TaskPending, 2, "e"), task("e", client.TaskPending, 1),
		task("p", client.TaskPending, 5), task("z", client.TaskPending, 0),
	}
	waits := unfinishedDependencies(listed)
	for _, c := range []struct {
		task *client.Task
		want string
	}{
		{listed[4], "waiting for its dependency: g/a"},
		{listed[5], "waiting for 2 dependencies: g/a, g/x"},
		{listed[6], "waiting for its dependency: g/d"},
		{listed[7], "waiting for 5 dependencies"}, // not listed
		{listed[8], ""},
	} {
		if got := pendingReason(c.task, waits[c.task.Id]); got != c.want {
			t.Errorf("%s: pendingReason = %q, want %q", c.task.Id, got, c.want)
		}
	}
	many := []string{"g/1", "g/2", "g/3", "g/4", "g/5"}
	if got, want := pendingReason(task("m", client.TaskPending, 5), many), "waiting for 5 dependencies: g/1, g/2, g/3 and 2 more"; got != want {
		t.Errorf("five listed: pendingReason = %q, want %q", got, want)
	}
}

// A failed graph's message names the listing that shows its failures:
// --state takes one state, and "--state failed" lists no timed-out task.
func TestGraphExitNamesTheListing(t *testing.T) {
	for _, c := range []struct {
		failed, timedOut uint32
		want             string
	}{
		{2, 0, "graph g failed: 2 failed, 0 timed out (megaflow tasks g --state failed)"},
		{0, 6, "graph g failed: 0 failed, 6 timed out (megaflow tasks g --state timed_out)"},
		{1, 2, "graph g failed: 1 failed, 2 timed out (megaflow tasks g --state failed; --state timed_out for the others)"},
	} {
		g := &client.Graph{Id: "g", State: client.GraphFailed, Counts: &wire.StateCounts{Failed: c.failed, TimedOut: c.timedOut}}
		if e := graphExit(g); e == nil || e.msg != c.want || e.code != exitGraphFailed {
			t.Errorf("graphExit(%d failed, %d timed out) = %+v, want %q", c.failed, c.timedOut, e, c.want)
		}
	}
}

// A sandbox's graph (its id a sandbox id, one task) is told from others,
// which megaflow graphs lists; a graph merely named like one is not
// hidden when it has more tasks.
func TestSandboxGraph(t *testing.T) {
	for _, c := range []struct {
		id    string
		tasks uint32
		want  bool
	}{
		{"sbx-47ke8fyf95fdeppj", 1, true},
		{"sbx-47ke8fyf95fdeppj", 3, false},
		{"rollouts-1", 1, false},
		{"sbx-Not-An-Id", 1, false},
	} {
		if got := sandboxGraph(&client.Graph{Id: c.id, TaskCount: c.tasks}); got != c.want {
			t.Errorf("sandboxGraph(%s, %d tasks) = %v, want %v", c.id, c.tasks, got, c.want)
		}
	}
}
