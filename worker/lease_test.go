package worker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/leaseinit"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/fake"
)

// TestAssignmentReadAfterTheLeaseLapsedIsRefused: an assignment the worker
// reads once its lease has lapsed (the leader sent it before this process
// was frozen; the leader may have re-queued it since) must not start; it
// is reported STOPPED so that the leader retries it. The chaos harness's
// short profile found the bug: a worker thawed from a 4.6 s SIGSTOP
// stopped the 0 attempts it held, then started two assignments that had
// waited in its stream, 40 ms after their second attempts had started
// elsewhere. Without the check in assign this test sees the container
// start.
func TestAssignmentReadAfterTheLeaseLapsedIsRefused(t *testing.T) {
	head := newFakeHead(t, "h1")
	head.set(func(h *fakeHead) { h.leaseMillis, h.marginMillis, h.silent = 300, 200, true })
	rt := newFakeRT(t)
	w := startWorker(t, silentHeadConfig(t, rt, head.addr))
	waitFor(t, 10*time.Second, "a stream", func() bool { return head.helloCount() >= 1 })
	// The fake head acks no heartbeat: the Welcome's lease lapses 300 ms
	// after the Hello.
	waitFor(t, 10*time.Second, "the lease to lapse", func() bool { return w.leaseLapsed() })
	head.send(assignMsg("g/t", 1, spec("img", "hang")))
	ev := head.waitEvent("g/t", 1, wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STOPPED)
	if id := rt.containerOf("g/t", 1); id != "" {
		t.Fatalf("the attempt assigned after the lapse started container %s", id)
	}
	for _, c := range rt.Calls() {
		if c.Op == "Start" {
			t.Fatalf("a container was started after the lease lapsed: %+v", c.Spec.Name)
		}
	}
	t.Logf("reported: %s", ev.GetReason())
}

// TestRefusedAssignmentSentAgainDoesNotStart: the head sends an ASSIGNED
// attempt again to a worker that reconnects before the head has the
// attempt's STOPPED; the worker, whose lease the new Welcome renewed, must
// not start the attempt it refused, or it runs beside the retry that the
// STOPPED causes. The chaos harness's long profile found it: six tasks, at
// a leader freeze, ran attempt 1 (refused, then started from the new
// leader's resend) beside attempt 2.
func TestRefusedAssignmentSentAgainDoesNotStart(t *testing.T) {
	head := newFakeHead(t, "h1")
	head.set(func(h *fakeHead) { h.leaseMillis, h.marginMillis, h.autoAck, h.silent = 300, 200, false, true })
	rt := newFakeRT(t)
	w := startWorker(t, silentHeadConfig(t, rt, head.addr))
	waitFor(t, 10*time.Second, "a stream", func() bool { return head.helloCount() >= 1 })
	waitFor(t, 10*time.Second, "the lease to lapse", func() bool { return w.leaseLapsed() })
	head.send(assignMsg("g/t", 1, spec("img", "hang")))
	head.waitEvent("g/t", 1, wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STOPPED)
	// A new stream whose Welcome renews the lease for 10 s; the STOPPED is
	// still unacked.
	head.set(func(h *fakeHead) { h.leaseMillis = 10_000 })
	head.killStream()
	waitFor(t, 10*time.Second, "a second stream", func() bool { return head.helloCount() >= 2 })
	waitFor(t, 10*time.Second, "the lease renewed", func() bool { return !w.leaseLapsed() })
	head.send(assignMsg("g/t", 1, spec("img", "hang")))
	head.send(assignMsg("g/u", 1, spec("img", "hang")))
	// The stream is handled in order: once g/u runs, g/t's resend was seen.
	waitFor(t, 10*time.Second, "g/u's container", func() bool { return rt.containerOf("g/u", 1) != "" })
	if id := rt.containerOf("g/t", 1); id != "" {
		t.Fatalf("the refused attempt started from the head's resend: container %s", id)
	}
}

// silentHeadConfig is testConfig for a fake head that answers no
// heartbeat: heartbeats 10 s apart, so that the worker does not leave the
// stream as stalled (after two unanswered heartbeats) and get its lease
// renewed by the next Welcome before the test sees the lease lapse.
func silentHeadConfig(t *testing.T, rt contract.Runtime, head string) Config {
	cfg := testConfig(t, rt, t.TempDir(), head)
	cfg.HeartbeatInterval = 10 * time.Second
	return cfg
}

