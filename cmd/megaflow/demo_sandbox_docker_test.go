package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mclient "github.com/moby/moby/client"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/examples/demo"
	"github.com/megaflow/megaflow/runtime/testimage"
	"github.com/megaflow/megaflow/worker"
)

// buildDemoImages builds the demo images as `make demo-images` does:
// static megaflow-agent, megaflow-model and megaflow-sh of this tree, then
// scripts/build-demo-images.sh (FROM scratch, nothing pulled).
func buildDemoImages(t *testing.T) {
	t.Helper()
	bin := t.TempDir()
	args := []string{"build", "-trimpath", "-o", bin + "/"}
	for _, c := range []string{"megaflow-agent", "megaflow-model", "megaflow-sh"} {
		args = append(args, "github.com/megaflow/megaflow/cmd/"+c)
	}
	build := exec.Command("go", args...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if out, err := exec.Command("../../scripts/build-demo-images.sh", bin).CombinedOutput(); err != nil {
		t.Fatalf("scripts/build-demo-images.sh: %v\n%s", err, out)
	}
}

// workerContainers returns the names of the containers (running or not)
// of the embedded cluster whose data directory is dir: those labelled
// with its worker's id, or named after it (mf-<worker>-...).
func workerContainers(t *testing.T, cli *mclient.Client, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "worker", "node-id"))
	if err != nil {
		t.Fatalf("the demo's worker id: %v", err)
	}
	id := strings.TrimSpace(string(b))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cli.ContainerList(ctx, mclient.ContainerListOptions{All: true})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	var out []string
	for _, c := range res.Items {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		if c.Labels[worker.LabelWorker] == id || strings.HasPrefix(name, "mf-"+id+"-") {
			out = append(out, fmt.Sprintf("%s (%s)", name, c.State))
		}
	}
	return out
}

