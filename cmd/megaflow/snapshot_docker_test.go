package main

import (
	"context"
	"strings"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/docker"
	"github.com/megaflow/megaflow/runtime/testimage"
	"github.com/megaflow/megaflow/worker"
)

// megaflow sandbox snapshot, snapshots, create --from-snapshot,
// set-timeout and snapshot rm against a cluster with a Docker worker: the
// fork has the source's file, the list shows the snapshot, rm removes it
// and its image.
func TestCLISandboxSnapshotDocker(t *testing.T) {
	t.Parallel() // it waits for the engine (see internal/testcluster)
	cli0, image := testimage.Require(t)
	c := testcluster.New(t, testcluster.Options{})
	rt, err := docker.New(docker.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	clusterName := "mft-" + testimage.RunID() + "-clisnapshot"
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Capacity: worker.Capacity{CPUMillis: 4000, MemoryBytes: 8 << 30},
		Configure: func(cfg *worker.Config) { cfg.ClusterName = clusterName }})
	heads := "--heads=" + strings.Join(c.GRPCAddrs(), ",")

	code, out, errOut := cli(t, heads, "sandbox", "create", "--image", image)
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "sbx-") {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	t.Cleanup(func() {
		cli(t, heads, "sandbox", "rm", id)
		// The worker removes a closed sandbox's container once the leader
		// acknowledges its end; the cluster stopping before that would
		// leave it exited on the engine for a restarted worker to remove.
		testcluster.WaitFor(t, 30*time.Second, "the sandbox's container to be removed", func() bool {
			left, err := rt.List(context.Background(), map[string]string{worker.LabelCluster: clusterName, worker.LabelTask: spec.SandboxTaskID(id)})
			return err == nil && len(left) == 0
		})
	})
	// Each CLI run is a new client, which carries no table index from the
	// last: the head it reaches may not have applied READY yet.
	testcluster.WaitFor(t, 30*time.Second, "the first exec to run", func() bool {
		code, _, errOut = cli(t, heads, "sandbox", "exec", id, "--", "sh", "-c", "echo base > /tmp/state")
		if code != 0 && !strings.Contains(errOut, "not ready yet") {
			t.Fatalf("exec: %d %q", code, errOut)
		}
		return code == 0
	})
	code, out, errOut = cli(t, heads, "sandbox", "snapshot", id, "--name", "base")
	snap := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(snap, spec.SnapshotIDPrefix) {
		t.Fatalf("snapshot: %d %q %q", code, out, errOut)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = cli0.ImageRemove(ctx, spec.SnapshotImage(snap), dockerclient.ImageRemoveOptions{Force: true})
	})
	// A new CLI run carries no index either: the head it asks may not have
	// applied the snapshot's entry yet.
	testcluster.WaitFor(t, 30*time.Second, "the snapshot listed", func() bool {
		code, out, _ = cli(t, heads, "sandbox", "snapshots")
		if code != 0 {
			t.Fatalf("snapshots: %d %q", code, out)
		}
		return strings.Contains(out, snap)
	})
	if !strings.Contains(out, "base") || !strings.Contains(out, id) {
		t.Fatalf("snapshots: %q; want the snapshot, its name and sandbox", out)
	}
	code, out, errOut = cli(t, heads, "sandbox", "create", "--from-snapshot", snap)
	fork := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(fork, "sbx-") {
		t.Fatalf("create --from-snapshot: %d %q %q", code, out, errOut)
	}
	testcluster.WaitFor(t, 30*time.Second, "the fork's first exec to run", func() bool {
		code, out, errOut = cli(t, heads, "sandbox", "exec", fork, "--", "cat", "/tmp/state")
		if code != 0 && !strings.Contains(errOut, "not ready yet") || code == 0 && out != "base\n" {
			t.Fatalf("the fork's file: %d %q %q; want \"base\\n\"", code, out, errOut)
		}
		return code == 0
	})
	if code, out, errOut = cli(t, heads, "sandbox", "set-timeout", fork, "2h"); code != 0 || !strings.Contains(out, fork+" ends at") {
		t.Fatalf("set-timeout: %d %q %q", code, out, errOut)
	}
	if code, _, errOut = cli(t, heads, "sandbox", "set-timeout", fork, "200h"); code == 0 || !strings.Contains(errOut, "out of range") {
		t.Fatalf("set-timeout 200h: %d %q; want a refusal", code, errOut)
	}
	if code, _, errOut = cli(t, heads, "sandbox", "snapshot", "rm", snap); code == 0 || !strings.Contains(errOut, "in use") {
		t.Fatalf("snapshot rm while the fork runs: %d %q; want a refusal saying it is in use", code, errOut)
	}
	if code, _, errOut = cli(t, heads, "sandbox", "rm", fork); code != 0 {
		t.Fatalf("rm fork: %d %q", code, errOut)
	}
	testcluster.WaitFor(t, 30*time.Second, "the fork's container to be removed", func() bool {
		left, err := rt.List(context.Background(), map[string]string{worker.LabelCluster: clusterName, worker.LabelTask: spec.SandboxTaskID(fork)})
		return err == nil && len(left) == 0
	})
	if code, out, errOut = cli(t, heads, "sandbox", "snapshot", "rm", snap); code != 0 || out != snap+" deleted\n" {
		t.Fatalf("snapshot rm: %d %q %q", code, out, errOut)
	}
	testcluster.WaitFor(t, 30*time.Second, "no snapshot listed after rm", func() bool { // a new CLI run: maybe a head behind
		code, out, _ = cli(t, heads, "sandbox", "snapshots")
		if code != 0 {
			t.Fatalf("snapshots after rm: %d %q", code, out)
		}
		return out == "no snapshots\n"
	})
	if _, err := cli0.ImageInspect(context.Background(), spec.SnapshotImage(snap)); err == nil {
		t.Fatalf("image %s still on the engine after snapshot rm", spec.SnapshotImage(snap))
	}
}
