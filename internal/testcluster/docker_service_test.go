package testcluster_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/worker"
)

// A Docker service task that names no network gets the documented default,
// bridge: its container is on the bridge network with its port published,
// it passes its TCP probe, its endpoint is published and answers from the
// host. Before the fix the spec's "" was normalized to "none" at submit,
// so the container had no network and never became ready.
func TestDockerServiceWithoutNetworkBecomesReady(t *testing.T) {
	t.Parallel() // it waits for the engine (see internal/testcluster)
	c, cli, image, cluster := dockerCluster(t, 1, func(cfg *worker.Config) {
		cfg.ServicePortMin, cfg.ServicePortMax = 42300, 42399
		cfg.ServiceProbeInterval = 50 * time.Millisecond
		cfg.ServiceReadyTimeout = time.Minute
	})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	srv := shTask("web", image, `mkdir -p /www && echo hello-from-web > /www/index.html && exec httpd -f -h /www -p "$MEGAFLOW_SERVICE_PORT"`)
	srv.Kind = client.KindService
	srv.Service = &client.ServiceSpec{Name: "web", TcpProbe: true}
	if _, err := cl.Submit(ctx, &client.GraphSpec{Id: "svcnet", Tasks: []*client.TaskSpec{srv}}); err != nil {
		t.Fatal(err)
	}
	var ep string
	testcluster.WaitFor(t, time.Minute, "the service's endpoint", func() bool {
		svcs, err := cl.ListServices(ctx, "web", client.ReadOptions{RequireLeader: true})
		if err != nil {
			t.Fatalf("list services: %v", err)
		}
		if len(svcs) == 1 && len(svcs[0].Endpoints) == 1 {
			ep = svcs[0].Endpoints[0].Url
			return true
		}
		return false
	})
	// The engine's userland proxy accepts on the published port as soon as
	// the container runs, before httpd listens, so the TCP probe can pass
	// a moment early: the GET is retried for a while.
	var body []byte
	var status string
	testcluster.WaitFor(t, 30*time.Second, "GET "+ep+" answered by httpd", func() bool {
		resp, err := http.Get(ep + "/")
		if err != nil {
			status = err.Error()
			return false
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		status = resp.Status
		return resp.StatusCode == http.StatusOK
	})
	if !strings.Contains(string(body), "hello-from-web") {
		t.Fatalf("GET %s: %s %q", ep, status, body)
	}

	task, _, err := cl.GetTask(ctx, "svcnet/web", client.ReadOptions{RequireLeader: true})
	if err != nil {
		t.Fatal(err)
	}
	if task.Spec.GetNetwork() != "bridge" {
		t.Errorf("stored spec network %q, want the default bridge", task.Spec.GetNetwork())
	}
	ids := containers(t, cli, cluster)
	if len(ids) != 1 {
		t.Fatalf("%d containers of the cluster, want the service's one", len(ids))
	}
	info, err := cli.ContainerInspect(ctx, ids[0], dockerclient.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nm := string(info.Container.HostConfig.NetworkMode); nm != "bridge" && nm != "default" {
		t.Errorf("container network mode %q, want bridge", nm)
	}

	if _, err := cl.CancelGraph(ctx, "svcnet", "test done"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Wait(ctx, "svcnet"); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 30*time.Second, "the service's container removed", func() bool {
		return len(containers(t, cli, cluster)) == 0
	})
}
