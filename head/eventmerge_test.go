package head_test

import (
	"context"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// A worker's event batches that reach the leader while it commits earlier
// ones are committed together: a worker that sends each event in a batch of
// its own (here 2 per task: started, exited) costs far fewer log entries
// than batches, and every task still ends SUCCEEDED with its events applied
// once, in order.
func TestWorkerBatchesMergeIntoFewerEntries(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{Heads: 3})
	c.AddWorker(testcluster.WorkerOptions{Runtime: fake.New(nil), Configure: func(cfg *worker.Config) {
		cfg.MaxBatchEvents = 1 // one event per batch
		cfg.BatchDelay = 0     // sent at once
		cfg.MaxConcurrentStarts = 1024
	}})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	testcluster.WaitFor(t, 30*time.Second, "the worker registered", func() bool {
		ws, err := cl.ListWorkers(ctx, client.ReadOptions{RequireLeader: true})
		return err == nil && len(ws) == 1
	})

	const n = 200
	leader := c.Running()[c.WaitLeader(30*time.Second)]
	before := leader.AppliedIndex()
	gs := &client.GraphSpec{Id: "merge", Tenant: "t"}
	for i := range n {
		gs.Tasks = append(gs.Tasks, &client.TaskSpec{Name: "t" + string(rune('a'+i/26)) + string(rune('a'+i%26)), Image: "img", Command: []string{"true"},
			Resources: &client.Resources{CpuMillis: 10, MemoryBytes: 1 << 20}})
	}
	if _, err := cl.Submit(ctx, gs); err != nil {
		t.Fatal(err)
	}
	g, err := cl.Wait(ctx, gs.Id)
	if err != nil {
		t.Fatal(err)
	}
	if g.State != client.GraphSucceeded || g.GetCounts().GetSucceeded() != n {
		t.Fatalf("graph ended %v with counts %v; want all %d SUCCEEDED", g.State, g.GetCounts(), n)
	}
	tasks, _, err := cl.ListTasks(ctx, client.TaskFilter{GraphID: gs.Id, PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if len(task.Attempts) != 1 || task.Attempts[0].StartUnixNanos == 0 || task.Attempts[0].FinishUnixNanos < task.Attempts[0].StartUnixNanos {
			t.Fatalf("task %s: attempts %v; want one attempt, started then ended", task.GetId(), task.Attempts)
		}
	}
	// 2n single-event batches; the submit, the plans and the merged events
	// must take fewer entries than the batches alone would.
	entries := leader.AppliedIndex() - before
	t.Logf("%d tasks, %d single-event batches: %d log entries in all", n, 2*n, entries)
	if entries >= 2*n {
		t.Errorf("%d log entries for %d tasks' %d event batches: batches were not merged", entries, n, 2*n)
	}
}
