package consensus

import (
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// commitWatch sits between the transport and Raft: it hands Raft every
// inbound RPC unchanged, one at a time and in order, and notes the highest
// LeaderCommitIndex of the AppendEntries requests among them. Raft itself
// does not say what a leader told it: a follower's commit index is 0 after
// a restart until the first AppendEntries that carries entries or the
// leader's commit index is processed (hashicorp/raft restores a snapshot
// without a commit index, and its heartbeats carry none), and while it
// catches up it is capped at the last entry received. A head that compared
// its applied index with Raft's commit index could therefore call itself
// caught up before it had heard what the leader committed (the soak's
// /readyz at 2.7 s with the commit index at the kill applied at 10.0 s).
// Heartbeats take the transport's fast path and never come through here;
// they carry no commit index anyway.
type commitWatch struct {
	raft.Transport
	out  chan raft.RPC
	seen atomic.Uint64 // highest LeaderCommitIndex received since New
}

// commitWatchPreVote is a commitWatch over a transport that supports
// pre-vote: Raft checks the transport it is given for raft.WithPreVote, so
// the wrapper offers it exactly when the wrapped transport does.
type commitWatchPreVote struct {
	*commitWatch
	pv raft.WithPreVote
}

// RequestPreVote forwards to the wrapped transport.
func (c commitWatchPreVote) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return c.pv.RequestPreVote(id, target, args, resp)
}

// newCommitWatch wraps t. The returned transport is what Raft is given;
// run must be started (and stopped through stop) for RPCs to reach Raft.
func newCommitWatch(t raft.Transport) (*commitWatch, raft.Transport) {
	w := &commitWatch{Transport: t, out: make(chan raft.RPC)}
	if pv, ok := t.(raft.WithPreVote); ok {
		return w, commitWatchPreVote{commitWatch: w, pv: pv}
	}
	return w, w
}

// Consumer returns the channel Raft reads its RPCs from.
func (w *commitWatch) Consumer() <-chan raft.RPC { return w.out }

// Close closes the wrapped transport when it can be closed (raft.WithClose),
// as Raft does with its transport when it shuts down.
func (w *commitWatch) Close() error {
	if c, ok := w.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// run moves RPCs from the wrapped transport to Raft until stop is closed.
// An RPC in hand when stop closes is answered with
// raft.ErrTransportShutdown, so that its sender does not wait out its
// timeout (an in-memory transport's peers would wait 10 s).
func (w *commitWatch) run(stop <-chan struct{}) {
	in := w.Transport.Consumer()
	for {
		select {
		case rpc := <-in:
			if req, ok := rpc.Command.(*raft.AppendEntriesRequest); ok {
				w.observe(req.LeaderCommitIndex)
			}
			select {
			case w.out <- rpc:
			case <-stop:
				rpc.Respond(EmptyResponse(rpc.Command), raft.ErrTransportShutdown)
				return
			}
		case <-stop:
			return
		}
	}
}

// observe raises seen to idx.
func (w *commitWatch) observe(idx uint64) {
	for {
		cur := w.seen.Load()
		if idx <= cur || w.seen.CompareAndSwap(cur, idx) {
			return
		}
	}
}

// EmptyResponse returns a zero response of the type that answers the Raft
// RPC cmd (nil for a command it does not know), for refusing an RPC with
// an error: an in-memory transport's pipeline converts the response of an
// AppendEntries before it looks at the error.
func EmptyResponse(cmd any) any {
	switch cmd.(type) {
	case *raft.AppendEntriesRequest:
		return &raft.AppendEntriesResponse{}
	case *raft.RequestVoteRequest:
		return &raft.RequestVoteResponse{}
	case *raft.RequestPreVoteRequest:
		return &raft.RequestPreVoteResponse{}
	case *raft.InstallSnapshotRequest:
		return &raft.InstallSnapshotResponse{}
	case *raft.TimeoutNowRequest:
		return &raft.TimeoutNowResponse{}
	}
	return nil
}
