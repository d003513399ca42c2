package worker

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/gossip"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/internal/within"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/runtime/process"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestHelloAnnouncesAttempts(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	rt.OnCommand("result", fake.Behavior{Output: "working\nMEGAFLOW_RESULT {\"ok\":true}\nbye\n"})
	dir := t.TempDir()
	runningID := rt.leave(leftSpec(dir, "g/a", 1, "hang"))
	exitedID := rt.leave(leftSpec(dir, "g/b", 2, "result"))
	// Another worker's container is none of w1's business.
	other := leftSpec(dir, "g/c", 1, "hang")
	other.Labels[LabelWorker] = "w2"
	otherID := rt.leave(other)

	startWorker(t, testConfig(t, rt, dir, head.addr))
	waitFor(t, 10*time.Second, "a hello", func() bool { return head.helloCount() >= 1 })
	h := head.hello(0)
	if h.GetInfo().GetId() != "w1" || h.GetInfo().GetRuntime() != "fake" || h.GetInfo().GetCapacity().GetCpuMillis() != 4000 ||
		h.GetInfo().GetMaxConcurrentStarts() != 4 {
		t.Errorf("hello info = %v", h.GetInfo())
	}
	var got []string
	for _, r := range h.GetRunning() {
		got = append(got, fmt.Sprintf("%s#%d %s started=%v", r.GetTaskId(), r.GetAttempt(), r.GetContainerId(), r.GetStarted()))
	}
	want := []string{"g/a#1 " + runningID + " started=true", "g/b#2 " + exitedID + " started=true"}
	if !slices.Equal(got, want) {
		t.Fatalf("hello running = %q, want %q", got, want)
	}

	// The exited container is reported with its result, then removed.
	e := head.waitEvent("g/b", 2, kindExited)
	if string(e.GetResult()) != `{"ok":true}` || e.GetContainerId() != exitedID {
		t.Errorf("EXITED = %v", e)
	}
	waitFor(t, 5*time.Second, "the exited container removed", func() bool { return !rt.exists(exitedID) })

	// A new attempt, then a reconnect: the Hello lists what runs now.
	head.send(assignMsg("g/d", 1, spec("busybox", "hang")))
	head.waitEvent("g/d", 1, kindStarted)
	head.killStream()
	waitFor(t, 10*time.Second, "a second hello", func() bool { return head.helloCount() >= 2 })
	got = nil
	for _, r := range head.hello(1).GetRunning() {
		got = append(got, fmt.Sprintf("%s#%d", r.GetTaskId(), r.GetAttempt()))
	}
	if !slices.Equal(got, []string{"g/a#1", "g/d#1"}) {
		t.Errorf("second hello running = %q", got)
	}
	if !rt.running(otherID) || !rt.running(runningID) {
		t.Error("a running container was touched")
	}
}

// startStandingWorker starts a worker against a new fake head on a fake
// clock that moves only when the test moves it (BatchDelay 1 s, heartbeats
// and reconciliation hourly): what it sends, it sends for an event or an
// ack, never for a timer the test did not move. The fake runtime's
// "ten-minutes" runs ten minutes on its own clock. autoAck false: the head
// acks only what the test sends.
func startStandingWorker(t *testing.T, autoAck bool) (*fakeHead, *running, *clock.Fake) {
	t.Helper()
	head := newFakeHead(t, "h1")
	head.set(func(h *fakeHead) { h.autoAck = autoAck })
	rt := newFakeRT(t)
	rt.OnCommand("ten-minutes", fake.Behavior{Duration: 10 * time.Minute})
	clk := newFakeClock()
	cfg := testConfig(t, rt, t.TempDir(), head.addr)
	cfg.Clock = clk
	cfg.BatchDelay = time.Second
	cfg.HeartbeatInterval = time.Hour
	cfg.ReconcileInterval = time.Hour
	return head, startWorker(t, cfg), clk
}

