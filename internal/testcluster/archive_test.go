package testcluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/fake"
)

// A finished graph leaves the live table after the heads' graph retention
// (1 s here): GetGraph still answers with its counts (archived), ListTasks
// says it was archived, ListGraphs shows it only when asked, resubmitting
// its id answers that it existed and runs nothing; a head killed and
// restarted rebuilds the same table, and every head's table replays from
// its Raft stores at Stop.
func TestFinishedGraphIsArchived(t *testing.T) {
	t.Parallel() // it waits out a 1 s retention (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) {
		cfg.GraphRetention, cfg.ArchiveSweepInterval = time.Second, 20*time.Millisecond
	}})
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: 10 * time.Millisecond, Output: "MEGAFLOW_RESULT {\"reward\": 1}\n"})
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := func() *client.GraphSpec {
		return &client.GraphSpec{Id: "g", Tasks: []*client.TaskSpec{
			{Name: "a", Image: "busybox", Command: []string{"/bin/work"}, Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}},
			{Name: "b", Image: "busybox", Command: []string{"/bin/work"}, Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20},
				DependsOn: []string{"a"}},
		}}
	}
	if _, err := cl.Submit(ctx, spec()); err != nil {
		t.Fatal(err)
	}
	leader := client.ReadOptions{RequireLeader: true}
	testcluster.WaitFor(t, 30*time.Second, "g archived", func() bool {
		g, _, err := cl.GetGraph(ctx, "g", leader)
		return err == nil && g.GetArchivedUnixNanos() != 0
	})
	g, _, err := cl.GetGraph(ctx, "g", leader)
	if err != nil || g.State != client.GraphSucceeded || g.GetCounts().GetSucceeded() != 2 || g.GetMetrics().GetCount() != 2 {
		t.Fatalf("archived g: %v, %v; want its summary, SUCCEEDED with 2 succeeded and 2 rewards", g, err)
	}
	_, _, err = cl.ListTasks(ctx, client.TaskFilter{GraphID: "g", Read: leader})
	if errs.ClassOf(err) != errs.NotFound || !strings.Contains(err.Error(), "archived") {
		t.Fatalf("ListTasks of an archived graph: %v; want NotFound saying it was archived", err)
	}
	if _, _, err := cl.GetTask(ctx, "g/a", leader); errs.ClassOf(err) != errs.NotFound || !strings.Contains(err.Error(), "archived") {
		t.Fatalf("GetTask of an archived graph's task: %v; want NotFound saying it was archived", err)
	}
	live, _, err := cl.ListGraphs(ctx, client.GraphFilter{Read: leader})
	if err != nil || len(live) != 0 {
		t.Fatalf("ListGraphs: %v, %v; want no live graph", live, err)
	}
	all, _, err := cl.ListGraphs(ctx, client.GraphFilter{Read: leader, IncludeArchived: true})
	if err != nil || len(all) != 1 || all[0].Id != "g" || all[0].GetArchivedUnixNanos() == 0 {
		t.Fatalf("ListGraphs with the archive: %v, %v; want g, archived", all, err)
	}

	// At least one start per task; more only if an attempt was lost (an
	// election on a starved machine lapsing the worker's lease: seen once
	// under a loaded CI run). What this test checks is that the archived
	// graph does not run again, below.
	starts := rt.CallCount("Start")
	if starts < 2 {
		t.Fatalf("%d container starts for g's 2 tasks; want 2", starts)
	}
	res, err := cl.Submit(ctx, spec())
	if err != nil || !res.Existed {
		t.Fatalf("resubmitting the archived g: %+v, %v; want existed", res, err)
	}
	if g2, _, err := cl.GetGraph(ctx, "g", leader); err != nil || g2.GetArchivedUnixNanos() != g.GetArchivedUnixNanos() {
		t.Fatalf("after the resubmission: %v, %v; want g still archived as before", g2, err)
	}
	if n := rt.CallCount("Start"); n != starts {
		t.Fatalf("%d container starts after the resubmission, %d before: the archived graph ran again", n, starts)
	}

	// A sandbox is a graph too (this one closed while it waits for a
	// docker worker): once archived, GetSandbox says it ended and was
	// archived, not that it never existed.
	sb, err := cl.CreateSandbox(ctx, client.SandboxSpec{ID: "sbx-gone", Image: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 30*time.Second, "sbx-gone archived", func() bool {
		g, _, err := cl.GetGraph(ctx, "sbx-gone", leader)
		return err == nil && g.GetArchivedUnixNanos() != 0
	})
	if _, err := cl.GetSandbox(ctx, "sbx-gone"); errs.ClassOf(err) != errs.NotFound || !strings.Contains(err.Error(), "was archived") {
		t.Fatalf("GetSandbox of an archived sandbox: %v; want NotFound saying it ended and was archived", err)
	}

	// A follower killed and restarted rebuilds the same table.
	follower := (c.WaitLeader(10*time.Second) + 1) % 3
	c.Kill(follower)
	c.Restart(follower)
	testcluster.WaitFor(t, 30*time.Second, "the restarted head knows g is archived", func() bool {
		h := c.Members[follower].Head()
		return h != nil && h.FSM().View().Archived("g") != nil && h.FSM().View().Graph("g") == nil
	})
}
