package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/artifact"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/docker"
)

// countingDocker is the Docker runtime, counting container starts (the
// Execer extra is the embedded runtime's).
type countingDocker struct {
	*docker.Runtime
	starts atomic.Int64
}

func (c *countingDocker) Start(ctx context.Context, spec contract.Spec) (string, error) {
	c.starts.Add(1)
	return c.Runtime.Start(ctx, spec)
}

// TestDockerPersistentPool runs 200 persistent tasks of one image through
// a pool of 4 warm containers on the real Docker Engine: at most 4
// containers are created, every task succeeds with its own result and
// environment, a stalled exec is killed at its timeout and its container
// replaced, and a session's tasks share their container. It needs a Docker
// Engine (skipped without one, failed without one when CI is set).
func TestDockerPersistentPool(t *testing.T) {
	drt, image, cluster := dockerTestRuntime(t, "mftest-pool-")
	rt := &countingDocker{Runtime: drt}
	head := newFakeHead(t, "h1")
	cfg := testConfig(t, rt, t.TempDir(), head.addr)
	cfg.ClusterName = cluster
	cfg.PoolMax = 4
	cfg.ReconcileInterval = 500 * time.Millisecond
	w := startWorker(t, cfg)

	const n = 200
	for i := range n {
		s := pspec("", "sh", "-c", `echo "MEGAFLOW_RESULT {\"i\": $I}"`)
		s.Image = image
		s.Env = map[string]string{"I": fmt.Sprint(i)}
		head.send(assignMsg(fmt.Sprintf("g/t%03d", i), 1, s))
	}
	const long = 3 * time.Minute
	for i := range n {
		task := fmt.Sprintf("g/t%03d", i)
		var got string
		waitFor(t, long, task+" exited", func() bool {
			for _, e := range head.eventsOf(task, 1) {
				if e.GetKind() == kindExited || e.GetKind() == kindFailed {
					got = fmt.Sprintf("%s code=%d result=%s reason=%q", e.GetKind(), e.GetExitCode(), e.GetResult(), e.GetReason())
					return true
				}
			}
			return false
		})
		if want := fmt.Sprintf(`ATTEMPT_EVENT_KIND_EXITED code=0 result={"i": %d} reason=""`, i); got != want {
			t.Errorf("%s: %s, want %s", task, got, want)
		}
	}
	if s := rt.starts.Load(); s > 4 || s < 1 {
		t.Errorf("%d containers started for %d persistent tasks, want at most PoolMax 4", s, n)
	}
	warm, err := drt.List(context.Background(), map[string]string{LabelCluster: cluster})
	if err != nil {
		t.Fatal(err)
	}
	if len(warm) != int(rt.starts.Load()) {
		t.Errorf("%d containers on the engine, %d started", len(warm), rt.starts.Load())
	}
	for _, c := range warm {
		if c.Labels[LabelPool] == "" || c.Labels[LabelImage] != image || c.Labels[LabelTenant] != "default" || !c.Running {
			t.Errorf("warm container %s: labels %v running %v", c.ID, c.Labels, c.Running)
		}
	}
	t.Logf("%d tasks through %d warm containers", n, rt.starts.Load())

	// A stalled exec is killed at its timeout; its container is replaced.
	stall := pspec("", "sleep", "60")
	stall.Image = image
	stall.TimeoutSeconds = 1
	head.send(assignMsg("g/stall", 1, stall))
	e := head.waitEvent("g/stall", 1, kindStarted)
	stalled := e.GetContainerId()
	waitFor(t, long, "g/stall timed out", func() bool {
		for _, e := range head.eventsOf("g/stall", 1) {
			if e.GetKind() == kindTimedOut {
				return true
			}
		}
		return false
	})
	waitFor(t, long, "the stalled container removed", func() bool {
		cs, _ := drt.List(context.Background(), map[string]string{LabelCluster: cluster})
		for _, c := range cs {
			if c.ID == stalled {
				return false
			}
		}
		return true
	})

	// A session's tasks share their container and its files.
	for i, script := range []string{"echo ready > /tmp/state", "cat /tmp/state"} {
		s := pspec("s1", "sh", "-c", script)
		s.Image = image
		task := fmt.Sprintf("g/session%d", i)
		head.send(assignMsg(task, 1, s))
		waitFor(t, long, task+" exited", func() bool {
			for _, e := range head.eventsOf(task, 1) {
				if e.GetKind() == kindExited || e.GetKind() == kindFailed {
					if e.GetKind() == kindFailed || e.GetExitCode() != 0 {
						t.Fatalf("%s (%s): %v", task, script, e)
					}
					return true
				}
			}
			return false
		})
	}
	var sessions []string
	for _, p := range w.Pool() {
		if p.Session != "" {
			sessions = append(sessions, p.Session+"@"+p.ContainerID)
		}
	}
	if len(sessions) != 1 || !strings.HasPrefix(sessions[0], "g/s1@") {
		t.Errorf("session bindings %v, want one for g/s1", sessions)
	}
}

// TestDockerPersistentOutputsAndInputs: persistent tasks in one session's
// warm container on the real Docker Engine write their declared output
// files and read their parents', as ephemeral tasks do: the first task's
// file lands in the store, the next one (the session's last) finds it
// under MEGAFLOW_INPUT_DIR, and when the session's container goes its
// files directory goes with it.
func TestDockerPersistentOutputsAndInputs(t *testing.T) {
	drt, image, cluster := dockerTestRuntime(t, "mftest-pfiles-")
	store := artifact.NewMemStore()
	head := newFakeHead(t, "h1")
	dataDir := t.TempDir()
	cfg := testConfig(t, drt, dataDir, head.addr)
	cfg.ClusterName = cluster
	cfg.PoolMax = 2
	cfg.Artifacts = store
	startWorker(t, cfg)

	gen := pspec("s1", "sh", "-c", `echo '{"step": 1}' > "$MEGAFLOW_OUTPUT_DIR/traj.jsonl"; echo wrote $MEGAFLOW_OUTPUT_DIR`)
	gen.Image, gen.OutputPaths = image, []string{"traj.jsonl"}
	head.send(assignMsg("g/gen", 1, gen))
	if e := head.waitEvent("g/gen", 1, kindExited); e.GetExitCode() != 0 {
		t.Fatalf("gen: %v", e)
	}
	key := artifact.ForTask("default", "g", "g/gen", 1).FileKey("traj.jsonl")
	waitFor(t, time.Minute, "gen's output file in the store", func() bool {
		_, err := store.Stat(context.Background(), key)
		return err == nil
	})

	use := pspec("s1", "sh", "-c", `cat "$MEGAFLOW_INPUT_DIR/gen/traj.jsonl" && echo "MEGAFLOW_RESULT {\"ok\": true}"`)
	use.Image = image
	m := assignMsg("g/use", 1, use)
	m.GetAssign().ArtifactInputs = map[string]uint32{"gen": 1}
	m.GetAssign().SessionEnds = true
	head.send(m)
	if e := head.waitEvent("g/use", 1, kindExited); e.GetExitCode() != 0 || string(e.GetResult()) != `{"ok": true}` {
		t.Fatalf("use could not read its parent's file: %v", e)
	}
	if a, b := head.waitEvent("g/gen", 1, kindStarted).GetContainerId(), head.waitEvent("g/use", 1, kindStarted).GetContainerId(); a != b {
		t.Fatalf("the session's tasks ran in %s and %s; want one warm container", a, b)
	}
	waitFor(t, time.Minute, "the session's container and its files directory gone", func() bool {
		left, _ := os.ReadDir(filepath.Join(dataDir, "pool"))
		return len(left) == 0
	})
}