// `megaflow demo --mode sandbox`, as a user runs it, on the real Docker
// Engine with the demo images: every rollout of the replayed step runs in
// a sandbox of its own (setup, each agent step and eval as execs, the model
// service task called from the command), finishes with the reward and
// the attempts the replay says, and nothing is left behind: the command's
// own listing, the engine (no container of its worker) and the task table
// read again by a restarted cluster (every sandbox CLOSED) agree.
func TestDemoSandboxModeDocker(t *testing.T) {
	t.Parallel() // it waits for the engine and a demo step (see internal/testcluster)
	if testing.Short() {
		t.Skip("builds the demo images and runs a demo step in containers")
	}
	engine := testimage.Engine(t)
	begin := time.Now()
	buildDemoImages(t)
	t.Logf("%v: built the demo images", time.Since(begin).Round(time.Millisecond))

	// Seed 3's first three instances: a rollout the data makes fail once
	// (retried), one that hits the step limit (reward 0), one that finishes.
	o := demo.DefaultOptions()
	o.Instances, o.Seed, o.Speedup, o.GraphID = 3, 3, 100, "demo-sbx-e2e"
	data, err := demo.Load()
	if err != nil {
		t.Fatal(err)
	}
	o.ModelURL = "http://unused" // the profiles only
	want, err := data.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	retries, calls, rewardSum := 0, 0, 0.0
	for _, p := range want.Profiles {
		retries += p.Attempts - 1
		calls += len(p.StepMillis) + (p.Attempts-1)*(len(p.StepMillis)/2) // a failing attempt breaks off half-way
		if p.Finished {
			rewardSum++
		}
	}
	if retries == 0 || rewardSum == 0 || rewardSum == float64(len(want.Profiles)) {
		t.Fatalf("the replay's profiles %+v lack a retry or a reward of each kind: pick another seed", want.Profiles)
	}

	dir := filepath.Join(t.TempDir(), "data")
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(dir, "worker", "node-id")); err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, n := range workerContainers(t, engine, dir) {
			name, _, _ := strings.Cut(n, " ")
			_, _ = engine.ContainerRemove(ctx, name, mclient.ContainerRemoveOptions{Force: true})
		}
	})
	code, out, errOut := cli(t, "-o", "json", "demo", "--mode", "sandbox", "--instances", "3", "--seed", "3", "--speedup", "100",
		"--graph-id", "demo-sbx-e2e", "--data-dir", dir, "--runtime", "docker")
	t.Logf("%v: demo --mode sandbox exited %d", time.Since(begin).Round(time.Millisecond), code)
	var s Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("exit %d; stdout is not one JSON summary: %v\n%s\nstderr:\n%s", code, err, out, errOut)
	}
	if code != exitOK || s.Mode != modeSandbox || s.State != "succeeded" || s.ExitCode != 0 || s.Tasks != 9 || s.Counts["succeeded"] != 9 ||
		s.Attempts < 9+retries || s.RetriedTasks < 1 || s.RewardCount != 3 || s.RewardMean != rewardSum/3 || s.SuccessRate != 1 {
		t.Errorf("exit %d, summary %+v; want 9 tasks succeeded, %d attempts, mean reward %.3f\nstderr:\n%s", code, s, 9+retries, rewardSum/3, errOut)
	}
	// What was left is checked below in any case.
	sb := s.Sandbox
	if sb == nil {
		sb = &SandboxStats{}
	}
	if sb.Sandboxes < 3 || sb.Closed != sb.Sandboxes || sb.Left != 0 || sb.LeftUnknown != "" || len(sb.CloseErrors) != 0 ||
		sb.FilesWritten != 3 || sb.ExecSecondsP50 <= 0 || len(sb.Rollouts) != 3 {
		t.Errorf("sandbox stats %+v; want 3 sandboxes or more, all closed, none left", sb)
	}
	// Exactly the replay's model calls and execs (a failing attempt breaks
	// off half-way), unless the engine failed a call and a task needed
	// more attempts than the data's (a loaded host): then at least those.
	if s.Attempts == 9+retries {
		if sb.ModelCalls != calls || sb.Execs != calls+6 {
			t.Errorf("%d model calls, %d execs; the replay makes %d and %d", sb.ModelCalls, sb.Execs, calls, calls+6)
		}
	} else if sb.ModelCalls < calls || sb.Execs < calls+6 {
		t.Errorf("%d attempts (the data's %d and retries of failed calls), %d model calls, %d execs; want at least %d and %d",
			s.Attempts, 9+retries, sb.ModelCalls, sb.Execs, calls, calls+6)
	} else {
		t.Logf("%d attempts where the data makes %d: the engine failed a call and a task was retried", s.Attempts, 9+retries)
	}
	ids := map[string]bool{}
	for i, r := range sb.Rollouts {
		if i >= len(want.Profiles) {
			break
		}
		p := want.Profiles[i]
		reward := 0.0
		if p.Finished {
			reward = 1
		}
		if r.Instance != p.Instance.ID || r.State != "succeeded" || r.Reward == nil || *r.Reward != reward ||
			r.Attempts < p.Attempts || r.Steps != len(p.StepMillis) || !strings.HasPrefix(r.Sandbox, "sbx-") || ids[r.Sandbox] {
			t.Errorf("rollout %d: %+v; want instance %s, reward %v, %d attempts, %d steps, a sandbox of its own",
				i, r, p.Instance.ID, reward, p.Attempts, len(p.StepMillis))
		}
		ids[r.Sandbox] = true
	}

	// The engine: no container of the demo's worker is left.
	if left := workerContainers(t, engine, dir); len(left) > 0 {
		t.Errorf("containers left behind by the demo: %v", left)
	}
	// The task table, read by the cluster started again on the demo's
	// data directory: the step's sandboxes, none live, the rollouts'
	// CLOSED (another, made for a setup whose sandbox could not start,
	// ended on its own).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lc, err := startLocal(ctx, localOptions{DataDir: dir, Runtime: "docker", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0",
		GossipAddr: "127.0.0.1:0", WorkerGossipAddr: "127.0.0.1:0", LogLevel: "debug"})
	if err != nil {
		t.Fatalf("the cluster again on the demo's data directory: %v", err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		if err := lc.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	c, err := client.Dial(ctx, []string{lc.head.GRPCAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	all, err := c.ListSandboxes(ctx, o.Tenant, true)
	if err != nil {
		t.Fatal(err)
	}
	live, err := c.ListSandboxes(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != sb.Sandboxes || len(live) != 0 {
		t.Fatalf("after the demo: %d sandboxes of tenant %s, %d live; want %d (the summary's), none live", len(all), o.Tenant, len(live), sb.Sandboxes)
	}
	closed := 0
	for _, info := range all {
		if info.GetLabels()[labelDemoStep] != "demo-sbx-e2e" {
			t.Errorf("sandbox %s: labels %v; want those of step demo-sbx-e2e", info.GetId(), info.GetLabels())
		}
		if ids[info.GetId()] && info.GetState() == client.SandboxClosed {
			closed++
		}
	}
	if closed != len(ids) {
		t.Errorf("%d of the rollouts' %d sandboxes CLOSED: %v", closed, len(ids), all)
	}
}
