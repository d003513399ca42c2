package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/fake"
)

// pspec is a persistent task's spec; session may be "".
func pspec(session string, cmd ...string) *wire.TaskSpec {
	s := spec("busybox", cmd...)
	s.Mode = wire.ExecutionMode_EXECUTION_MODE_PERSISTENT
	s.Session = session
	return s
}

// newPoolRT is a fake runtime whose warm containers' keeper runs until
// stopped, and whose "work" execs take an hour of its clock.
func newPoolRT(t *testing.T) *fakeRT {
	rt := newFakeRT(t)
	rt.OnCommand("sh", fake.Behavior{Hang: true})
	rt.OnCommand("work", fake.Behavior{Duration: time.Hour})
	return rt
}

func poolConfig(t *testing.T, rt *fakeRT, head *fakeHead, max int) Config {
	cfg := testConfig(t, rt, t.TempDir(), head.addr)
	cfg.PoolMax = max
	return cfg
}

// warmIDs returns the ids of the runtime's warm containers, running or not.
func (r *fakeRT) warmIDs() []string {
	cs, err := r.List(context.Background(), map[string]string{LabelWorker: "w1"})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, c := range cs {
		if _, ok := c.Labels[LabelPool]; ok {
			out = append(out, c.ID)
		}
	}
	return out
}

// execIn returns the container of task's (first) Exec call.
func (r *fakeRT) execIn(task string) string {
	for _, c := range r.Calls() {
		if c.Op == "Exec" && c.Spec.Env["MEGAFLOW_TASK_ID"] == task {
			return c.ID
		}
	}
	return ""
}

func TestPersistentReusesOneContainer(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newPoolRT(t)
	startWorker(t, poolConfig(t, rt, head, 4))
	for i := range 10 {
		s := pspec("", "echo", "hi")
		s.Env = map[string]string{"MY": fmt.Sprint(i)}
		s.WorkingDir = "/tmp"
		head.send(assignMsg(fmt.Sprintf("g/t%d", i), 1, s))
		e := head.waitEvent(fmt.Sprintf("g/t%d", i), 1, kindExited)
		if e.GetExitCode() != 0 {
			t.Fatalf("t%d: %v", i, e)
		}
	}
	if n := rt.CallCount("Start"); n != 1 {
		t.Errorf("%d Start calls for 10 tasks in a row, want 1", n)
	}
	ids := rt.warmIDs()
	if len(ids) != 1 {
		t.Fatalf("warm containers %v, want one", ids)
	}
	var execs int
	for _, c := range rt.Calls() {
		switch c.Op {
		case "Exec":
			execs++
			if c.ID != ids[0] || c.Spec.WorkingDir != "/tmp" || c.Spec.Env["MY"] == "" ||
				!strings.HasSuffix(c.Spec.LogPath, ".log") || c.Spec.Command[0] != "echo" {
				t.Errorf("exec %+v", c)
			}
		case "Start":
			l := c.Spec.Labels
			if l[LabelPool] == "" || l[LabelImage] != "busybox" || l[LabelTenant] != "default" || l[LabelWorker] != "w1" ||
				l[LabelTask] != "" || c.Spec.Network != "none" || c.Spec.Command[0] != "sh" {
				t.Errorf("warm container spec %+v", c.Spec)
			}
		}
	}
	if execs != 10 {
		t.Errorf("%d execs, want 10", execs)
	}
	if n := rt.CallCount("Remove"); n != 0 {
		t.Errorf("%d Remove calls: a warm container was removed", n)
	}
}

