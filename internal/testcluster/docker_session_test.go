package testcluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/lease"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/worker"
)

// 20 independent tasks of one persistent session on the real engine, each
// `(sleep 1 &) ; true` (at least 1 s: the exec holds the background
// sleep's output) with a 10 s timeout: they take the session's container
// one after another (at least 20 s in all, so the later ones would time
// out if waiting counted), and none times out, because the wait for the
// container does not count against a task's own timeout (issue 18,
// finding 12). 10 s, not 5: one exec on a loaded CI host took over 5 s.
func TestDockerSessionTasksWaitWithoutTimingOut(t *testing.T) {
	t.Parallel() // it waits for 20 execs one after another (see internal/testcluster)
	// The session's container goes PoolIdle after its last task (all
	// were assigned at once, so none was marked the session's last).
	// A lease well above a loaded machine's heartbeat delays: this test is
	// about the session's order and timeouts, not the lease (3 s lapsed
	// once under load in CI and re-ran three tasks).
	c, cli, image, cluster := dockerClusterWithStore(t, 1, nil, func(cfg *head.Config) {
		cfg.Lease = lease.Config{Duration: 10 * time.Second, Margin: 2 * time.Second}
	}, func(cfg *worker.Config) { cfg.PoolIdle = time.Second })
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g := &client.GraphSpec{Id: "session"}
	for i := range 20 {
		task := shTask(fmt.Sprintf("t%02d", i), image, "(sleep 1 &) ; true")
		task.Mode = client.ModePersistent
		task.Session = "s1"
		task.TimeoutSeconds = 10
		g.Tasks = append(g.Tasks, task)
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	res, err := cl.Wait(ctx, "session")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range testcluster.Tasks(ctx, t, cl, "session") {
		if task.State != client.TaskSucceeded || len(task.Attempts) != 1 {
			t.Errorf("task %s: %v after %d attempts: %s", task.Id, task.State, len(task.Attempts), task.Reason)
		}
	}
	if res.State != client.GraphSucceeded {
		t.Fatalf("graph %v", res)
	}
	t.Logf("20 session tasks took %v", time.Duration(res.FinishUnixNanos-res.CreateUnixNanos).Round(time.Millisecond))
	testcluster.WaitFor(t, 60*time.Second, "every container removed", func() bool {
		return len(containers(t, cli, cluster)) == 0
	})
}
