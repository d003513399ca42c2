package worker

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/docker"
	"github.com/megaflow/megaflow/runtime/testimage"
	"github.com/megaflow/megaflow/worker/attempt"
)

// TestDockerEndToEnd runs the worker on the real Docker runtime: results,
// exit codes, timeouts, stops, a missing image, and a restart that takes a
// running container over. It needs a Docker Engine (skipped without one,
// failed without one when CI is set).
func TestDockerEndToEnd(t *testing.T) {
	rt, image, cluster := dockerTestRuntime(t, "mftest-")
	head := newFakeHead(t, "h1")
	dir := t.TempDir()
	cfg := testConfig(t, rt, dir, head.addr)
	cfg.ClusterName = cluster
	cfg.ReconcileInterval = 300 * time.Millisecond
	w1 := startWorker(t, cfg)

	sh := func(script string) *wire.TaskSpec { return spec(image, "sh", "-c", script) }
	head.send(assignMsg("g/result", 1, sh(`echo hi; echo 'MEGAFLOW_RESULT {"n": 1}'`)))
	head.send(assignMsg("g/code", 1, sh("exit 3")))
	timed := spec(image, "sleep", "30")
	timed.TimeoutSeconds = 1
	head.send(assignMsg("g/timeout", 1, timed))
	head.send(assignMsg("g/stop", 1, spec(image, "sleep", "30")))
	head.send(assignMsg("g/image", 1, spec("megaflow-test/does-not-exist:1", "true")))
	head.send(assignMsg("g/adopt", 1, spec(image, "sleep", "60")))

	const long = 60 * time.Second
	waitKind := func(task string, kind wire.AttemptEventKind) *wire.AttemptEvent {
		t.Helper()
		var got *wire.AttemptEvent
		waitFor(t, long, task+" "+kind.String(), func() bool {
			for _, e := range head.eventsOf(task, 1) {
				if e.GetKind() == kind {
					got = e
					return true
				}
			}
			return false
		})
		return got
	}
	if e := waitKind("g/result", kindExited); string(e.GetResult()) != `{"n": 1}` || e.GetExitCode() != 0 {
		t.Errorf("g/result: %v", e)
	}
	if b, err := os.ReadFile(logPath(dir, attempt.Key{TaskID: "g/result", Attempt: 1})); err != nil || !strings.Contains(string(b), "hi\n") {
		t.Errorf("log of g/result: %q, %v", b, err)
	}
	if e := waitKind("g/code", kindExited); e.GetExitCode() != 3 {
		t.Errorf("g/code: %v", e)
	}
	if e := waitKind("g/image", kindFailed); !strings.HasPrefix(e.GetReason(), `image "megaflow-test/does-not-exist:1" not found`) {
		t.Errorf("g/image reason: %q", e.GetReason())
	}
	waitKind("g/stop", kindStarted)
	head.send(stopMsg("g/stop", 1, "cancelled"))
	if e := waitKind("g/stop", kindStopped); e.GetReason() != "cancelled" {
		t.Errorf("g/stop: %v", e)
	}
	if e := waitKind("g/timeout", kindTimedOut); e.GetReason() != "timed out after 1s" {
		t.Errorf("g/timeout: %v", e)
	}
	waitFor(t, long, "finished containers removed", func() bool {
		cs, err := rt.List(context.Background(), map[string]string{LabelCluster: cluster})
		if err != nil {
			t.Fatal(err)
		}
		return len(cs) == 1 && cs[0].Labels[LabelTask] == "g/adopt"
	})

	// A restart takes the running container over.
	adoptID := waitKind("g/adopt", kindStarted).GetContainerId()
	w1.kill()
	hellos := head.helloCount()
	w2 := startWorker(t, cfg)
	waitFor(t, long, "the restarted worker's hello", func() bool { return head.helloCount() > hellos })
	if r := head.hello(hellos).GetRunning(); len(r) != 1 || r[0].GetContainerId() != adoptID || !r[0].GetStarted() {
		t.Fatalf("hello after restart: %v", r)
	}
	waitFor(t, long, "g/adopt taken over", func() bool {
		a := w2.Attempts()
		return len(a) == 1 && a[0].State == attempt.Running && a[0].ContainerID == adoptID
	})
	head.send(stopMsg("g/adopt", 1, "done"))
	if e := waitKind("g/adopt", kindStopped); e.GetContainerId() != adoptID {
		t.Errorf("g/adopt: %v", e)
	}
	waitFor(t, long, "every container removed", func() bool {
		cs, _ := rt.List(context.Background(), map[string]string{LabelCluster: cluster})
		return len(cs) == 0
	})
}

// dockerTestRuntime returns the real Docker runtime, the test image and a
// cluster name (prefix followed by this test binary's run id) whose
// containers are stopped and removed when the test ends. It needs a Docker
// Engine (skipped without one, failed without one when CI is set).
func dockerTestRuntime(t *testing.T, prefix string) (*docker.Runtime, string, string) {
	t.Helper()
	_, image := testimage.Require(t)
	rt, err := docker.New(docker.Config{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	cluster := prefix + testimage.RunID()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, err := rt.List(ctx, map[string]string{LabelCluster: cluster})
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		for _, c := range cs {
			_ = rt.Stop(ctx, c.ID, 0)
			_ = rt.Remove(ctx, c.ID)
		}
	})
	return rt, image, cluster
}