// An event goes to the head at once when no batch waits for its ack, and
// the events held behind a batch in flight go when its ack comes, without
// waiting for BatchDelay: the worker's clock never moves here, so a batch
// that waited for BatchDelay would never be sent.
func TestEventsGoAtOnceWhenNothingIsInFlight(t *testing.T) {
	head, w, _ := startStandingWorker(t, false)

	head.send(assignMsg("g/a", 1, spec("busybox", "ten-minutes")))
	head.waitEvent("g/a", 1, kindStarted) // nothing in flight: sent at once
	first := head.allBatches()
	if len(first) != 1 {
		t.Fatalf("%d batches before any ack, want 1: %v", len(first), first)
	}
	head.send(assignMsg("g/b", 1, spec("busybox", "ten-minutes")))
	waitFor(t, 10*time.Second, "g/b's event held behind the unacked batch", func() bool { return w.outbox.pendingLen() == 1 })
	if n := len(head.allBatches()); n != 1 {
		t.Fatalf("%d batches sent while the first waited for its ack, want 1", n)
	}
	head.send(ackMsg(first[0].GetSeq()))
	head.waitEvent("g/b", 1, kindStarted) // held behind the first batch, sent on its ack
	for _, b := range head.allBatches()[1:] {
		for _, e := range b.GetEvents() {
			if e.GetTaskId() == "g/a" {
				t.Errorf("batch %d repeats g/a's event: %v", b.GetSeq(), e)
			}
		}
	}
}

// The attempts of an assignment batch report together: their starts and
// the ends that came at once go in one event batch, not the first start
// alone with the rest behind its commit, and an attempt that runs on holds
// the others' events BatchDelay at most. The worker's clock moves only when
// the test moves it: a batch sent before that was not sent for BatchDelay.
func TestAssignmentBatchReportsTogether(t *testing.T) {
	head, w, clk := startStandingWorker(t, true)
	waitFor(t, 10*time.Second, "the hello", func() bool { return head.helloCount() > 0 })
	if !head.hello(0).GetAcceptsAssignmentBatches() {
		t.Fatal("the hello does not say the worker accepts assignment batches")
	}

	tasks := []string{"g/a", "g/b", "g/c", "g/d"}
	var msgs []*wire.HeadMessage
	for _, task := range tasks {
		msgs = append(msgs, assignMsg(task, 1, spec("busybox", "true"))) // exits 0 at once
	}
	head.send(assignBatchMsg(msgs...))
	for _, task := range tasks {
		head.waitEvent(task, 1, kindExited)
	}
	if b := head.allBatches(); len(b) != 1 || len(b[0].GetEvents()) != 2*len(tasks) {
		t.Fatalf("4 attempts that ended at once reported in %d batches, want their 8 events in 1: %v", len(b), b)
	}

	// g/e runs on: the others' four events and g/e's start wait for
	// BatchDelay, then go together.
	head.send(assignBatchMsg(assignMsg("g/e", 1, spec("busybox", "ten-minutes")),
		assignMsg("g/f", 1, spec("busybox", "true")), assignMsg("g/g", 1, spec("busybox", "true"))))
	waitFor(t, 10*time.Second, "5 events pending", func() bool { return w.outbox.pendingLen() == 5 })
	if n := len(head.allBatches()); n != 1 {
		t.Fatalf("%d batches before BatchDelay passed, want 1 (the first assignment batch's)", n)
	}
	clk.Advance(time.Second) // BatchDelay
	head.waitEvent("g/g", 1, kindExited)
	if b := head.allBatches(); len(b) != 2 || len(b[1].GetEvents()) != 5 {
		t.Fatalf("after BatchDelay: %d batches, want the 5 held events in a second one: %v", len(b), b)
	}
}

// The events of an assignment batch that wait behind a batch in flight go
// when it is acked, and that send ends their hold: a later event goes at
// once when nothing is in flight. (The ack's send once left the hold in
// place without its timer, and every later event waited until as many had
// piled up.) The worker's clock stands: nothing here is sent for
// BatchDelay.
func TestAckAfterAnAssignmentBatchEndsTheHold(t *testing.T) {
	head, w, _ := startStandingWorker(t, false)

	head.send(assignMsg("g/long", 1, spec("busybox", "ten-minutes")))
	head.waitEvent("g/long", 1, kindStarted) // nothing in flight: at once, unacked
	head.send(assignBatchMsg(assignMsg("g/a", 1, spec("busybox", "true")), assignMsg("g/b", 1, spec("busybox", "true"))))
	waitFor(t, 10*time.Second, "g/a's and g/b's 4 events behind the unacked batch", func() bool { return w.outbox.pendingLen() == 4 })
	head.send(ackMsg(head.allBatches()[0].GetSeq()))
	head.waitEvent("g/b", 1, kindExited) // sent with the ack
	head.send(ackMsg(head.allBatches()[1].GetSeq()))
	waitFor(t, 10*time.Second, "every batch acked", func() bool { return w.outbox.unackedLen() == 0 })
	head.send(assignMsg("g/c", 1, spec("busybox", "ten-minutes")))
	head.waitEvent("g/c", 1, kindStarted) // nothing in flight: at once
}