// An attempt whose end the runtime lost (contract.Exit.Lost: the process
// runtime's spawner died under it) ends STOPPED with the runtime's reason,
// as a dead worker's attempts do, so that the head runs it again without
// counting a failure; an attempt that exits by itself with the same code
// ends EXITED.
func TestLostAttemptEndsStopped(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	rt.OnCommand("lost", fake.Behavior{Lost: true})
	rt.OnCommand("fail", fake.Behavior{ExitCode: 3})
	startWorker(t, testConfig(t, rt, t.TempDir(), head.addr))
	waitFor(t, 10*time.Second, "a stream", func() bool { return head.helloCount() >= 1 })
	head.send(assignMsg("g/lost", 1, spec("img", "lost")))
	ev := head.waitEvent("g/lost", 1, kindStopped)
	if !strings.Contains(ev.GetReason(), "lost by the runtime") {
		t.Errorf("reason %q, want the runtime's", ev.GetReason())
	}
	head.send(assignMsg("g/fail", 1, spec("img", "fail")))
	head.waitEvent("g/fail", 1, kindExited)
}

// An attempt that exits after its worker's lease lapsed ends STOPPED, even
// when the runtime says it exited before any stop reached it
// (contract.Exit.ExitedFirst: the process runtime's lease init kills a task
// at the expiry from inside, with no Stop): the leader may have run it
// again elsewhere since, so its end is not the task's. Here the worker's
// own stop waits out a long grace, and the task exits by itself during it
// (a runtime on the real clock, which the lapse is judged by).
func TestAnExitAfterTheLeaseLapsedEndsStopped(t *testing.T) {
	head := newFakeHead(t, "h1")
	head.set(func(h *fakeHead) { h.leaseMillis, h.marginMillis, h.silent = 1000, 200, true })
	rt := fake.New(clock.Real())
	rt.OnCommand("late", fake.Behavior{Duration: 2500 * time.Millisecond, IgnoreTerm: true})
	t.Cleanup(func() {
		cs, _ := rt.List(context.Background(), nil)
		for _, c := range cs {
			_ = rt.Remove(context.Background(), c.ID)
		}
	})
	cfg := silentHeadConfig(t, rt, head.addr)
	cfg.StopGrace = time.Minute
	w := startWorker(t, cfg)
	waitFor(t, 10*time.Second, "a stream", func() bool { return head.helloCount() >= 1 })
	head.send(assignMsg("g/t", 1, spec("img", "late")))
	waitFor(t, 10*time.Second, "its container", func() bool { cs, _ := rt.List(context.Background(), nil); return len(cs) == 1 })
	if w.leaseLapsed() {
		t.Skip("the lease lapsed before the attempt started (a slow machine): nothing to check")
	}
	ev := head.waitEvent("g/t", 1, wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STOPPED)
	if !strings.Contains(ev.GetReason(), "lease lapsed") {
		t.Errorf("reason %q, want the lapse", ev.GetReason())
	}
}

