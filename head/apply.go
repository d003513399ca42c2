package head

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/errs"
)

// proposer is what the leader's loops (scheduleOnce, checkWorkers,
// reconcileWorker) need of consensus: they read the table from the FSM,
// decide with the pure functions of leadercore.go and commit what those
// return through it. The head's is raftProposer; tests give a fake that
// records the commands and applies them to an FSM, without Raft.
type proposer interface {
	// propose commits op with msg and waits until this head applied it,
	// returning the FSM's answer. Errors as Head.apply's.
	propose(ctx context.Context, op fsm.Op, msg proto.Message) (any, error)
	// term returns the current Raft term: the scheduler's seed and the
	// fencing term of the attempts a plan opens.
	term() uint64
}

// raftProposer proposes through the head's Raft node (Head.apply).
type raftProposer struct{ h *Head }

var _ proposer = raftProposer{}

func (p raftProposer) propose(ctx context.Context, op fsm.Op, msg proto.Message) (any, error) {
	res, _, err := p.h.apply(ctx, op, msg)
	return res, err
}

func (p raftProposer) term() uint64 { return p.h.node.Raft().CurrentTerm() }

// apply proposes one command to Raft and waits until this head has applied
// it. It returns the FSM's answer and the entry's index. Errors: NotLeader
// when this head does not lead; Unavailable when leadership was lost while
// the entry was in flight (it may or may not be committed: idempotent
// retries resolve that); the FSM's own *errs.Error.
func (h *Head) apply(ctx context.Context, op fsm.Op, msg proto.Message) (any, uint64, error) {
	b, err := fsm.Encode(op, msg)
	if err != nil {
		return nil, 0, errs.New(errs.Internal, "encode %v: %v", op, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	start := time.Now() // Raft's commit latency: the process's time, not the head's clock
	fut := h.node.Raft().Apply(b, h.cfg.ApplyTimeout)
	if err := h.node.Await(ctx, fut); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Gone before Raft answered: the entry may or may not commit.
			return nil, 0, &errs.Error{Class: errs.Unavailable, Message: "head " + h.cfg.NodeID +
				": stopped waiting for the commit (" + err.Error() + "); the write may or may not be committed: retry it (submissions are idempotent by graph id)"}
		}
		return nil, 0, h.raftError(err)
	}
	h.metrics.applySeconds.Observe(time.Since(start).Seconds())
	if e, ok := fut.Response().(error); ok && e != nil {
		return nil, fut.Index(), e
	}
	return fut.Response(), fut.Index(), nil
}

// raftError turns hashicorp/raft's errors into the error catalog.
func (h *Head) raftError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		return h.notLeader()
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return &errs.Error{Class: errs.Unavailable, Message: "head " + h.cfg.NodeID +
			": leadership lost while committing; the write may or may not be committed: retry it (submissions are idempotent by graph id)"}
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return &errs.Error{Class: errs.Unavailable, Message: "head " + h.cfg.NodeID + ": raft is overloaded (enqueue timed out); retry"}
	case errors.Is(err, raft.ErrRaftShutdown):
		return &errs.Error{Class: errs.Unavailable, Message: "head " + h.cfg.NodeID + " is shutting down; use another head"}
	}
	return errs.New(errs.Unavailable, "head %s: raft: %v", h.cfg.NodeID, err)
}

// notLeader is the NotLeader error naming the leader this head knows of.
func (h *Head) notLeader() error {
	id, addr := h.leaderGRPC()
	msg := "head " + h.cfg.NodeID + " is not the leader"
	switch {
	case id == "":
		msg += " and knows no leader (election in progress?); retry shortly"
	case id == h.cfg.NodeID:
		// Raft elected this head, and its leader loop has not yet caught
		// up with the log (the barrier every new leader waits for).
		msg = "head " + h.cfg.NodeID + " was just elected and is not leading yet (it is catching up with the log); retry shortly"
	default:
		msg += "; the leader is " + id + " at " + addr
	}
	return &errs.Error{Class: errs.NotLeader, Message: msg, LeaderID: id, LeaderAddr: addr}
}

// graphLocks serializes submissions of the same graph id on the leader so
// the chunks of two retries never interleave; submissions of different ids
// never wait for each other.
type graphLocks struct {
	mu   sync.Mutex
	busy map[string]chan struct{} // closed when the holder unlocks
}

func newGraphLocks() *graphLocks { return &graphLocks{busy: map[string]chan struct{}{}} }

// lock waits until no other submission of id is in flight, or ctx ends.
func (l *graphLocks) lock(ctx context.Context, id string) (func(), error) {
	for {
		l.mu.Lock()
		held, ok := l.busy[id]
		if !ok {
			done := make(chan struct{})
			l.busy[id] = done
			l.mu.Unlock()
			return func() {
				l.mu.Lock()
				delete(l.busy, id)
				l.mu.Unlock()
				close(done)
			}, nil
		}
		l.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
