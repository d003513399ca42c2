package testcluster_test

import (
	"context"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/lease"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/worker"
)

// Finding 5 of issue 18, its last part: a Docker worker killed (as kill -9:
// no goodbye, containers untouched) that does not come back. Its
// containers' megaflow-init sees the lease file run out and stops them
// within the lease plus margin (3 s + 1 s here), instead of letting them
// run their whole course (300 s); the leader re-queues their tasks.
func TestDockerKilledWorkersContainersStopWithItsLease(t *testing.T) {
	c, cli, image, cluster := dockerClusterWithStore(t, 1, nil, func(cfg *head.Config) {
		cfg.Lease = lease.Config{Duration: 3 * time.Second, Margin: time.Second}
	}, nil) // its containers run under megaflow-init
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g := &client.GraphSpec{Id: "g"}
	for _, n := range []string{"a", "b", "c"} {
		g.Tasks = append(g.Tasks, shTask(n, image, "sleep 300"))
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 60*time.Second, "3 tasks running", func() bool {
		n := 0
		for _, task := range testcluster.Tasks(ctx, t, cl, "g") {
			if task.State == client.TaskRunning {
				n++
			}
		}
		return n == 3
	})
	if n := len(running(t, cli, cluster)); n != 3 {
		t.Fatalf("%d containers running, want 3", n)
	}
	c.KillWorker(0)
	killed := time.Now()
	testcluster.WaitFor(t, 30*time.Second, "the killed worker's containers stopped", func() bool {
		return len(running(t, cli, cluster)) == 0
	})
	// The lease was renewed at most a heartbeat (500 ms) before the kill.
	took, bound := time.Since(killed), 3*time.Second+time.Second+2*time.Second
	t.Logf("the killed worker's containers stopped %v after the kill", took.Round(time.Millisecond))
	if took > bound {
		t.Fatalf("the containers stopped %v after the kill; the lease and margin bound it to %v (plus slack)", took, bound)
	}
	if _, err := cl.CancelGraph(ctx, "g", "test over"); err != nil {
		t.Fatal(err)
	}
	// Nobody is left to remove the exited containers: the test does.
	for _, id := range containers(t, cli, cluster) {
		if _, err := cli.ContainerRemove(ctx, id, dockerclient.ContainerRemoveOptions{Force: true}); err != nil {
			t.Error(err)
		}
	}
}

// running lists the running containers of a cluster.
func running(t *testing.T, cli *dockerclient.Client, cluster string) []string {
	t.Helper()
	res, err := cli.ContainerList(context.Background(), dockerclient.ContainerListOptions{
		Filters: make(dockerclient.Filters).Add("label", worker.LabelCluster+"="+cluster)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range res.Items {
		ids = append(ids, c.ID)
	}
	return ids
}
