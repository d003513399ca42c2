package head

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/artifact"
	"github.com/megaflow/megaflow/internal/blob"
	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/wire"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// fakeProposer is a proposer without Raft: it records each command and
// applies it to the table at the next index, as a commit would.
type fakeProposer struct {
	sim  *leaderSim
	cmds []string // "Op: the command in text form"
}

var _ proposer = (*fakeProposer)(nil)

func (p *fakeProposer) propose(_ context.Context, op fsm.Op, msg proto.Message) (any, error) {
	p.cmds = append(p.cmds, fmt.Sprintf("%s: %s", op, prototext.MarshalOptions{}.Format(msg)))
	b, err := fsm.Encode(op, msg)
	if err != nil {
		return nil, err
	}
	p.sim.index++
	res := p.sim.f.Apply(&raft.Log{Index: p.sim.index, Term: p.sim.term, Type: raft.LogCommand, Data: b})
	if err, ok := res.(error); ok {
		return nil, err
	}
	return res, nil
}

func (p *fakeProposer) term() uint64 { return p.sim.term }

// TestLeaderLoopsPropose runs each leader loop that commits through the
// proposer (a scheduling round, the lease check, a worker's
// reconciliation and Welcome, its stream's GPU health, advertisement and
// events, the deadline check, the staged sweep, the artifacts sweep, the
// cluster id and rules checks) on a Head that has a table, a fake clock
// and a fake proposer and nothing else: no Raft, socket or sleep. Each
// must propose exactly the commands its decision returns, stamped with the
// clock's time and fenced by the proposer's term; the loops that wait for
// a time run before it (nothing) and after the fake clock passes it.
func TestLeaderLoopsPropose(t *testing.T) {
	// g is submitted before any worker registers: placed by a round, not
	// with the submission (submissionPlan).
	setup := []string{"submit g a b", "worker w1", "worker w2"}
	at := func(s int) string { return fmt.Sprint(epochPlus(s).UnixNano()) }
	at30 := at(30)
	manifest := artifact.ForTask("default", "g", "g/a", 1).ManifestKey()
	tests := []struct {
		name  string
		setup []string // more scenario lines (leadercore_test.go), after setup
		// run drives the loop at 30 s past the epoch (clk); w1 has a
		// stream, and the leader heard from it then; w2 has neither.
		run  func(ctx context.Context, h *Head, clk *clock.Fake) error
		want []string // substrings of each command proposed, in order
	}{
		{"schedule round", nil, func(ctx context.Context, h *Head, _ *clock.Fake) error {
			h.scheduleOnce(ctx)
			return nil
		}, []string{`Plan: attempts:{task_id:"g/a" attempt:1 worker_id:"w1"} attempts:{task_id:"g/b" attempt:1 worker_id:"w1"}` +
			` leader_term:7 unix_nanos:` + at30}},
		{"liveness", nil, func(ctx context.Context, h *Head, _ *clock.Fake) error {
			h.checkWorkers(ctx, epochPlus(0))
			return nil
		}, []string{`WorkerDown: worker_id:"w2" reason:"lease expired: not heard from for 12s`}},
		{"reconcile", []string{"round", "event w1 g/a#1 started at=1s"}, func(ctx context.Context, h *Head, _ *clock.Fake) error {
			// w1 reconnects announcing nothing: it lost g/a, which ran.
			_, _, err := h.reconcileWorker(ctx, "w1", nil)
			return err
		}, []string{`AttemptsLost: attempts:{task_id:"g/a" attempt:1 worker_id:"w1"} reason:"worker w1 no longer runs it (restarted?)" unix_nanos:` + at30}},
		{"deadline", []string{"submit d x deadline=30"}, func(ctx context.Context, h *Head, clk *clock.Fake) error {
			h.enforceDeadlines(ctx) // at the deadline: not past it
			clk.Advance(time.Second)
			h.enforceDeadlines(ctx)
			return nil
		}, []string{`Cancel: graph_id:"d" reason:"graph deadline of 30 s passed" unix_nanos:` + at(31) + ` reason_code:REASON_CODE_CANCELLED_DEADLINE`}},
		{"staged", []string{"submit s x chunks=2"}, func(ctx context.Context, h *Head, clk *clock.Fake) error {
			h.sweepStaged(ctx)
			clk.Advance(30 * time.Second) // StagedTTL (1m) since the first chunk: not past it
			h.sweepStaged(ctx)
			clk.Advance(time.Second)
			h.sweepStaged(ctx)
			return nil
		}, []string{`DropStaged: graph_ids:"s" unix_nanos:` + at(61)}},
		{"artifacts", []string{"disconnect w2", "round", "event w1 g/a#1 started at=1s", "event w1 g/a#1 exited=0 artifacts at=2s",
			"event w1 g/b#1 started at=1s", "event w1 g/b#1 exited=0 artifacts at=2s"}, func(ctx context.Context, h *Head, clk *clock.Fake) error {
			// Only g/a's manifest is in the store.
			store := artifact.NewMemStore()
			if _, err := store.Put(ctx, manifest, strings.NewReader("{}"), blob.PutOptions{}); err != nil {
				return err
			}
			h.cfg.Artifacts = store
			h.landPendingArtifacts(ctx) // 28 s after they ended: their workers' word may still come
			clk.Advance(32 * time.Second)
			h.landPendingArtifacts(ctx)
			return nil
		}, []string{`TaskEvents: worker_id:"w1" events:{task_id:"g/a" attempt:1 kind:ATTEMPT_EVENT_KIND_ARTIFACTS_LANDED unix_nanos:` + at(62) + `} unix_nanos:` + at(62)}},
		{"cluster id", nil, func(ctx context.Context, h *Head, _ *clock.Fake) error {
			h.ensureClusterID(ctx)
			h.ensureClusterID(ctx) // set: nothing more
			return nil
		}, []string{`SetClusterID: value:`}},
		{"rules at this build's", nil, func(ctx context.Context, h *Head, _ *clock.Fake) error {
			h.ensureRules(ctx) // nothing to raise: reads no Raft configuration (there is none)
			return nil
		}, nil},
		{"welcome", []string{"cluster-id seed=5"}, func(ctx context.Context, h *Head, _ *clock.Fake) error {
			// w2's stream opens announcing an attempt the table does not hold.
			hello := &wire.WorkerHello{Info: &wire.WorkerInfo{Id: "w2", Capacity: &wire.Resources{CpuMillis: 8000, MemoryBytes: 1 << 34}},
				Running: []*wire.RunningAttempt{{TaskId: "g/zz", Attempt: 1, Started: true}}}
			sess, _, welcome, err := h.welcomeWorker(ctx, hello, h.logger)
			if err != nil {
				return err
			}
			if !h.sessions.connected("w2") || sess.workerID != "w2" {
				return fmt.Errorf("w2 has no session after its Welcome")
			}
			if welcome.GetTerm() != 7 || welcome.GetClusterId() != "0000000000000005" || len(welcome.GetStops()) != 1 {
				return fmt.Errorf("welcome %v: want term 7, cluster id 0000000000000005 and a stop for g/zz#1", welcome)
			}
			return nil
		}, []string{`WorkerUpsert: info:{id:"w2" capacity:{cpu_millis:8000 memory_bytes:17179869184}} unix_nanos:` + at30}},
		{"worker stream", []string{"round"}, func(ctx context.Context, h *Head, _ *clock.Fake) error {
			info := &wire.WorkerInfo{Id: "w1", Capacity: &wire.Resources{CpuMillis: 6000, MemoryBytes: 1 << 34}}
			stream := &fakeWorkerStream{ctx: ctx, in: []*wire.WorkerMessage{
				{Msg: &wire.WorkerMessage_GpuHealth{GpuHealth: &wire.GpuHealthReport{Unhealthy: map[string]string{"GPU-1": "xid 79"}}}},
				{Msg: &wire.WorkerMessage_Heartbeat{Heartbeat: &wire.Heartbeat{Info: info}}},
				{Msg: &wire.WorkerMessage_Events{Events: &wire.EventBatch{Seq: 1, Events: []*wire.AttemptEvent{
					{TaskId: "g/a", Attempt: 1, Kind: wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STARTED}}}}},
			}}
			sess := &session{workerID: "w1", send: make(chan *wire.HeadMessage, 8), done: make(chan struct{})}
			if err := (&workerService{h: h}).recvLoop(ctx, sess, stream); !errors.Is(err, io.EOF) {
				return fmt.Errorf("recvLoop ended with %v, want the stream's EOF", err)
			}
			return nil
		}, []string{
			`GpuHealth: worker_id:"w1" unhealthy:{key:"GPU-1" value:"xid 79"} unix_nanos:` + at30,
			`WorkerUpsert: info:{id:"w1" capacity:{cpu_millis:6000 memory_bytes:17179869184}} unix_nanos:` + at30,
			`TaskEvents: worker_id:"w1" events:{task_id:"g/a" attempt:1 kind:ATTEMPT_EVENT_KIND_STARTED} unix_nanos:` + at30,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sim := newLeaderSim(t)
			for _, line := range append(setup, tc.setup...) {
				if _, err := sim.do(line); err != nil {
					t.Fatal(err)
				}
			}
			sim.term = 7
			p := &fakeProposer{sim: sim}
			clk := clock.NewFake(epochPlus(30))
			h := &Head{cfg: sim.cfg, logger: slog.New(slog.DiscardHandler), clock: clk,
				fsm: sim.f, sessions: newSessions(), prop: p}
			h.sessions.attach(&session{workerID: "w1"})
			h.sessions.renew("w1", epochPlus(30))
			if err := tc.run(t.Context(), h, clk); err != nil {
				t.Fatal(err)
			}
			if len(p.cmds) != len(tc.want) {
				t.Fatalf("proposed %d commands, want %d:\n%s", len(p.cmds), len(tc.want), strings.Join(p.cmds, "\n"))
			}
			for i, w := range tc.want {
				if got := strings.Join(strings.Fields(p.cmds[i]), " "); !strings.Contains(got, w) {
					t.Errorf("command %d:\n%s\nwant it to contain\n%s", i, got, w)
				}
			}
		})
	}
}

// fakeWorkerStream is a worker's stream as the head serves it, without
// gRPC: Recv hands out in, then io.EOF (the worker closed it); Send
// records. Only Context, Recv and Send may be called.
type fakeWorkerStream struct {
	grpc.ServerStream
	ctx  context.Context
	mu   sync.Mutex
	in   []*wire.WorkerMessage
	sent []*wire.HeadMessage
}

func (f *fakeWorkerStream) Context() context.Context { return f.ctx }

func (f *fakeWorkerStream) Recv() (*wire.WorkerMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.in) == 0 {
		return nil, io.EOF
	}
	m := f.in[0]
	f.in = f.in[1:]
	return m, nil
}

func (f *fakeWorkerStream) Send(m *wire.HeadMessage) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, m)
	return nil
}

// epochPlus returns newLeaderSim's epoch plus s seconds.
func epochPlus(s int) time.Time {
	return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(s) * time.Second)
}
