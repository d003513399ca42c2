package worker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/internal/within"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/fake"
)

// ---------------------------------------------------------------------------
// The runtime: runtime/fake on a manual clock, with helpers to look at it.
// Behaviors are chosen by the task's command (rt.OnCommand).

type fakeRT struct {
	*fake.Runtime
	t     testing.TB
	clock *clock.Fake
}

// newFakeRT returns a fake runtime whose containers are all removed when the
// test ends (after the worker stopped), so none of its goroutines outlive
// the test. Every test's "hang" command runs until stopped.
func newFakeRT(t testing.TB) *fakeRT {
	clk := newFakeClock()
	r := &fakeRT{Runtime: fake.New(clk), t: t, clock: clk}
	r.OnCommand("hang", fake.Behavior{Hang: true})
	t.Cleanup(func() {
		cs, _ := r.List(context.Background(), nil)
		for _, c := range cs {
			_ = r.Remove(context.Background(), c.ID)
		}
	})
	return r
}

// find returns the container whose labels include match, or nil.
func (r *fakeRT) find(match map[string]string) *contract.Container {
	cs, err := r.List(context.Background(), match)
	if err != nil {
		r.t.Fatal(err)
	}
	if len(cs) > 1 {
		r.t.Fatalf("%d containers match %v", len(cs), match)
	}
	if len(cs) == 0 {
		return nil
	}
	return &cs[0]
}

// containerOf returns the id of attempt (task, n)'s container, or "".
func (r *fakeRT) containerOf(task string, n uint32) string {
	if c := r.find(map[string]string{LabelTask: task, LabelAttempt: fmt.Sprint(n)}); c != nil {
		return c.ID
	}
	return ""
}

func (r *fakeRT) byID(id string) *contract.Container {
	cs, err := r.List(context.Background(), nil)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, c := range cs {
		if c.ID == id {
			return &c
		}
	}
	return nil
}

func (r *fakeRT) exists(id string) bool { return r.byID(id) != nil }

func (r *fakeRT) running(id string) bool {
	c := r.byID(id)
	return c != nil && c.Running
}

// startSpec is the Spec of a Start call for container name, if any.
func (r *fakeRT) startSpec(name string) (contract.Spec, bool) {
	for _, c := range r.Calls() {
		if c.Op == "Start" && c.Spec.Name == name {
			return c.Spec, true
		}
	}
	return contract.Spec{}, false
}

// leave starts a container as a previous run of worker w1 would have left
// it, and waits until it runs or (when it does not hang) has exited.
func (r *fakeRT) leave(spec contract.Spec) string {
	r.t.Helper()
	if err := os.MkdirAll(filepath.Dir(spec.LogPath), 0o755); err != nil {
		r.t.Fatal(err)
	}
	id, err := r.Start(context.Background(), spec)
	if err != nil {
		r.t.Fatal(err)
	}
	if spec.Command[0] != "hang" {
		waitFor(r.t, 5*time.Second, "the left container to exit", func() bool { return !r.running(id) })
	}
	return id
}

// gatedRT is a fake runtime whose Starts each wait for a token from gate,
// counting the starts in flight.
type gatedRT struct {
	*fakeRT
	gate chan struct{}

	mu        sync.Mutex
	inFlight  int
	maxFlight int
}

func (g *gatedRT) Start(ctx context.Context, spec contract.Spec) (string, error) {
	g.mu.Lock()
	g.inFlight++
	g.maxFlight = max(g.maxFlight, g.inFlight)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inFlight--
		g.mu.Unlock()
	}()
	select {
	case <-g.gate:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return g.fakeRT.Start(ctx, spec)
}

func (g *gatedRT) flight() (now, most int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight, g.maxFlight
}

// ---------------------------------------------------------------------------
// fakeHead: a real gRPC WorkerService on loopback that records what workers
// send and lets the test send assignments, stops and acks.

type fakeHead struct {
	wire.UnimplementedWorkerServiceServer
	t    testing.TB
	id   string
	addr string
	srv  *grpc.Server

	mu       sync.Mutex
	term     uint64
	redirect string // answer NOT_LEADER naming this address
	autoAck  bool
	// leaseMillis and marginMillis go in the Welcome and in each
	// heartbeat's LeaseAck (0: no lease).
	leaseMillis, marginMillis int64
	// silent: no heartbeat is answered (a real head answers each with a
	// LeaseAck), so a lease lapses, and the worker leaves the stream as
	// stalled after two unanswered heartbeats.
	silent bool
	// status is what the head answers to ClusterStatus (nil: Unimplemented).
	status  *wire.ClusterStatusResponse
	onHello func(*wire.WorkerHello) []*wire.HeadMessage
	// onBatch, when set, sees each event batch as it arrives (under mu).
	onBatch    func(*wire.EventBatch)
	hellos     []*wire.WorkerHello
	batches    []*wire.EventBatch
	heartbeats int
	refused    int // streams refused with NOT_LEADER
	sess       *headSession
}

