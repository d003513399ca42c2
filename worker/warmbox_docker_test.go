package worker

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	mfspec "github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker/attempt"
)

// sandboxSpec is the task of a sandbox as the head builds it
// (spec.SandboxGraph).
func sandboxSpec(image string, cpu int64) *wire.TaskSpec {
	s := &wire.TaskSpec{Name: mfspec.SandboxTaskName, Image: image, Command: mfspec.SandboxIdleCommand, Runtime: "docker",
		Sandbox: &wire.SandboxSpec{}}
	if cpu > 0 {
		s.Resources = &wire.Resources{CpuMillis: cpu}
	}
	return s
}

func poolTargetsMsg(ts ...*wire.PoolTarget) *wire.HeadMessage {
	return &wire.HeadMessage{Msg: &wire.HeadMessage_PoolTargets{PoolTargets: &wire.PoolTargets{Targets: ts}}}
}

// sbxExec runs argv in sandbox id (attempt 1) through the worker's sandbox
// listener, as a head relays it, and returns its stdout and exit code.
func sbxExec(t *testing.T, w *running, id string, argv ...string) (string, int) {
	t.Helper()
	conn, err := grpc.NewClient(w.SandboxAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := wire.NewSandboxWorkerServiceClient(conn).Exec(ctx, &wire.SandboxExecRequest{SandboxId: id, Attempt: 1, Argv: argv})
	if err != nil {
		t.Fatalf("exec in %s: %v", id, err)
	}
	var out strings.Builder
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			t.Fatalf("exec in %s: no exit", id)
		}
		if err != nil {
			t.Fatalf("exec in %s: %v", id, err)
		}
		out.Write(m.GetStdout())
		if e := m.GetExit(); e != nil {
			return out.String(), int(e.GetExitCode())
		}
	}
}

func attemptKey(task string, n uint32) attempt.Key { return attempt.Key{TaskID: task, Attempt: n} }

// idleWarm returns the ids of the worker's idle warm containers.
func idleWarm(w *running) []string {
	var ids []string
	for _, p := range w.Pool() {
		if !p.Busy && p.Session == "" {
			ids = append(ids, p.ContainerID)
		}
	}
	return ids
}

