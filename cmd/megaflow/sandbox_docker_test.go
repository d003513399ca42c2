package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/docker"
	"github.com/megaflow/megaflow/runtime/testimage"
	"github.com/megaflow/megaflow/worker"
)

// megaflow sandbox create, exec (output, the command's exit code as
// megaflow's, 124 at --exec-timeout, -o json), ls and rm against a
// cluster with a Docker worker.
func TestCLISandboxDocker(t *testing.T) {
	_, image := testimage.Require(t)
	c := testcluster.New(t, testcluster.Options{})
	rt, err := docker.New(docker.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	clusterName := "mft-" + testimage.RunID() + "-clisandbox"
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Capacity: worker.Capacity{CPUMillis: 4000, MemoryBytes: 8 << 30},
		Configure: func(cfg *worker.Config) { cfg.ClusterName = clusterName }})
	heads := "--heads=" + strings.Join(c.GRPCAddrs(), ",")

	code, out, errOut := cli(t, heads, "sandbox", "create", "--image", image, "--idle-timeout", "5m")
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "sbx-") {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	t.Cleanup(func() { cli(t, heads, "sandbox", "rm", id) })
	code, out, errOut = cli(t, heads, "sandbox", "exec", id, "--", "sh", "-c", "echo hi; echo oops >&2; exit 5")
	if code != 5 || out != "hi\n" || errOut != "oops\n" {
		t.Fatalf("exec exiting 5: %d %q %q; want 5, the command's output only", code, out, errOut)
	}
	code, out, _ = cli(t, heads, "-o", "json", "sandbox", "exec", id, "--", "sh", "-c", "echo json")
	var res map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res["stdout"] != "json\n" || res["exit_code"] != float64(0) {
		t.Fatalf("exec -o json: %d %q", code, out)
	}
	code, _, errOut = cli(t, heads, "sandbox", "exec", id, "--exec-timeout", "1s", "--", "sleep", "60")
	if code != 124 || !strings.Contains(errOut, "timed out") {
		t.Fatalf("exec past --exec-timeout: %d %q; want 124", code, errOut)
	}
	code, out, _ = cli(t, heads, "sandbox", "ls")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "READY") {
		t.Fatalf("ls: %d %q", code, out)
	}
	code, out, _ = cli(t, heads, "sandbox", "rm", id)
	if code != 0 || out != id+" CLOSED\n" {
		t.Fatalf("rm: %d %q", code, out)
	}
	// rm's container is stopped and removed: nothing is left on the engine.
	testcluster.WaitFor(t, 30*time.Second, "the closed sandbox's container to be removed", func() bool {
		left, err := rt.List(context.Background(), map[string]string{worker.LabelCluster: clusterName, worker.LabelTask: spec.SandboxTaskID(id)})
		return err == nil && len(left) == 0
	})
	code, _, errOut = cli(t, heads, "sandbox", "exec", id, "--", "true")
	if code != 1 || !strings.Contains(errOut, "CLOSED") {
		t.Fatalf("exec after rm: %d %q; want 1 saying CLOSED", code, errOut)
	}
	code, out, _ = cli(t, heads, "sandbox", "ls", "--all", "-o", "json")
	if code != 0 || !strings.Contains(out, `"SANDBOX_STATE_CLOSED"`) {
		t.Fatalf("ls --all -o json: %d %q", code, out)
	}
	code, _, errOut = cli(t, heads, "sandbox", "create")
	if code != 2 || !strings.Contains(errOut, "image") {
		t.Fatalf("create without --image: %d %q; want 2", code, errOut)
	}
}