type headSession struct {
	out  chan *wire.HeadMessage
	kill chan struct{}
}

func newFakeHead(t testing.TB, id string) *fakeHead {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHead{t: t, id: id, addr: lis.Addr().String(), srv: grpc.NewServer(), term: 1, autoAck: true}
	wire.RegisterWorkerServiceServer(h.srv, h)
	wire.RegisterMegaflowServiceServer(h.srv, fakeStatus{h: h})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.srv.Serve(lis)
	}()
	t.Cleanup(func() {
		h.srv.Stop()
		within.Recv(t, 10*time.Second, done, "the fake head "+id+"'s Serve to return once stopped")
	})
	return h
}

func (h *fakeHead) Connect(stream grpc.BidiStreamingServer[wire.WorkerMessage, wire.HeadMessage]) error {
	h.mu.Lock()
	redirect := h.redirect
	if redirect != "" {
		h.refused++
	}
	h.mu.Unlock()
	if redirect != "" {
		return errs.ToStatus(&errs.Error{Class: errs.NotLeader, Message: h.id + " is not the leader", LeaderID: "leader", LeaderAddr: redirect})
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		return status.Error(codes.InvalidArgument, "first message must be a WorkerHello")
	}
	sess := &headSession{out: make(chan *wire.HeadMessage, 1000), kill: make(chan struct{})}
	h.mu.Lock()
	h.hellos = append(h.hellos, hello)
	term, onHello, leaseMillis, marginMillis := h.term, h.onHello, h.leaseMillis, h.marginMillis
	h.mu.Unlock()
	welcome := &wire.Welcome{LeaderId: h.id, Term: term, LeaseMillis: leaseMillis, LeaseMarginMillis: marginMillis}
	if err := stream.Send(&wire.HeadMessage{Msg: &wire.HeadMessage_Welcome{Welcome: welcome}}); err != nil {
		return err
	}
	if onHello != nil {
		for _, m := range onHello(hello) {
			if err := stream.Send(m); err != nil {
				return err
			}
		}
	}
	h.mu.Lock()
	h.sess = sess
	h.mu.Unlock()
	ctx := stream.Context()
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			h.mu.Lock()
			switch msg := m.GetMsg().(type) {
			case *wire.WorkerMessage_Events:
				h.batches = append(h.batches, msg.Events)
				if h.onBatch != nil {
					h.onBatch(msg.Events)
				}
				if h.autoAck {
					select {
					case sess.out <- ackMsg(msg.Events.GetSeq()):
					case <-ctx.Done():
					}
				}
			case *wire.WorkerMessage_Heartbeat:
				h.heartbeats++
				if !h.silent {
					ack := &wire.HeadMessage{Msg: &wire.HeadMessage_LeaseAck{LeaseAck: &wire.LeaseAck{HeartbeatUnixNanos: msg.Heartbeat.GetUnixNanos(),
						LeaseMillis: h.leaseMillis, LeaseMarginMillis: h.marginMillis}}}
					select {
					case sess.out <- ack:
					case <-ctx.Done():
					}
				}
			}
			h.mu.Unlock()
		}
	}()
	for {
		select {
		case m := <-sess.out:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-sess.kill:
			return status.Error(codes.Unavailable, "stream killed by the test")
		case err := <-recvErr:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func ackMsg(seq uint64) *wire.HeadMessage {
	return &wire.HeadMessage{Msg: &wire.HeadMessage_Ack{Ack: &wire.Ack{Seq: seq}}}
}

func assignMsg(taskID string, n uint32, spec *wire.TaskSpec) *wire.HeadMessage {
	graph, _, _ := strings.Cut(taskID, "/")
	return &wire.HeadMessage{Msg: &wire.HeadMessage_Assign{Assign: &wire.Assignment{
		TaskId: taskID, Attempt: n, LeaderTerm: 1, GraphId: graph, Tenant: "default", Spec: spec,
	}}}
}

// assignBatchMsg puts the assignments of msgs (assignMsg's) in one
// AssignmentBatch, in order.
func assignBatchMsg(msgs ...*wire.HeadMessage) *wire.HeadMessage {
	b := &wire.AssignmentBatch{}
	for _, m := range msgs {
		b.Assignments = append(b.Assignments, m.GetAssign())
	}
	return &wire.HeadMessage{Msg: &wire.HeadMessage_Assignments{Assignments: b}}
}

func stopMsg(taskID string, n uint32, reason string) *wire.HeadMessage {
	return &wire.HeadMessage{Msg: &wire.HeadMessage_Stop{Stop: &wire.StopAttempt{TaskId: taskID, Attempt: n, Reason: reason}}}
}

// send delivers m on the current stream, waiting for one.
func (h *fakeHead) send(m *wire.HeadMessage) {
	h.t.Helper()
	var sess *headSession
	waitFor(h.t, 10*time.Second, "a stream to "+h.id, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		sess = h.sess
		return sess != nil
	})
	within.Send(h.t, 10*time.Second, sess.out, m, "a message on the stream to "+h.id)
}

// killStream ends the current stream with UNAVAILABLE.
func (h *fakeHead) killStream() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sess != nil {
		close(h.sess.kill)
		h.sess = nil
	}
}