func TestEventsBatchedAndResentUntilAcked(t *testing.T) {
	head := newFakeHead(t, "h1")
	head.set(func(h *fakeHead) { h.autoAck = false })
	rt := newFakeRT(t)
	rt.OnCommand("ten-minutes", fake.Behavior{Duration: 10 * time.Minute})
	cfg := testConfig(t, rt, t.TempDir(), head.addr)
	cfg.BatchDelay = 200 * time.Millisecond
	w := startWorker(t, cfg)

	tasks := []string{"g/a", "g/b", "g/c"}
	for _, task := range tasks {
		head.send(assignMsg(task, 1, spec("busybox", "ten-minutes")))
	}
	var ids []string
	for _, task := range tasks {
		head.waitEvent(task, 1, kindStarted)
		ids = append(ids, rt.containerOf(task, 1))
	}
	before := len(head.allBatches())
	rt.clock.Advance(10 * time.Minute) // all three exit at once
	for _, task := range tasks {
		head.waitEvent(task, 1, kindExited)
	}
	batches := head.allBatches()
	if n := len(batches) - before; n != 1 || len(batches[before].GetEvents()) != 3 {
		t.Fatalf("three exits within the batch delay went out in %d batches: %v", n, batches[before:])
	}
	for i := 1; i < len(batches); i++ {
		if batches[i].GetSeq() != batches[i-1].GetSeq()+1 {
			t.Fatalf("seqs not consecutive: %d then %d", batches[i-1].GetSeq(), batches[i].GetSeq())
		}
	}
	last := batches[len(batches)-1].GetSeq()

	// Nothing acked: the containers stay, and a new stream gets every batch again.
	head.killStream()
	waitFor(t, 10*time.Second, "every batch re-sent", func() bool { return len(head.allBatches()) >= 2*len(batches) })
	resent := head.allBatches()[len(batches):]
	for i, b := range resent[:len(batches)] {
		if b.GetSeq() != batches[i].GetSeq() || len(b.GetEvents()) != len(batches[i].GetEvents()) {
			t.Fatalf("re-sent batch %d = seq %d (%d events), want seq %d (%d events)", i, b.GetSeq(), len(b.GetEvents()),
				batches[i].GetSeq(), len(batches[i].GetEvents()))
		}
	}
	if h := head.hello(1); len(h.GetRunning()) != 3 {
		t.Errorf("the Hello after the reconnect holds %d attempts, want the 3 with unacked final events", len(h.GetRunning()))
	}
	for _, id := range ids {
		if !rt.exists(id) {
			t.Fatalf("container %s removed before its final event was acked", id)
		}
	}

	// The ack: containers go, attempts are forgotten, nothing is re-sent.
	head.send(ackMsg(last))
	waitFor(t, 5*time.Second, "containers removed after the ack", func() bool {
		return !rt.exists(ids[0]) && !rt.exists(ids[1]) && !rt.exists(ids[2]) && len(w.Attempts()) == 0
	})
	n := len(head.allBatches())
	head.killStream()
	waitFor(t, 10*time.Second, "a third hello", func() bool { return head.helloCount() >= 3 })
	head.send(assignMsg("g/z", 1, spec("busybox", "hang")))
	head.waitEvent("g/z", 1, kindStarted)
	for _, b := range head.allBatches()[n:] {
		if b.GetSeq() <= last {
			t.Errorf("acked batch %d sent again", b.GetSeq())
		}
	}
	if len(head.hello(2).GetRunning()) != 0 {
		t.Errorf("third hello announces %v", head.hello(2).GetRunning())
	}
}

