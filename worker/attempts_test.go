package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker/attempt"
)

func TestDuplicateAndStaleAssignmentsIgnored(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	startWorker(t, testConfig(t, rt, t.TempDir(), head.addr))
	head.send(assignMsg("g/t", 2, spec("busybox", "hang")))
	head.send(assignMsg("g/t", 2, spec("busybox", "hang")))
	head.waitEvent("g/t", 2, kindStarted)
	head.send(assignMsg("g/t", 2, spec("busybox", "hang")))
	head.send(assignMsg("g/t", 1, spec("busybox", "hang"))) // older than what runs
	head.send(assignMsg("g/u", 1, spec("busybox", "hang"))) // a marker after them
	head.waitEvent("g/u", 1, kindStarted)
	if n := rt.CallCount("Start"); n != 2 {
		t.Errorf("%d Start calls, want one for g/t#2 and one for g/u#1", n)
	}
	if evs := head.eventsOf("g/t", 2); kinds(evs) != "STARTED" {
		t.Errorf("events of g/t#2: %s", kinds(evs))
	}
	if evs := head.eventsOf("g/t", 1); len(evs) != 0 {
		t.Errorf("events of the stale g/t#1: %s", kinds(evs))
	}
}

func TestNewerAttemptStopsOlderFirst(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	startWorker(t, testConfig(t, rt, t.TempDir(), head.addr))
	head.send(assignMsg("g/t", 1, spec("busybox", "hang")))
	head.waitEvent("g/t", 1, kindStarted)
	old := rt.containerOf("g/t", 1)
	head.send(assignMsg("g/t", 2, spec("busybox", "hang")))
	stopped := head.waitEvent("g/t", 1, kindStopped)
	if stopped.GetReason() != "superseded by attempt 2" {
		t.Errorf("STOPPED reason %q", stopped.GetReason())
	}
	head.waitEvent("g/t", 2, kindStarted)
	newName := ContainerName("w1", attempt.Key{TaskID: "g/t", Attempt: 2})
	iStop, iStart := -1, -1
	for i, c := range rt.Calls() {
		if c.Op == "Stop" && c.ID == old && iStop < 0 {
			iStop = i
		}
		if c.Op == "Start" && c.Spec.Name == newName {
			iStart = i
		}
	}
	if iStop < 0 || iStart < 0 || iStop > iStart {
		t.Errorf("Stop of the old attempt at call %d, Start of the new at %d: the old must stop first", iStop, iStart)
	}
}

func TestStopAttempt(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	startWorker(t, testConfig(t, rt, t.TempDir(), head.addr))
	head.send(assignMsg("g/t", 1, spec("busybox", "hang")))
	head.waitEvent("g/t", 1, kindStarted)
	id := rt.containerOf("g/t", 1)
	head.send(stopMsg("g/t", 1, "cancelled by the user"))
	e := head.waitEvent("g/t", 1, kindStopped)
	if e.GetReason() != "cancelled by the user" || e.GetExitCode() != 143 || e.GetContainerId() != id {
		t.Errorf("STOPPED = %v", e)
	}
	waitFor(t, 5*time.Second, "the container removed", func() bool { return !rt.exists(id) })
	if evs := head.eventsOf("g/t", 1); kinds(evs) != "STARTED,STOPPED" {
		t.Errorf("events: %s", kinds(evs))
	}

	// A stop for an attempt not held here is answered at once.
	head.send(stopMsg("g/x", 3, "cancel"))
	e = head.waitEvent("g/x", 3, kindStopped)
	if !strings.Contains(e.GetReason(), "not held by worker w1") {
		t.Errorf("STOPPED for an unknown attempt: %q", e.GetReason())
	}
}

