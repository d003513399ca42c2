package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
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
// megaflow's, 124 at --exec-timeout, -o json), ls, pause, resume and rm
// against a cluster with a Docker worker.
func TestCLISandboxDocker(t *testing.T) {
	t.Parallel() // it waits for the engine (see internal/testcluster)
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

	// pause and resume: ls shows PAUSED, an exec is refused saying to
	// resume, -o json prints the sandbox.
	if code, out, errOut = cli(t, heads, "sandbox", "pause", id); code != 0 || out != id+" PAUSED\n" {
		t.Fatalf("pause: %d %q %q", code, out, errOut)
	}
	if code, out, _ = cli(t, heads, "sandbox", "ls"); code != 0 || !strings.Contains(out, "PAUSED") {
		t.Fatalf("ls of a paused sandbox: %d %q", code, out)
	}
	if code, _, errOut = cli(t, heads, "sandbox", "exec", id, "--", "true"); code != 1 || !strings.Contains(errOut, "megaflow sandbox resume "+id) {
		t.Fatalf("exec in a paused sandbox: %d %q; want 1, saying to resume it", code, errOut)
	}
	code, out, errOut = cli(t, heads, "-o", "json", "sandbox", "resume", id)
	var resumed map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &resumed) != nil || resumed["id"] != id || resumed["state"] != "SANDBOX_STATE_READY" {
		t.Fatalf("resume -o json: %d %q %q", code, out, errOut)
	}

	// cp: a directory in, a file in, the directory back out.
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"a.txt": "alpha\n", "sub/b.txt": "beta\n"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	code, _, errOut = cli(t, heads, "sandbox", "cp", src, id+":/work/repo")
	if code != 0 || !strings.Contains(errOut, "upload") {
		t.Fatalf("cp DIR ID:/work/repo: %d %q", code, errOut)
	}
	code, out, _ = cli(t, heads, "-o", "json", "sandbox", "cp", filepath.Join(src, "a.txt"), id+":/work/single")
	var cpRes map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &cpRes) != nil || cpRes["direction"] != "upload" || cpRes["bytes"].(float64) <= 0 {
		t.Fatalf("cp -o json FILE ID:/work/single: %d %q", code, out)
	}
	code, out, _ = cli(t, heads, "sandbox", "exec", id, "--", "sh", "-c", "cat /work/repo/a.txt /work/repo/sub/b.txt /work/single/a.txt")
	if code != 0 || out != "alpha\nbeta\nalpha\n" {
		t.Fatalf("the copied files in the sandbox: %d %q", code, out)
	}
	dst := filepath.Join(t.TempDir(), "out")
	code, _, errOut = cli(t, heads, "sandbox", "cp", id+":/work/repo", dst)
	if code != 0 {
		t.Fatalf("cp ID:/work/repo DIR: %d %q", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "sub", "b.txt")); err != nil || string(b) != "beta\n" {
		t.Fatalf("downloaded sub/b.txt: %q, %v", b, err)
	}
	if code, _, errOut = cli(t, heads, "sandbox", "cp", src, dst); code != 2 || !strings.Contains(errOut, "exactly one") {
		t.Fatalf("cp between two local paths: %d %q; want 2", code, errOut)
	}
	if code, _, errOut = cli(t, heads, "sandbox", "cp", src, id+":relative"); code != 2 || !strings.Contains(errOut, "absolute") {
		t.Fatalf("cp to a relative sandbox path: %d %q; want 2", code, errOut)
	}
	code, out, _ = cli(t, heads, "-o", "json", "sandbox", "ls", "--limit", "1")
	var ls map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &ls) != nil || len(ls["sandboxes"].([]any)) != 1 || ls["next_page_token"] != "" {
		t.Fatalf("ls --limit 1 -o json with one sandbox: %d %q; want it and no next page", code, out)
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
