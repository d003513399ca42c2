package head_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/fake"
)

// A failing task is retried after an exponential backoff chosen by the
// leader: each retry is placed no sooner than its not_before, and the
// waits double.
func TestRetriesBackOff(t *testing.T) {
	base := 300 * time.Millisecond
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) {
		cfg.RetryBackoff, cfg.RetryBackoffMax = base, 10*time.Second
	}})
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: time.Millisecond, ExitCode: 3})
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := flatGraph("g", 1)
	g.Tasks[0].MaxRetries = 2
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	if gr := waitGraph(ctx, t, cl, "g"); gr.State != client.GraphFailed {
		t.Fatalf("graph %v", gr)
	}
	task, _, err := cl.GetTask(ctx, "g/t000", client.ReadOptions{RequireLeader: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(task.Attempts) != 3 || task.RetriesUsed != 2 {
		t.Fatalf("%d attempts, %d retries used; want 3 and 2", len(task.Attempts), task.RetriesUsed)
	}
	for i := 1; i < 3; i++ {
		gap := time.Duration(task.Attempts[i].AssignUnixNanos - task.Attempts[i-1].FinishUnixNanos)
		nominal := base << (i - 1)
		if gap < nominal*8/10 {
			t.Fatalf("retry %d placed %v after the failure; want at least %v (80%% of %v)", i, gap, nominal*8/10, nominal)
		}
	}
}

// A graph past its deadline is cancelled by the leader with the reason.
func TestGraphDeadline(t *testing.T) {
	t.Parallel() // it waits out a 1 s deadline (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: time.Hour})
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := flatGraph("g", 3)
	g.DeadlineSeconds = 1
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	gr := waitGraph(ctx, t, cl, "g")
	if gr.State != client.GraphCancelled || gr.Reason != "graph deadline of 1 s passed" {
		t.Fatalf("graph %s (%q), want CANCELLED by its deadline", gr.State, gr.Reason)
	}
	if took := time.Duration(gr.FinishUnixNanos - gr.CreateUnixNanos); took < time.Second || took > 10*time.Second {
		t.Fatalf("cancelled %v after submission; want just after 1 s", took)
	}
	for _, task := range allTasks(ctx, t, cl, "g") {
		if task.State != client.TaskCancelled || !strings.Contains(task.Reason, "deadline") {
			t.Fatalf("task %s %s (%q)", task.Id, task.State, task.Reason)
		}
	}
}

// A task no worker can run fails after MaxQueueWait with its queueing
// reason; a feasible task of the same graph runs.
func TestUnplaceableTaskFailsAfterMaxQueueWait(t *testing.T) {
	t.Parallel() // it waits out a 1 s MaxQueueWait (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) {
		cfg.MaxQueueWait = time.Second
	}})
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: time.Millisecond})
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := flatGraph("g", 2)
	g.Tasks[1].Resources.MemoryBytes = 1 << 50
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	if gr := waitGraph(ctx, t, cl, "g"); gr.State != client.GraphFailed {
		t.Fatalf("graph %v", gr)
	}
	big, _, err := cl.GetTask(ctx, "g/t001", client.ReadOptions{RequireLeader: true})
	if err != nil {
		t.Fatal(err)
	}
	if big.State != client.TaskFailed || !strings.Contains(big.Reason, "memory") || len(big.Attempts) != 0 {
		t.Fatalf("task %s (%q) with %d attempts; want FAILED with the memory reason, never run", big.State, big.Reason, len(big.Attempts))
	}
	if waited := time.Duration(big.UpdateUnixNanos - big.QueuedUnixNanos); waited < time.Second {
		t.Fatalf("failed after %v queued; want at least MaxQueueWait (1s)", waited)
	}
	small, _, err := cl.GetTask(ctx, "g/t000", client.ReadOptions{RequireLeader: true})
	if err != nil || small.State != client.TaskSucceeded {
		t.Fatalf("feasible task: %v %v", small, err)
	}
	l, err := cl.GetLimits(ctx, client.ReadOptions{})
	if err != nil || l.MaxQueueWaitMillis != 1000 {
		t.Fatalf("limits %v %v", l, err)
	}
}