func TestTimeoutWithFakeClock(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	clock := newFakeClock()
	cfg := testConfig(t, rt, t.TempDir(), head.addr)
	cfg.Clock = clock
	cfg.BatchDelay = 0
	cfg.HeartbeatInterval = time.Hour
	cfg.ReconcileInterval = time.Hour
	startWorker(t, cfg)
	s := spec("busybox", "hang")
	s.TimeoutSeconds = 30
	assignedAt := clock.Now()
	head.send(assignMsg("g/t", 1, s))
	head.waitEvent("g/t", 1, kindStarted)
	clock.Advance(29 * time.Second)
	head.send(assignMsg("g/marker", 1, spec("busybox", "hang")))
	head.waitEvent("g/marker", 1, kindStarted)
	if evs := head.eventsOf("g/t", 1); kinds(evs) != "STARTED" {
		t.Fatalf("before the timeout: %s", kinds(evs))
	}
	clock.Advance(time.Second)
	e := head.waitEvent("g/t", 1, kindTimedOut)
	at := time.Unix(0, e.GetUnixNanos())
	if d := at.Sub(assignedAt); d != 30*time.Second {
		t.Errorf("TIMED_OUT %v after the assignment, want 30s", d)
	}
	if e.GetReason() != "timed out after 30s" || e.GetExitCode() != 143 {
		t.Errorf("TIMED_OUT = %v", e)
	}
}

func TestTimeoutRealClock(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	startWorker(t, testConfig(t, rt, t.TempDir(), head.addr))
	s := spec("busybox", "hang")
	s.TimeoutSeconds = 1
	start := time.Now()
	head.send(assignMsg("g/t", 1, s))
	head.waitEvent("g/t", 1, kindTimedOut)
	if d := time.Since(start); d < time.Second || d > 3*time.Second {
		t.Errorf("TIMED_OUT after %v, want 1s plus a little", d)
	}
}

func TestOOMAndStartFailureReasons(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	rt.OnCommand("oom", fake.Behavior{OOM: true})
	rt.On(func(s contract.Spec) bool { return s.Image == "missing:latest" }, fake.Behavior{StartErr: contract.ErrImageNotFound})
	startWorker(t, testConfig(t, rt, t.TempDir(), head.addr))

	s := spec("busybox", "oom")
	s.Resources = &wire.Resources{MemoryBytes: 32 << 20}
	head.send(assignMsg("g/oom", 1, s))
	e := head.waitEvent("g/oom", 1, kindFailed)
	if e.GetReason() != "OOM killed (memory limit 32 MiB)" || !e.GetOomKilled() || e.GetExitCode() != 137 {
		t.Errorf("OOM event = %v", e)
	}
	if evs := head.eventsOf("g/oom", 1); kinds(evs) != "STARTED,FAILED" {
		t.Errorf("events of the OOM attempt: %s", kinds(evs))
	}

	head.send(assignMsg("g/img", 1, spec("missing:latest", "x")))
	e = head.waitEvent("g/img", 1, kindFailed)
	if !strings.HasPrefix(e.GetReason(), `image "missing:latest" not found`) {
		t.Errorf("missing image reason %q", e.GetReason())
	}
	if evs := head.eventsOf("g/img", 1); kinds(evs) != "FAILED" {
		t.Errorf("events of a failed start: %s", kinds(evs))
	}

	head.send(assignMsg("g/nospec", 1, nil))
	e = head.waitEvent("g/nospec", 1, kindFailed)
	if !strings.Contains(e.GetReason(), "no task spec") {
		t.Errorf("no-spec reason %q", e.GetReason())
	}
}

func TestResultAndContainerSpec(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	rt.OnCommand("result", fake.Behavior{Duration: time.Minute, Output: "hello\nMEGAFLOW_RESULT {\"reward\": 1.5}\n"})
	dir := t.TempDir()
	startWorker(t, testConfig(t, rt, dir, head.addr))
	s := spec("busybox", "result")
	s.Env = map[string]string{"A": "spec", "B": "spec"}
	s.Resources = &wire.Resources{CpuMillis: 500, MemoryBytes: 1 << 30}
	s.TimeoutSeconds = 3600
	m := assignMsg("g/t", 3, s)
	m.GetAssign().Env = map[string]string{"B": "parent"}
	m.GetAssign().GpuUuids = []string{"GPU-1"}
	m.GetAssign().LeaderTerm = 7
	head.send(m)
	head.waitEvent("g/t", 3, kindStarted)
	cs, ok := rt.startSpec("mf-w1-g_t-a3")
	if !ok {
		t.Fatalf("no Start of mf-w1-g_t-a3: %v", rt.Calls())
	}
	if cs.Env["A"] != "spec" || cs.Env["B"] != "parent" || cs.Env["MEGAFLOW_TASK_ID"] != "g/t" || cs.Env["MEGAFLOW_ATTEMPT"] != "3" ||
		cs.Env["MEGAFLOW_GRAPH_ID"] != "g" || cs.Env["MEGAFLOW_WORKER_ID"] != "w1" ||
		cs.Network != "none" || cs.GPUUUIDs[0] != "GPU-1" || cs.LogPath != filepath.Join(dir, "logs", "g+t", "3.log") ||
		cs.CPUMillis != 500 || cs.MemoryBytes != 1<<30 {
		t.Errorf("container spec = %+v", cs)
	}
	for k, v := range map[string]string{LabelTask: "g/t", LabelAttempt: "3", LabelGraph: "g", LabelCluster: "megaflow",
		LabelWorker: "w1", LabelTerm: "7", LabelTimeout: "3600", LabelMemory: fmt.Sprint(1 << 30)} {
		if cs.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cs.Labels[k], v)
		}
	}
	if cs.Labels[LabelDeadline] == "" {
		t.Error("no deadline label")
	}
	rt.clock.Advance(time.Minute)
	e := head.waitEvent("g/t", 3, kindExited)
	if string(e.GetResult()) != `{"reward": 1.5}` || e.GetExitCode() != 0 {
		t.Errorf("EXITED = %v", e)
	}
	waitFor(t, 5*time.Second, "the container removed", func() bool { return rt.containerOf("g/t", 3) == "" })
	if b, err := os.ReadFile(cs.LogPath); err != nil || !strings.Contains(string(b), "hello") {
		t.Errorf("log file kept after removal: %q, %v", b, err)
	}
}