func (h *fakeHead) set(f func(h *fakeHead)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

func (h *fakeHead) helloCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.hellos)
}

func (h *fakeHead) hello(i int) *wire.WorkerHello {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hellos[i]
}

func (h *fakeHead) allBatches() []*wire.EventBatch {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*wire.EventBatch(nil), h.batches...)
}

// events returns the events of every distinct batch (by seq), in order of
// first arrival.
func (h *fakeHead) events() []*wire.AttemptEvent {
	seen := map[uint64]bool{}
	var out []*wire.AttemptEvent
	for _, b := range h.allBatches() {
		if seen[b.GetSeq()] {
			continue
		}
		seen[b.GetSeq()] = true
		out = append(out, b.GetEvents()...)
	}
	return out
}

// eventsOf returns the distinct events of attempt (task, n).
func (h *fakeHead) eventsOf(task string, n uint32) []*wire.AttemptEvent {
	var out []*wire.AttemptEvent
	for _, e := range h.events() {
		if e.GetTaskId() == task && e.GetAttempt() == n {
			out = append(out, e)
		}
	}
	return out
}

// waitEvent waits for an event of (task, n) of the given kind and returns it.
func (h *fakeHead) waitEvent(task string, n uint32, kind wire.AttemptEventKind) *wire.AttemptEvent {
	h.t.Helper()
	var got *wire.AttemptEvent
	waitFor(h.t, 10*time.Second, fmt.Sprintf("%s event of %s#%d", kind, task, n), func() bool {
		for _, e := range h.eventsOf(task, n) {
			if e.GetKind() == kind {
				got = e
				return true
			}
		}
		return false
	})
	return got
}

// ---------------------------------------------------------------------------
// The worker's clock: a clock.Fake that moves only when the test advances it.

// t0 is where every test's fake clocks start.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newFakeClock() *clock.Fake { return clock.NewFake(t0) }

// dueWithin reports whether a timer of c fires within d from now.
func dueWithin(c *clock.Fake, d time.Duration) bool {
	at, ok := c.Next()
	return ok && !at.After(c.Now().Add(d))
}

// ---------------------------------------------------------------------------
// helpers

// waitFor polls cond until it holds or timeout passes (then fails the test).
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("MEGAFLOW_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// testConfig is a worker config for loopback tests against heads.
func testConfig(t testing.TB, rt contract.Runtime, dataDir string, heads ...string) Config {
	cfg := DefaultConfig()
	cfg.NodeID = "w1"
	cfg.DataDir = dataDir
	cfg.GossipAddr = "127.0.0.1:0"
	cfg.Heads = heads
	cfg.Runtime = rt
	cfg.Capacity = Capacity{CPUMillis: 4000, MemoryBytes: 8 << 30}
	cfg.Logger = testLogger()
	cfg.Fast = true
	cfg.HeartbeatInterval = 50 * time.Millisecond
	cfg.ReconcileInterval = 150 * time.Millisecond
	cfg.ReconnectMin = 10 * time.Millisecond
	cfg.ReconnectMax = 100 * time.Millisecond
	cfg.BatchDelay = 2 * time.Millisecond
	cfg.StopGrace = time.Second
	return cfg
}

// running is a worker started by startWorker.
type running struct {
	*Worker
	t        testing.TB
	done     chan error
	killOnce sync.Once
}

// startWorker builds and runs a worker; cleanup kills it.
func startWorker(t testing.TB, cfg Config) *running {
	t.Helper()
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &running{Worker: w, t: t, done: make(chan error, 1)}
	go func() { r.done <- w.Run(context.Background()) }()
	t.Cleanup(r.kill)
	return r
}

// kill kills the worker and waits for Run to return (30 s at most, then
// it fails the test).
func (r *running) kill() {
	r.killOnce.Do(func() {
		r.Kill()
		within.Recv(r.t, 30*time.Second, r.done, "the worker's Run to return after Kill")
	})
}

func spec(image string, cmd ...string) *wire.TaskSpec {
	return &wire.TaskSpec{Name: "t", Image: image, Command: cmd}
}

// fakeStatus serves the fake head's ClusterStatus, which a worker asks
// when its leader goes silent.
type fakeStatus struct {
	wire.UnimplementedMegaflowServiceServer
	h *fakeHead
}

func (f fakeStatus) ClusterStatus(context.Context, *wire.ClusterStatusRequest) (*wire.ClusterStatusResponse, error) {
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	if f.h.status == nil {
		return nil, status.Error(codes.Unimplemented, "no status set")
	}
	return proto.Clone(f.h.status).(*wire.ClusterStatusResponse), nil
}
