package head_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/within"
	"github.com/megaflow/megaflow/runtime/fake"
)

// Two tenants submit at once; team-a has a quota of 3 running tasks. At
// no committed index does team-a run more than 3 (checked over the whole
// event history), its held tasks say why, team-b is not held, and every
// task ends SUCCEEDED.
func TestTenantQuotaIsHardAcrossRounds(t *testing.T) {
	t.Parallel() // it waits for tasks of 300 ms (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	for range 2 {
		rt := fake.New(nil)
		rt.Default(fake.Behavior{Duration: 300 * time.Millisecond})
		c.AddWorker(testcluster.WorkerOptions{Runtime: rt})
	}
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cl.SetQuota(ctx, &client.Quota{Tenant: "team-a", MaxRunning: 3}); err != nil {
		t.Fatal(err)
	}
	ga, gb := flatGraph("ga", 12), flatGraph("gb", 12)
	ga.Tenant, gb.Tenant = "team-a", "team-b"
	errc := make(chan error, 2)
	for _, g := range []*client.GraphSpec{ga, gb} {
		go func() { _, err := cl.Submit(ctx, g); errc <- err }()
	}
	for range 2 {
		if err := within.Recv(t, 2*time.Minute, errc, "a graph's submission"); err != nil {
			t.Fatal(err)
		}
	}
	testcluster.WaitFor(t, 30*time.Second, "a team-a task held by its quota", func() bool {
		for _, task := range allTasks(ctx, t, cl, "ga") {
			if task.State == client.TaskQueued && task.Reason == "tenant team-a is at its quota of 3 running tasks" {
				return true
			}
		}
		return false
	})
	qs, err := cl.GetQuotas(ctx, client.ReadOptions{RequireLeader: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(qs.Quotas) != 1 || qs.Quotas[0].Quota.GetMaxRunning() != 3 || qs.Quotas[0].Running > 3 {
		t.Fatalf("quotas %v", qs.Quotas)
	}
	for _, id := range []string{"ga", "gb"} {
		if g := waitGraph(ctx, t, cl, id); g.State != client.GraphSucceeded {
			t.Fatalf("graph %s: %v", id, g)
		}
	}
	// Replay the whole history: tasks of ga active at each index.
	active := map[string]bool{}
	maxActive, index := 0, uint64(0)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	done := 0
	for ev, err := range cl.Watch(wctx, client.WatchOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Index != index {
			maxActive = max(maxActive, len(active))
			index = ev.Index
		}
		if ev.TaskId == "" {
			if ev.GraphState == client.GraphSucceeded {
				if done++; done == 2 {
					break
				}
			}
			continue
		}
		if !strings.HasPrefix(ev.TaskId, "ga/") {
			continue
		}
		switch ev.TaskState {
		case client.TaskAssigned, client.TaskRunning:
			active[ev.TaskId] = true
		default:
			delete(active, ev.TaskId)
		}
	}
	maxActive = max(maxActive, len(active))
	if maxActive != 3 {
		t.Fatalf("team-a had at most %d tasks active at once; want exactly its quota of 3", maxActive)
	}
}

// The cluster limit caps running tasks across tenants, and quotas are
// listed with usage.
func TestClusterLimit(t *testing.T) {
	t.Parallel() // it waits for its cluster (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: time.Hour})
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.SetClusterLimit(ctx, &client.Quota{MaxRunning: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.SetClusterLimit(ctx, &client.Quota{Tenant: "x", MaxRunning: 2}); err == nil {
		t.Fatal("a cluster limit naming a tenant was accepted")
	}
	if _, err := cl.SetQuota(ctx, &client.Quota{MaxRunning: 2}); err == nil {
		t.Fatal("a quota naming no tenant was accepted")
	}
	if _, err := cl.Submit(ctx, flatGraph("g", 5)); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 30*time.Second, "2 tasks running, 3 held by the cluster limit", func() bool {
		running, held := 0, 0
		for _, task := range allTasks(ctx, t, cl, "g") {
			switch {
			case task.State == client.TaskRunning:
				running++
			case task.State == client.TaskQueued && task.Reason == "the cluster is at its limit of 2 running tasks":
				held++
			}
		}
		return running == 2 && held == 3
	})
	qs, err := cl.GetQuotas(ctx, client.ReadOptions{RequireLeader: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%d/%d %v", qs.Cluster.Running, qs.Cluster.Quota.GetMaxRunning(), len(qs.Unlimited)); got != "2/2 1" {
		t.Fatalf("cluster usage %s", got)
	}
}