func TestStartCap(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := &gatedRT{fakeRT: newFakeRT(t), gate: make(chan struct{})}
	cfg := testConfig(t, rt, t.TempDir(), head.addr)
	cfg.MaxConcurrentStarts = 2
	startWorker(t, cfg)
	for i := range 6 {
		head.send(assignMsg(fmt.Sprintf("g/t%d", i), 1, spec("busybox", "hang")))
	}
	waitFor(t, 5*time.Second, "two starts in flight", func() bool {
		now, _ := rt.flight()
		return now == 2
	})
	started := func() int {
		n := 0
		for _, e := range head.events() {
			if e.GetKind() == kindStarted {
				n++
			}
		}
		return n
	}
	for released := range 6 {
		rt.gate <- struct{}{}
		waitFor(t, 5*time.Second, "a start to finish", func() bool { return started() == released+1 })
		if now, most := rt.flight(); most > 2 || now > 2 {
			t.Fatalf("starts in flight %d (at most %d so far), cap 2", now, most)
		}
	}
	if _, most := rt.flight(); most != 2 {
		t.Errorf("at most %d starts in flight, want 2", most)
	}
}

func TestRestartReadoptsAndRemovesNotCurrent(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	rt.OnCommand("hour", fake.Behavior{Duration: time.Hour, Output: "MEGAFLOW_RESULT 42\n"})
	dir := t.TempDir()
	w1 := startWorker(t, testConfig(t, rt, dir, head.addr))
	head.send(assignMsg("g/keep", 1, spec("busybox", "hour")))
	head.send(assignMsg("g/drop", 1, spec("busybox", "hang")))
	head.waitEvent("g/keep", 1, kindStarted)
	head.waitEvent("g/drop", 1, kindStarted)
	keep, drop := rt.containerOf("g/keep", 1), rt.containerOf("g/drop", 1)
	w1.kill()
	if !rt.running(keep) || !rt.running(drop) {
		t.Fatal("Kill touched the containers")
	}

	// The head, asked again, wants only g/keep#1.
	head.set(func(h *fakeHead) {
		h.onHello = func(hello *wire.WorkerHello) []*wire.HeadMessage {
			var out []*wire.HeadMessage
			for _, r := range hello.GetRunning() {
				if r.GetTaskId() == "g/drop" {
					out = append(out, stopMsg(r.GetTaskId(), r.GetAttempt(), "not current"))
				}
			}
			return out
		}
	})
	hellos := head.helloCount()
	w2 := startWorker(t, testConfig(t, rt, dir, head.addr))
	waitFor(t, 10*time.Second, "the restarted worker's hello", func() bool { return head.helloCount() > hellos })
	var got []string
	for _, r := range head.hello(hellos).GetRunning() {
		got = append(got, fmt.Sprintf("%s %s %v", r.GetTaskId(), r.GetContainerId(), r.GetStarted()))
	}
	if !slices.Equal(got, []string{"g/drop " + drop + " true", "g/keep " + keep + " true"}) {
		t.Fatalf("hello after restart: %q", got)
	}
	if e := head.waitEvent("g/drop", 1, kindStopped); e.GetReason() != "not current" {
		t.Errorf("STOPPED = %v", e)
	}
	waitFor(t, 5*time.Second, "the not-current container removed", func() bool { return !rt.exists(drop) })
	waitFor(t, 5*time.Second, "g/keep#1 taken over", func() bool {
		for _, a := range w2.Attempts() {
			if a.Key.TaskID == "g/keep" {
				return a.State == attempt.Running && a.ContainerID == keep
			}
		}
		return false
	})
	rt.clock.Advance(time.Hour)
	e := head.waitEvent("g/keep", 1, kindExited)
	if e.GetContainerId() != keep || string(e.GetResult()) != "42" {
		t.Errorf("EXITED = %v", e)
	}
	waitFor(t, 5*time.Second, "the adopted container removed", func() bool { return !rt.exists(keep) })
	if evs := head.eventsOf("g/keep", 1); kinds(evs) != "STARTED,EXITED" {
		t.Errorf("events of the adopted attempt: %s (each once)", kinds(evs))
	}
	if n := rt.CallCount("Start"); n != 2 {
		t.Errorf("%d Start calls: adoption must not start containers", n)
	}
}