func TestPersistentMaxSize(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newPoolRT(t)
	w := startWorker(t, poolConfig(t, rt, head, 2))
	for i := range 5 {
		head.send(assignMsg(fmt.Sprintf("g/t%d", i), 1, pspec("", "work")))
	}
	running := func() int {
		n := 0
		for _, p := range w.Pool() {
			if p.Busy {
				n++
			}
		}
		return n
	}
	done := 0
	for done < 5 {
		want := min(2, 5-done)
		waitFor(t, 10*time.Second, fmt.Sprintf("%d execs running", want), func() bool {
			return running() == want && rt.clock.Waiters() >= want
		})
		if n := rt.CallCount("Start"); n > 2 {
			t.Fatalf("%d warm containers started, PoolMax is 2", n)
		}
		rt.clock.Advance(time.Hour)
		done += want
		waitFor(t, 10*time.Second, fmt.Sprintf("%d tasks exited", done), func() bool {
			n := 0
			for _, e := range head.events() {
				if e.GetKind() == kindExited {
					n++
				}
			}
			return n == done
		})
	}
	if n := rt.CallCount("Start"); n != 2 {
		t.Errorf("%d warm containers started, want 2", n)
	}
}

func TestPersistentIdleRemoval(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newPoolRT(t)
	clock := newFakeClock()
	cfg := poolConfig(t, rt, head, 3)
	cfg.Clock = clock
	cfg.BatchDelay = 0
	cfg.PoolMin = 1
	cfg.PoolIdle = time.Minute
	cfg.HeartbeatInterval = time.Hour
	cfg.ReconcileInterval = time.Hour
	w := startWorker(t, cfg)
	for i := range 3 {
		head.send(assignMsg(fmt.Sprintf("g/t%d", i), 1, pspec("", "work")))
	}
	waitFor(t, 10*time.Second, "3 execs", func() bool { return rt.CallCount("Exec") == 3 && rt.clock.Waiters() >= 3 })
	rt.clock.Advance(time.Hour)
	for i := range 3 {
		head.waitEvent(fmt.Sprintf("g/t%d", i), 1, kindExited)
	}
	waitFor(t, 10*time.Second, "3 idle containers", func() bool {
		ps := w.Pool()
		return len(ps) == 3 && !ps[0].Busy && !ps[1].Busy && !ps[2].Busy
	})
	clock.Advance(30 * time.Second)
	if n := len(rt.warmIDs()); n != 3 {
		t.Errorf("%d warm containers after 30s idle, want 3", n)
	}
	// The pool ticks every PoolIdle/4: step until the idle ones went.
	waitFor(t, 10*time.Second, "idle containers beyond PoolMin removed", func() bool {
		clock.Advance(15 * time.Second)
		return len(w.Pool()) == 1 && len(rt.warmIDs()) == 1
	})
	// PoolMin stays however long it idles.
	clock.Advance(time.Hour)
	clock.Advance(time.Hour)
	if n := len(rt.warmIDs()); n != 1 {
		t.Errorf("%d warm containers after two idle hours, want PoolMin 1", n)
	}
}

func TestPersistentStalledExecReplaced(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newPoolRT(t)
	clock := newFakeClock()
	cfg := poolConfig(t, rt, head, 1)
	cfg.Clock = clock
	cfg.BatchDelay = 0
	cfg.HeartbeatInterval = time.Hour
	cfg.ReconcileInterval = time.Hour
	startWorker(t, cfg)
	s := pspec("", "hang")
	s.TimeoutSeconds = 30
	head.send(assignMsg("g/stall", 1, s))
	head.waitEvent("g/stall", 1, kindStarted)
	first := rt.execIn("g/stall")
	clock.Advance(30 * time.Second)
	e := head.waitEvent("g/stall", 1, kindTimedOut)
	if e.GetReason() != "timed out after 30s" || e.GetExitCode() != 137 || e.GetContainerId() != first {
		t.Errorf("TIMED_OUT = %v", e)
	}
	waitFor(t, 10*time.Second, "the stalled container removed", func() bool { return !rt.exists(first) })

	head.send(assignMsg("g/next", 1, pspec("", "true")))
	head.waitEvent("g/next", 1, kindExited)
	if second := rt.execIn("g/next"); second == first || second == "" {
		t.Errorf("next task ran in %q, want a new container (the stalled one was %s)", second, first)
	}
	if n := rt.CallCount("Start"); n != 2 {
		t.Errorf("%d Start calls, want 2", n)
	}
}