// TestDockerSandboxFromWarmPool: on the real Docker Engine, with a
// pre-warm target of 2 for the sandbox's key, a sandbox create is served
// by one of the warm containers (its STARTED names that container), with
// the sandbox's env and working dir as its execs' defaults, and the pool
// refills to 2; a sandbox of another key (a CPU limit) gets a fresh
// container; a file written in one warm-served sandbox is not in the next;
// a worker killed (as kill -9) right after a warm claim and restarted
// adopts the claimed container as its sandbox (the same container, its
// file still there, execs work), removes the previous run's other warm
// containers and holds its target again, leaking nothing; a closed
// warm-served sandbox's container is removed, not given back to the pool.
func TestDockerSandboxFromWarmPool(t *testing.T) {
	drt, image, cluster := dockerTestRuntime(t, "mftest-wbox-")
	head := newFakeHead(t, "h1")
	dataDir := t.TempDir()
	cfg := testConfig(t, drt, dataDir, head.addr)
	cfg.ClusterName = cluster
	cfg.SandboxAddr = "127.0.0.1:0"
	cfg.ReconcileInterval = 300 * time.Millisecond
	w := startWorker(t, cfg)
	const long = 2 * time.Minute
	target := &wire.PoolTarget{Image: image, Tenant: "default", Size: 2}
	head.send(poolTargetsMsg(target))
	waitFor(t, long, "2 warm containers", func() bool { return len(idleWarm(w)) == 2 })

	// A: served warm, with its env and working dir.
	warmBefore := idleWarm(w)
	a := sandboxSpec(image, 0)
	a.Env = map[string]string{"FOO": "bar"}
	a.WorkingDir = "/work/box"
	head.send(assignMsg("sbx-a/box", 1, a))
	aID := head.waitEvent("sbx-a/box", 1, kindStarted).GetContainerId()
	if !slices.Contains(warmBefore, aID) {
		t.Fatalf("sandbox a runs in %s, not in one of the warm containers %v", aID, warmBefore)
	}
	waitFor(t, long, "the pool refilled to 2", func() bool {
		ids := idleWarm(w)
		return len(ids) == 2 && !slices.Contains(ids, aID)
	})
	waitFor(t, long, "sandbox a running", func() bool { return w.handleOf(attemptKey("sbx-a/box", 1)).status().State == attempt.Running })
	if out, code := sbxExec(t, w, "sbx-a", "sh", "-c", `echo "$FOO $MEGAFLOW_TASK_ID"; pwd; echo secret > /tmp/mine`); code != 0 || out != "bar sbx-a/box\n/work/box\n" {
		t.Fatalf("exec in warm-served sandbox a: code %d, output %q; want its env and working dir", code, out)
	}
	if _, err := os.Stat(claimPath(dataDir, aID)); err != nil {
		t.Fatalf("no claim file for a's container: %v", err)
	}

	// B: another key (a CPU limit): fresh.
	head.send(assignMsg("sbx-b/box", 1, sandboxSpec(image, 500)))
	bID := head.waitEvent("sbx-b/box", 1, kindStarted).GetContainerId()
	if slices.Contains(warmBefore, bID) || slices.Contains(idleWarm(w), bID) {
		t.Fatalf("sandbox b of another key took warm container %s", bID)
	}

	// C: warm again, and a's file is not there.
	warmNow := idleWarm(w)
	head.send(assignMsg("sbx-c/box", 1, sandboxSpec(image, 0)))
	cID := head.waitEvent("sbx-c/box", 1, kindStarted).GetContainerId()
	if !slices.Contains(warmNow, cID) || cID == aID {
		t.Fatalf("sandbox c runs in %s; want one of the warm containers %v", cID, warmNow)
	}
	waitFor(t, long, "sandbox c running", func() bool { return w.handleOf(attemptKey("sbx-c/box", 1)).status().State == attempt.Running })
	if out, code := sbxExec(t, w, "sbx-c", "sh", "-c", "cat /tmp/mine || echo absent"); code != 0 || out != "absent\n" {
		t.Fatalf("sandbox c sees %q (code %d) at /tmp/mine; want a's file absent", out, code)
	}
	if got := testutil.ToFloat64(w.metrics.sandboxCreates.WithLabelValues("warm")); got != 2 {
		t.Errorf("megaflow_sandbox_creates_total{source=warm} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(w.metrics.sandboxCreates.WithLabelValues("fresh")); got != 1 {
		t.Errorf("megaflow_sandbox_creates_total{source=fresh} = %v, want 1", got)
	}

	// D: claimed, then the worker is killed at once and restarted.
	warmNow = idleWarm(w)
	head.send(assignMsg("sbx-d/box", 1, sandboxSpec(image, 0)))
	dID := head.waitEvent("sbx-d/box", 1, kindStarted).GetContainerId()
	w.kill()
	if !slices.Contains(warmNow, dID) {
		t.Fatalf("sandbox d runs in %s; want one of the warm containers %v", dID, warmNow)
	}
	hellos := head.helloCount()
	w2 := startWorker(t, cfg)
	waitFor(t, long, "the restarted worker's hello", func() bool { return head.helloCount() > hellos })
	running := map[string]string{}
	for _, r := range head.hello(hellos).GetRunning() {
		running[r.GetTaskId()] = r.GetContainerId()
	}
	for task, id := range map[string]string{"sbx-a/box": aID, "sbx-b/box": bID, "sbx-c/box": cID, "sbx-d/box": dID} {
		if running[task] != id {
			t.Errorf("the restarted worker announces %s in %q, want %s (the container it had)", task, running[task], id)
		}
	}
	waitFor(t, long, "sandbox d adopted and running", func() bool {
		h := w2.handleOf(attemptKey("sbx-d/box", 1))
		return h != nil && h.status().State == attempt.Running
	})
	if out, code := sbxExec(t, w2, "sbx-a", "sh", "-c", `cat /tmp/mine; echo "$FOO"; pwd`); code != 0 || out != "secret\nbar\n/work/box\n" {
		t.Fatalf("adopted sandbox a: code %d, output %q; want its file, env and working dir", code, out)
	}
	if _, code := sbxExec(t, w2, "sbx-d", "true"); code != 0 {
		t.Fatalf("adopted sandbox d: exec exit %d", code)
	}
	waitFor(t, long, "the restarted worker's pool at its target", func() bool {
		head.send(poolTargetsMsg(target)) // a real head sends the targets after each Welcome
		return len(idleWarm(w2)) == 2
	})
	waitFor(t, long, "no container leaked: the 4 sandboxes and the 2 warm ones", func() bool {
		cs, err := drt.List(context.Background(), map[string]string{LabelCluster: cluster})
		return err == nil && len(cs) == 6
	})

	// Closing a warm-served sandbox removes its container and its claim.
	head.send(stopMsg("sbx-a/box", 1, "sandbox closed"))
	waitFor(t, long, "a's container removed", func() bool {
		cs, err := drt.List(context.Background(), map[string]string{LabelCluster: cluster})
		return err == nil && !slices.ContainsFunc(cs, func(c contract.Container) bool { return c.ID == aID })
	})
	if slices.Contains(idleWarm(w2), aID) {
		t.Fatal("a's container went back to the pool")
	}
	waitFor(t, long, "a's claim file removed", func() bool {
		_, err := os.Stat(claimPath(dataDir, aID))
		return errors.Is(err, os.ErrNotExist)
	})
}