func TestLeakedContainersRemoved(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	dir := t.TempDir()
	startWorker(t, testConfig(t, rt, dir, head.addr))
	waitFor(t, 10*time.Second, "a hello", func() bool { return head.helloCount() >= 1 })
	leak := rt.leave(leftSpec(dir, "g/leak", 1, "hang"))
	unlabelled := leftSpec(dir, "g/x", 1, "hang")
	delete(unlabelled.Labels, LabelAttempt)
	bad := rt.leave(unlabelled)
	other := leftSpec(dir, "g/o", 1, "hang")
	other.Labels[LabelCluster] = "another"
	otherID := rt.leave(other)
	waitFor(t, 5*time.Second, "leaked containers removed", func() bool { return !rt.exists(leak) && !rt.exists(bad) })
	if !rt.running(otherID) {
		t.Error("another cluster's container was touched")
	}
	if evs := head.eventsOf("g/leak", 1); len(evs) != 0 {
		t.Errorf("a leak produced events: %s", kinds(evs))
	}
}

func TestShutdownLeavesContainersRunning(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	w := startWorker(t, testConfig(t, rt, t.TempDir(), head.addr))
	head.send(assignMsg("g/t", 1, spec("busybox", "hang")))
	head.waitEvent("g/t", 1, kindStarted)
	id := rt.containerOf("g/t", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.done:
		if err != nil {
			t.Fatal(err)
		}
		w.done <- nil
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after Shutdown")
	}
	if !rt.running(id) {
		t.Error("Shutdown stopped a container")
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	// Assignments after Shutdown are refused.
	w.assign(ctx, assignMsg("g/late", 1, spec("busybox", "hang")).GetAssign())
	if len(w.Attempts()) != 1 {
		t.Errorf("attempts after shutdown: %v", w.Attempts())
	}
}

func TestRuntimeDownAtStartup(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	dir := t.TempDir()
	left := rt.leave(leftSpec(dir, "g/a", 1, "hang"))
	rt.SetDown(true)
	startWorker(t, testConfig(t, rt, dir, head.addr))
	waitFor(t, 5*time.Second, "listing retried", func() bool { return rt.CallCount("List") >= 2 })
	if head.helloCount() != 0 {
		t.Fatal("the worker connected before it knew its containers")
	}
	rt.SetDown(false)
	waitFor(t, 10*time.Second, "a hello", func() bool { return head.helloCount() >= 1 })
	if r := head.hello(0).GetRunning(); len(r) != 1 || r[0].GetContainerId() != left {
		t.Errorf("hello running = %v", r)
	}
}

func TestWaitRetriedWhileRuntimeDown(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	rt.OnCommand("minute", fake.Behavior{Duration: time.Minute, ExitCode: 3})
	clock := newFakeClock()
	cfg := testConfig(t, rt, t.TempDir(), head.addr)
	cfg.Clock = clock
	cfg.BatchDelay = 0
	cfg.HeartbeatInterval = time.Hour
	cfg.ReconcileInterval = time.Hour
	startWorker(t, cfg)
	rt.Fail("Wait", fmt.Errorf("fake wait: %w", contract.ErrUnavailable))
	head.send(assignMsg("g/t", 1, spec("busybox", "minute")))
	head.waitEvent("g/t", 1, kindStarted)
	waitFor(t, 5*time.Second, "the failed Wait", func() bool { return rt.CallCount("Wait") == 1 })
	rt.clock.Advance(time.Minute) // it exits meanwhile
	waitFor(t, 5*time.Second, "the retry timer armed", func() bool { return dueWithin(clock, attempt.RetryMin) })
	clock.Advance(attempt.RetryMin)
	e := head.waitEvent("g/t", 1, kindExited)
	if e.GetExitCode() != 3 || rt.CallCount("Wait") != 2 {
		t.Errorf("EXITED = %v after %d Waits", e, rt.CallCount("Wait"))
	}
}

// Before an attempt with GPUs starts, the GPU check runs on exactly its
// devices; a refusal ends the attempt FAILED with the check's reason and
// starts no container. Attempts without GPUs are not checked.
func TestGPUCheckBeforeStart(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	cfg := testConfig(t, rt, t.TempDir(), head.addr)
	var checked [][]string
	var mu sync.Mutex
	cfg.GPUCheck = func(uuids []string) error {
		mu.Lock()
		defer mu.Unlock()
		checked = append(checked, uuids)
		if uuids[0] == "GPU-busy" {
			return errors.New("gpu GPU-busy: foreign compute process on device: pid 4242")
		}
		return nil
	}
	startWorker(t, cfg)
	busy := assignMsg("g/busy", 1, spec("busybox", "true"))
	busy.GetAssign().GpuUuids = []string{"GPU-busy"}
	head.send(busy)
	e := head.waitEvent("g/busy", 1, kindFailed)
	if !strings.Contains(e.GetReason(), "GPU check refused the start") || !strings.Contains(e.GetReason(), "pid 4242") {
		t.Fatalf("reason %q", e.GetReason())
	}
	if _, ok := rt.startSpec(ContainerName("w1", attempt.Key{TaskID: "g/busy", Attempt: 1})); ok {
		t.Fatal("a container was started on a refused GPU")
	}
	ok := assignMsg("g/ok", 1, spec("busybox", "true"))
	ok.GetAssign().GpuUuids = []string{"GPU-0", "GPU-1"}
	head.send(ok)
	head.waitEvent("g/ok", 1, kindStarted)
	head.send(assignMsg("g/cpu", 1, spec("busybox", "true")))
	head.waitEvent("g/cpu", 1, kindStarted)
	mu.Lock()
	defer mu.Unlock()
	if len(checked) != 2 || strings.Join(checked[1], ",") != "GPU-0,GPU-1" {
		t.Fatalf("checked %v, want the two GPU attempts only, with their devices", checked)
	}
}

// A container the engine created but never started (the worker was killed
// between Docker's create and start) is not adopted at restart: its
// command never ran, so it has no exit of its own (the engine reports code
// 0). It is removed and left out of the hello, so the head re-queues its
// attempt; adopted, it read as EXITED 0 and its task succeeded without
// running (found by a kill -9 of megaflow up during a burst of starts).
func TestRestartRemovesAContainerThatNeverStarted(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	rt.OnCommand("hour", fake.Behavior{Duration: time.Hour})
	dir := t.TempDir()
	w1 := startWorker(t, testConfig(t, rt, dir, head.addr))
	head.send(assignMsg("g/ran", 1, spec("busybox", "hour")))
	head.waitEvent("g/ran", 1, kindStarted)
	w1.kill()
	never := rt.LeaveCreated(leftSpec(dir, "g/never", 1, "exit-3"))

	hellos := head.helloCount()
	startWorker(t, testConfig(t, rt, dir, head.addr))
	waitFor(t, 10*time.Second, "the restarted worker's hello", func() bool { return head.helloCount() > hellos })
	var got []string
	for _, r := range head.hello(hellos).GetRunning() {
		got = append(got, r.GetTaskId())
	}
	if !slices.Equal(got, []string{"g/ran"}) {
		t.Fatalf("hello after restart holds %q; want only g/ran (g/never's container never started)", got)
	}
	waitFor(t, 5*time.Second, "the never-started container removed", func() bool { return !rt.exists(never) })
	if evs := head.eventsOf("g/never", 1); len(evs) != 0 {
		t.Fatalf("events of the never-started attempt: %s; want none", kinds(evs))
	}
}
