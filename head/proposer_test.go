package head

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/clock"
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

// TestLeaderLoopsPropose runs one iteration of each leader loop that
// commits through the proposer (a scheduling round, the lease check, a
// worker's reconciliation) on a Head that has a table, a fake clock and
// a fake proposer and nothing else: no Raft, socket or sleep. Each must
// propose exactly the commands its decision returns, stamped with the
// clock's time and fenced by the proposer's term.
func TestLeaderLoopsPropose(t *testing.T) {
	setup := []string{"worker w1", "worker w2", "submit g a b"}
	at30 := fmt.Sprint(epochPlus(30).UnixNano())
	tests := []struct {
		name  string
		setup []string // more scenario lines (leadercore_test.go), after setup
		// run drives one iteration at 30 s past the epoch; w1 has a
		// stream, and the leader heard from it then; w2 has neither.
		run  func(ctx context.Context, h *Head) error
		want []string // substrings of each command proposed, in order
	}{
		{"schedule round", nil, func(ctx context.Context, h *Head) error {
			h.scheduleOnce(ctx)
			return nil
		}, []string{`Plan: attempts:{task_id:"g/a" attempt:1 worker_id:"w1"} attempts:{task_id:"g/b" attempt:1 worker_id:"w1"}` +
			` leader_term:7 unix_nanos:` + at30}},
		{"liveness", nil, func(ctx context.Context, h *Head) error {
			h.checkWorkers(ctx, epochPlus(0))
			return nil
		}, []string{`WorkerDown: worker_id:"w2" reason:"lease expired: not heard from for 12s`}},
		{"reconcile", []string{"round", "event w1 g/a#1 started at=1s"}, func(ctx context.Context, h *Head) error {
			// w1 reconnects announcing nothing: it lost g/a, which ran.
			_, _, err := h.reconcileWorker(ctx, "w1", nil)
			return err
		}, []string{`AttemptsLost: attempts:{task_id:"g/a" attempt:1 worker_id:"w1"} reason:"worker w1 no longer runs it (restarted?)" unix_nanos:` + at30}},
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
			h := &Head{cfg: sim.cfg, logger: slog.New(slog.DiscardHandler), clock: clock.NewFake(epochPlus(30)),
				fsm: sim.f, sessions: newSessions(), prop: p}
			h.sessions.attach(&session{workerID: "w1"})
			h.sessions.renew("w1", epochPlus(30))
			if err := tc.run(t.Context(), h); err != nil {
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

// epochPlus returns newLeaderSim's epoch plus s seconds.
func epochPlus(s int) time.Time {
	return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(s) * time.Second)
}
