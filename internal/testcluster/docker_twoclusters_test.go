package testcluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/worker"
)

// Two clusters on one Docker Engine with the same cluster name and the same
// worker id (two `megaflow up` on one host did this): the second starts
// while the first runs tasks, runs tasks of its own, and reconciles; the
// first's tasks still succeed on their first attempt, and every container
// carries its own cluster's id. Before cluster ids the second worker
// adopted the first's containers at its start, its head stopped them, and
// its reconciliation removed the rest (issue 18, finding 6).
func TestDockerTwoClustersOnOneEngineKeepApart(t *testing.T) {
	t.Parallel() // it waits for tasks of 8 s (see internal/testcluster)
	a, cli, image, cluster := dockerCluster(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ga := &client.GraphSpec{Id: "first"}
	for i := range 4 {
		ga.Tasks = append(ga.Tasks, shTask(fmt.Sprintf("t%d", i), image, `sleep 8; echo MEGAFLOW_RESULT '{"c": "a"}'`))
	}
	ca := a.Client()
	if _, err := ca.Submit(ctx, ga); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, time.Minute, "the first cluster's 4 tasks running", func() bool {
		g, _, err := ca.GetGraph(ctx, "first", client.ReadOptions{RequireLeader: true})
		return err == nil && g.Counts.GetRunning() == 4
	})

	b, _, _, cluster2 := dockerCluster(t, 1, nil) // same cluster name, same worker id "w1"
	if cluster2 != cluster || a.Workers()[0].ID != b.Workers()[0].ID {
		t.Fatalf("clusters %q %q, workers %q %q: the test wants them equal", cluster, cluster2, a.Workers()[0].ID, b.Workers()[0].ID)
	}
	cb := b.Client()
	gb := &client.GraphSpec{Id: "second"}
	for i := range 4 {
		gb.Tasks = append(gb.Tasks, shTask(fmt.Sprintf("t%d", i), image, `sleep 2; echo MEGAFLOW_RESULT '{"c": "b"}'`))
	}
	if _, err := cb.Submit(ctx, gb); err != nil {
		t.Fatal(err)
	}
	idA, idB := clusterID(ctx, t, ca), clusterID(ctx, t, cb)
	if idA == "" || idB == "" || idA == idB {
		t.Fatalf("cluster ids %q and %q: want two different ones", idA, idB)
	}
	for _, c := range []struct {
		cl    *client.Client
		graph string
	}{{cb, "second"}, {ca, "first"}} {
		res, err := c.cl.Wait(ctx, c.graph)
		if err != nil || res.State != client.GraphSucceeded {
			t.Fatalf("graph %s: %v, %v", c.graph, res, err)
		}
		for _, task := range testcluster.Tasks(ctx, t, c.cl, c.graph) {
			if len(task.Attempts) != 1 {
				t.Errorf("task %s: %d attempts (%v): the other cluster touched its container", task.Id, len(task.Attempts), task.Attempts)
			}
		}
	}

	// Every container of each cluster carried its id; none is left.
	res, err := cli.ContainerList(ctx, dockerclient.ContainerListOptions{All: true,
		Filters: make(dockerclient.Filters).Add("label", worker.LabelCluster+"="+cluster)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Items {
		if id := c.Labels[worker.LabelClusterID]; id != idA && id != idB {
			t.Errorf("container %s has cluster id %q, want %s or %s", c.ID, id, idA, idB)
		}
	}
	testcluster.WaitFor(t, 30*time.Second, "every container removed", func() bool {
		return len(containers(t, cli, cluster)) == 0
	})
}

func clusterID(ctx context.Context, t *testing.T, c *client.Client) string {
	t.Helper()
	var id string
	testcluster.WaitFor(t, 30*time.Second, "the cluster id", func() bool {
		st, err := c.ClusterStatus(ctx)
		id = st.GetClusterId()
		return err == nil && id != ""
	})
	return id
}