// A task adopted from an earlier run of the worker that ended while the
// worker was down, at or after the expiry that run last wrote to the lease
// file, was stopped by its init: it ends STOPPED with that reason (the
// head retries it, or ends a started sandbox lost), not as the task's
// exit 143. A new user restarting `megaflow up` 16 s after Ctrl-C saw
// tasks and sandboxes fail with "exit code 143" and a retry used up (the
// head was down too, so no leader had re-queued them). One that ended
// before the expiry keeps its own end.
func TestAnAdoptedTaskStoppedByItsInitEndsStopped(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	rt.OnCommand("early", fake.Behavior{Duration: 10 * time.Minute, Output: "MEGAFLOW_RESULT 7\n"})
	rt.OnCommand("late", fake.Behavior{Duration: time.Hour, ExitCode: 143})
	dir := t.TempDir()
	w1 := startWorker(t, testConfig(t, rt, dir, head.addr))
	head.send(assignMsg("g/early", 1, spec("busybox", "early")))
	head.send(assignMsg("g/late", 1, spec("busybox", "late")))
	head.waitEvent("g/early", 1, kindStarted)
	head.waitEvent("g/late", 1, kindStarted)
	w1.kill()
	// What the first run last wrote for its inits (the fake runtime's
	// clock is the tasks' time): its lease expired 30 minutes in; the
	// early task ended before, the late one after (its init's SIGTERM).
	if err := leaseinit.WriteExpiry(filepath.Join(dir, "lease"), t0.Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	early, late := rt.containerOf("g/early", 1), rt.containerOf("g/late", 1)
	rt.clock.Advance(10 * time.Minute)
	waitFor(t, 5*time.Second, "the early task's end", func() bool { return !rt.running(early) })
	rt.clock.Advance(50 * time.Minute)
	waitFor(t, 5*time.Second, "the late task's end", func() bool { return !rt.running(late) })
	startWorker(t, testConfig(t, rt, dir, head.addr))
	e := head.waitEvent("g/early", 1, kindExited)
	if string(e.GetResult()) != "7" {
		t.Errorf("the early task's end: %v, want its own exit and result", e)
	}
	e = head.waitEvent("g/late", 1, kindStopped)
	if !strings.Contains(e.GetReason(), "lease lapsed while the worker was down") {
		t.Errorf("the late task's reason %q, want the lapse while down", e.GetReason())
	}
	if evs := head.eventsOf("g/late", 1); kinds(evs) != "STARTED,STOPPED" {
		t.Errorf("events of the late attempt: %s", kinds(evs))
	}
}

// A task that ends at or after the expiry its lease file last held, while
// the worker cannot renew that file (its data directory is full), was
// stopped by its init although the lease held: it ends STOPPED with that
// reason (re-queued without a failure), not with its exit 143 as the
// task's failure (a fault trial filled a worker's data directory: two
// healthy tasks failed with "exit code 143").
func TestAnExitAfterTheLeaseFileWentStaleEndsStopped(t *testing.T) {
	head := newFakeHead(t, "h1")
	head.set(func(h *fakeHead) { h.leaseMillis, h.marginMillis = 1000, 200 })
	rt := fake.New(clock.Real())
	rt.OnCommand("late", fake.Behavior{Duration: 4 * time.Second, ExitCode: 143})
	t.Cleanup(func() {
		cs, _ := rt.List(context.Background(), nil)
		for _, c := range cs {
			_ = rt.Remove(context.Background(), c.ID)
		}
	})
	dir := t.TempDir()
	w := startWorker(t, testConfig(t, rt, dir, head.addr))
	file := filepath.Join(dir, "lease", leaseinit.FileName)
	waitFor(t, 10*time.Second, "the lease file", func() bool { _, err := leaseinit.ReadExpiry(file); return err == nil })
	head.send(assignMsg("g/t", 1, spec("img", "late")))
	head.waitEvent("g/t", 1, kindStarted)
	// The lease directory can no longer be written (a file in its place):
	// the file the inits read stops being renewed.
	if err := os.RemoveAll(filepath.Join(dir, "lease")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lease"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// It cannot run tasks once the file's expiry passed: it leaves the
	// leader (which then places nothing here, and runs what was here
	// elsewhere once the lease lapses) until the file can be written again.
	connected := func() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.connected }
	waitFor(t, 10*time.Second, "the worker to leave the leader", func() bool { return !connected() })
	hellos := head.helloCount()
	waitFor(t, 10*time.Second, "the task's end", func() bool { cs, _ := rt.List(context.Background(), nil); return len(cs) == 0 || !cs[0].Running })
	if head.helloCount() != hellos || connected() {
		t.Fatal("the worker came back while its lease file could not be written")
	}
	if err := os.Remove(filepath.Join(dir, "lease")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the worker back once its lease file can be written", func() bool { return head.helloCount() > hellos && connected() })
	// Its end is the lease's (the file's, or the lapse's while it was
	// away), STOPPED: not the task's exit 143.
	ev := head.waitEvent("g/t", 1, kindStopped)
	if !strings.Contains(ev.GetReason(), "lease") {
		t.Errorf("reason %q, want the lease's", ev.GetReason())
	}
	if evs := head.eventsOf("g/t", 1); strings.Contains(kinds(evs), "EXITED") {
		t.Errorf("events %s: the init's kill taken for the task's exit", kinds(evs))
	}
}