func TestPersistentHealthCheckAndExecFailure(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newPoolRT(t)
	w := startWorker(t, poolConfig(t, rt, head, 1))
	head.send(assignMsg("g/a", 1, pspec("", "true")))
	head.waitEvent("g/a", 1, kindExited)
	first := rt.execIn("g/a")
	// The keeper dies behind the worker's back: reconciliation replaces it.
	if err := rt.Stop(context.Background(), first, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the dead warm container dropped", func() bool { return len(w.Pool()) == 0 && !rt.exists(first) })
	head.send(assignMsg("g/b", 1, pspec("", "true")))
	head.waitEvent("g/b", 1, kindExited)
	second := rt.execIn("g/b")
	if second == first {
		t.Fatalf("g/b ran in the dead container")
	}
	// An exec that cannot run fails the task and replaces the container.
	rt.Fail("Exec", fmt.Errorf("fake exec: %w", contract.ErrUnavailable))
	head.send(assignMsg("g/c", 1, pspec("", "true")))
	e := head.waitEvent("g/c", 1, kindFailed)
	if !strings.Contains(e.GetReason(), "exec in warm container "+second) {
		t.Errorf("FAILED reason %q", e.GetReason())
	}
	waitFor(t, 10*time.Second, "the failed container removed", func() bool { return !rt.exists(second) })
	// A persistent task without a command fails at once.
	head.send(assignMsg("g/d", 1, pspec("")))
	if e := head.waitEvent("g/d", 1, kindFailed); !strings.Contains(e.GetReason(), errNoCommand.Error()) {
		t.Errorf("FAILED reason %q", e.GetReason())
	}
}

func TestPersistentSessionBinding(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newPoolRT(t)
	w := startWorker(t, poolConfig(t, rt, head, 3))
	run := func(task, session string) string {
		t.Helper()
		head.send(assignMsg(task, 1, pspec(session, "true")))
		head.waitEvent(task, 1, kindExited)
		return rt.execIn(task)
	}
	setup := run("g/setup", "s1")
	plain := run("g/plain", "")
	if plain == setup {
		t.Errorf("a task outside the session ran in the session's container")
	}
	if c := run("g/rollout", "s1"); c != setup {
		t.Errorf("g/rollout ran in %s, want the session's %s", c, setup)
	}
	if c := run("h/rollout", "s1"); c == setup {
		t.Errorf("another graph's session s1 ran in g's session container")
	}
	if c := run("g/eval", "s1"); c != setup {
		t.Errorf("g/eval ran in %s, want the session's %s", c, setup)
	}
	var bound []string
	for _, p := range w.Pool() {
		if p.Session != "" {
			bound = append(bound, p.Session)
		}
	}
	if strings.Join(bound, ",") != "g/s1,h/s1" && strings.Join(bound, ",") != "h/s1,g/s1" {
		t.Errorf("bound sessions %v", bound)
	}

	// Session tasks sent together run one after another in the container.
	for _, n := range []string{"a", "b", "c"} {
		head.send(assignMsg("g/w"+n, 1, pspec("s1", "work")))
	}
	for range 3 {
		waitFor(t, 10*time.Second, "one session exec", func() bool { return rt.clock.Waiters() >= 1 })
		if busy := busyCount(w); busy != 1 {
			t.Fatalf("%d containers busy for one session", busy)
		}
		rt.clock.Advance(time.Hour)
	}
	for _, n := range []string{"a", "b", "c"} {
		head.waitEvent("g/w"+n, 1, kindExited)
		if c := rt.execIn("g/w" + n); c != setup {
			t.Errorf("g/w%s ran in %s, want %s", n, c, setup)
		}
	}
}

func busyCount(w *running) int {
	n := 0
	for _, p := range w.Pool() {
		if p.Busy {
			n++
		}
	}
	return n
}

func TestPersistentSessionExpires(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newPoolRT(t)
	clock := newFakeClock()
	cfg := poolConfig(t, rt, head, 2)
	cfg.Clock = clock
	cfg.BatchDelay = 0
	cfg.PoolIdle = time.Minute
	cfg.HeartbeatInterval = time.Hour
	cfg.ReconcileInterval = time.Hour
	w := startWorker(t, cfg)
	head.send(assignMsg("g/setup", 1, pspec("s1", "true")))
	head.waitEvent("g/setup", 1, kindExited)
	first := rt.execIn("g/setup")
	waitFor(t, 10*time.Second, "the session's container released", func() bool { return busyCount(w) == 0 })
	waitFor(t, 10*time.Second, "the session's container removed", func() bool {
		clock.Advance(15 * time.Second)
		return !rt.exists(first)
	})
	head.send(assignMsg("g/late", 1, pspec("s1", "true")))
	head.waitEvent("g/late", 1, kindExited)
	if c := rt.execIn("g/late"); c == first {
		t.Errorf("a task after the session expired ran in its removed container")
	}
}

func TestRestartRemovesOldWarmContainers(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newPoolRT(t)
	dir := t.TempDir()
	cfg := poolConfig(t, rt, head, 2)
	cfg.DataDir = dir
	w := startWorker(t, cfg)
	head.send(assignMsg("g/a", 1, pspec("", "true")))
	head.waitEvent("g/a", 1, kindExited)
	old := rt.warmIDs()
	w.kill()
	if len(old) != 1 || !rt.running(old[0]) {
		t.Fatalf("warm containers after the kill: %v", old)
	}
	startWorker(t, cfg)
	waitFor(t, 10*time.Second, "the old warm container removed", func() bool { return !rt.exists(old[0]) })
}

// Persistent tasks with GPUs: a warm container is reused only by a task
// pinned to exactly its devices (a container's devices are fixed when it is
// created); a task with a different GPU count gets its own, and every exec
// is pinned to exactly the assignment's GPUs.
func TestPersistentGPUPinningFollowsTheAssignment(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newPoolRT(t)
	startWorker(t, poolConfig(t, rt, head, 4))
	for i, gpus := range [][]string{{"GPU-0"}, {"GPU-0", "GPU-1"}, {"GPU-0"}} {
		id := fmt.Sprintf("g/t%d", i)
		m := assignMsg(id, 1, pspec("", "echo", "hi"))
		m.GetAssign().GpuUuids = gpus
		head.send(m)
		if e := head.waitEvent(id, 1, kindExited); e.GetExitCode() != 0 {
			t.Fatalf("%s: %v", id, e)
		}
	}
	starts := map[string][]string{} // warm container -> its devices
	for _, c := range rt.Calls() {
		if c.Op == "Start" {
			starts[c.ID] = c.Spec.GPUUUIDs
		}
	}
	want := map[string]string{"g/t0": "GPU-0", "g/t1": "GPU-0,GPU-1", "g/t2": "GPU-0"}
	for _, c := range rt.Calls() {
		if c.Op != "Exec" {
			continue
		}
		task := c.Spec.Env["MEGAFLOW_TASK_ID"]
		if got := strings.Join(c.Spec.GPUUUIDs, ","); got != want[task] {
			t.Errorf("%s: exec pinned to %q; its assignment holds %q", task, got, want[task])
		}
		if got := strings.Join(starts[c.ID], ","); got != want[task] {
			t.Errorf("%s: ran in a warm container with devices %q; want exactly %q", task, got, want[task])
		}
	}
	if len(starts) != 2 || rt.execIn("g/t0") != rt.execIn("g/t2") || rt.execIn("g/t0") == rt.execIn("g/t1") {
		t.Errorf("warm containers %v: want t0 and t2 to share one, t1 in another", starts)
	}
}

// A clean shutdown removes the warm containers (they hold no one's work:
// a restarted worker would remove them anyway); they stayed running until
// the lease lapsed (found by a tester). A kill leaves them (above).
func TestShutdownRemovesWarmContainers(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newPoolRT(t)
	cfg := poolConfig(t, rt, head, 2)
	w := startWorker(t, cfg)
	head.send(assignMsg("g/a", 1, pspec("", "true")))
	head.waitEvent("g/a", 1, kindExited)
	warm := rt.warmIDs()
	if len(warm) != 1 {
		t.Fatalf("warm containers: %v; want 1", warm)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if rt.exists(warm[0]) {
		t.Fatalf("warm container %s still there after Shutdown", warm[0])
	}
}