func TestNotLeaderRedirectFollowed(t *testing.T) {
	follower := newFakeHead(t, "h1")
	leader := newFakeHead(t, "h2")
	follower.set(func(h *fakeHead) { h.redirect = leader.addr })
	w := startWorker(t, testConfig(t, newFakeRT(t), t.TempDir(), follower.addr))
	waitFor(t, 10*time.Second, "the worker at the leader", func() bool { return w.Leader() == leader.addr })
	if follower.helloCount() != 0 || leader.helloCount() != 1 {
		t.Errorf("hellos: follower %d, leader %d", follower.helloCount(), leader.helloCount())
	}
	follower.mu.Lock()
	refused := follower.refused
	follower.mu.Unlock()
	if refused < 1 {
		t.Error("the follower was never asked")
	}

	// Leadership moves back: the old leader now redirects, the follower leads.
	follower.set(func(h *fakeHead) { h.redirect = "" })
	leader.set(func(h *fakeHead) { h.redirect = follower.addr })
	leader.killStream()
	waitFor(t, 10*time.Second, "the worker at the new leader", func() bool { return w.Leader() == follower.addr })
}

func TestHeadsFoundInGossip(t *testing.T) {
	head := newFakeHead(t, "h1")
	gcfg := gossip.DefaultConfig()
	gcfg.NodeName = "h1"
	gcfg.BindAddr = "127.0.0.1:0"
	gcfg.Timing = gossip.FastTiming()
	gcfg.Meta = gossip.Meta{Role: gossip.RoleHead, NodeID: "h1", GRPCAddr: head.addr}
	g, err := gossip.New(gcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Shutdown()
	cfg := testConfig(t, newFakeRT(t), t.TempDir())
	cfg.Join = []string{g.LocalAddr()}
	w := startWorker(t, cfg)
	waitFor(t, 10*time.Second, "a stream to the head found in gossip", func() bool { return w.Leader() == head.addr })
	waitFor(t, 10*time.Second, "the worker in gossip", func() bool {
		for _, m := range g.Members() {
			if m.Name == "w1" && m.Meta.Role == gossip.RoleWorker && m.Meta.Extra[MetaCPUMillis] == "4000" && m.Meta.Extra[MetaRuntime] == "fake" {
				return true
			}
		}
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the worker seen as left", func() bool {
		for _, m := range g.Members() {
			if m.Name == "w1" {
				return m.Status == gossip.StatusLeft
			}
		}
		return false
	})
}

func TestHeartbeats(t *testing.T) {
	head := newFakeHead(t, "h1")
	startWorker(t, testConfig(t, newFakeRT(t), t.TempDir(), head.addr))
	waitFor(t, 10*time.Second, "three heartbeats", func() bool {
		head.mu.Lock()
		defer head.mu.Unlock()
		return head.heartbeats >= 3
	})
}

func TestStaleLeaderTermRefused(t *testing.T) {
	newer := newFakeHead(t, "h1")
	newer.set(func(h *fakeHead) { h.term = 5 })
	older := newFakeHead(t, "h2")
	w := startWorker(t, testConfig(t, newFakeRT(t), t.TempDir(), newer.addr, older.addr))
	waitFor(t, 10*time.Second, "the term-5 leader", func() bool { return w.Leader() == newer.addr })
	// The term-5 head goes; the term-1 head welcomes: refused.
	newer.set(func(h *fakeHead) { h.redirect = older.addr })
	newer.killStream()
	waitFor(t, 10*time.Second, "a hello at the deposed head", func() bool { return older.helloCount() >= 1 })
	if l := w.Leader(); l == older.addr {
		t.Error("the worker took a stream from a leader with an older term")
	}
}

// TestStalledStreamLeftForTheNewLeader: a leader that stops answering
// heartbeats (its host cut off: the TCP stream stays open on this side
// until keepalive gives up, 15 s) is kept while the other heads still
// name it leader (it may only be slow), and left for the new leader as
// soon as one of them names another, while the worker's lease still
// holds. Before, the worker waited for keepalive and then tried the lost
// leader first again.
func TestStalledStreamLeftForTheNewLeader(t *testing.T) {
	cut := newFakeHead(t, "h1")
	next := newFakeHead(t, "h2")
	next.set(func(h *fakeHead) {
		h.status = &wire.ClusterStatusResponse{HeadId: "h2", LeaderId: "h1", LeaderGrpcAddr: cut.addr, Term: 1}
	})
	w := startWorker(t, testConfig(t, newFakeRT(t), t.TempDir(), cut.addr, next.addr))
	waitFor(t, 10*time.Second, "the worker at h1", func() bool { return w.Leader() == cut.addr })
	cut.set(func(h *fakeHead) { h.silent = true })
	// h2 still names h1: the worker stays, asking again each heartbeat.
	waitFor(t, 10*time.Second, "ten heartbeats unanswered", func() bool {
		cut.mu.Lock()
		defer cut.mu.Unlock()
		return cut.heartbeats >= 10
	})
	if w.Leader() != cut.addr || next.helloCount() != 0 {
		t.Fatalf("the worker left a silent leader that the other head still names (leader %q, hellos at h2 %d)", w.Leader(), next.helloCount())
	}
	next.set(func(h *fakeHead) {
		h.status = &wire.ClusterStatusResponse{HeadId: "h2", LeaderId: "h2", LeaderGrpcAddr: next.addr, Term: 2}
		h.term = 2
	})
	waitFor(t, 10*time.Second, "the worker at h2", func() bool { return w.Leader() == next.addr })
	if n := cut.helloCount(); n != 1 {
		t.Errorf("%d hellos at the silent head, want 1: the round after it named the new leader tried the old one first", n)
	}
	if got := testutil.ToFloat64(w.metrics.streamStalls); got != 1 {
		t.Errorf("stream_stalls_total %v, want 1", got)
	}
}

// TestUnansweringHeadSkippedWithinTheDialTimeout: a head whose host
// accepts TCP but never speaks (frozen, or cut off behind a proxy) is
// given DialTimeout, not gRPC's 20 s connect timeout, before the worker
// tries the next head.
func TestUnansweringHeadSkippedWithinTheDialTimeout(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0") // accepts (the kernel's backlog), never answers
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	next := newFakeHead(t, "h2")
	cfg := testConfig(t, newFakeRT(t), t.TempDir(), lis.Addr().String(), next.addr)
	cfg.DialTimeout = 200 * time.Millisecond
	w := startWorker(t, cfg)
	waitFor(t, 10*time.Second, "the worker at h2", func() bool { return w.Leader() == next.addr })
}

// Shutdown first waits for the leader to ack the events the worker holds:
// an end seen just before the stop, held behind a batch in flight, reaches
// the head before the stream closes (it once went with the worker, and a
// process task's attempt was lost and run again; found by a fault trial).
func TestShutdownDeliversTheEventsItHolds(t *testing.T) {
	head, w, _ := startStandingWorker(t, false)
	head.send(assignMsg("g/long", 1, spec("busybox", "ten-minutes")))
	head.waitEvent("g/long", 1, kindStarted) // batch 1, not acked
	head.send(assignMsg("g/b", 1, spec("busybox", "true")))
	waitFor(t, 10*time.Second, "g/b's start and end held behind batch 1", func() bool { return w.outbox.pendingLen() == 2 })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Shutdown(ctx) }()
	waitFor(t, 10*time.Second, "Shutdown to begin", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.closing
	})
	head.send(ackMsg(head.allBatches()[0].GetSeq()))
	head.waitEvent("g/b", 1, kindExited) // sent on batch 1's ack, before the stream closed
	head.send(ackMsg(head.allBatches()[1].GetSeq()))
	if err := within.Recv(t, 10*time.Second, done, "Shutdown to return once every event was acked"); err != nil {
		t.Fatal(err)
	}
}

// A worker whose tasks cannot outlive it (the process runtime) stops them
// at Shutdown while its stream is up: the head gets each attempt's own
// end, STOPPED (which it re-queues) for one that still ran, and no attempt
// is left for the runtime's StopAll to end unreported after the stream
// closed (where an attempt that had just completed was lost and its task
// run again; found by a fault trial).
func TestShutdownStopsProcessTasksWhileItsStreamIsUp(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	rt, err := process.New(process.Config{StateDir: filepath.Join(t.TempDir(), "process")})
	if err != nil {
		t.Fatal(err)
	}
	head := newFakeHead(t, "h1")
	w := startWorker(t, testConfig(t, rt, t.TempDir(), head.addr))
	head.send(assignMsg("g/long", 1, &wire.TaskSpec{Name: "long", Command: []string{sh, "-c", "sleep 60"}}))
	head.waitEvent("g/long", 1, kindStarted)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	ev := head.waitEvent("g/long", 1, kindStopped)
	if !strings.Contains(ev.GetReason(), "shutting down") {
		t.Errorf("g/long stopped with reason %q; want it to say the worker is shutting down", ev.GetReason())
	}
}
