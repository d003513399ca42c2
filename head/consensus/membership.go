package consensus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/megaflow/megaflow/internal/errs"
)

// AddVoter makes id a voter at addr ("ip:port"). It is idempotent: nothing
// is proposed when id is already a voter at addr. When id is present with
// another address (a head restarted elsewhere), its address is replaced; a
// non-voter is promoted. Only the leader can change the configuration:
// elsewhere it returns an error of class errs.NotLeader (with LeaderID set;
// LeaderAddr, the gRPC address, is for the caller to fill from gossip) that
// also wraps raft.ErrNotLeader. It returns once the change is committed, or
// when ctx ends (the change may still commit). The leader's membership
// reconciler calls it, from its own goroutine, for heads that gossip shows
// alive.
func (n *Node) AddVoter(ctx context.Context, id, addr string) error {
	if id == "" || addr == "" {
		return fmt.Errorf("consensus: add voter %q at %q: %w", id, addr,
			errs.New(errs.InvalidArgument, "empty server id or address"))
	}
	sid, saddr := raft.ServerID(id), raft.ServerAddress(addr)
	_, err := n.changeConfig(ctx, "add voter "+id, func(c raft.Configuration) bool {
		for _, s := range c.Servers {
			if s.ID == sid {
				return s.Address != saddr || s.Suffrage != raft.Voter
			}
		}
		return true
	}, func(timeout time.Duration) raft.IndexFuture {
		return n.raft.AddVoter(sid, saddr, 0, timeout)
	})
	return err
}

// RemoveServer removes id from the configuration and returns the log index
// of the change. It is idempotent: when id is not a member it proposes
// nothing and returns 0. Removing the
// leader itself makes it step down once the change commits (and, as
// hashicorp/raft's ShutdownOnRemove is on, a removed node shuts its Raft
// down). Errors and ctx are as for AddVoter. The head's RemoveHead API calls
// it on the leader for heads that are gone for good.
func (n *Node) RemoveServer(ctx context.Context, id string) (uint64, error) {
	sid := raft.ServerID(id)
	return n.changeConfig(ctx, "remove server "+id, func(c raft.Configuration) bool {
		return slices.ContainsFunc(c.Servers, func(s raft.Server) bool { return s.ID == sid })
	}, func(timeout time.Duration) raft.IndexFuture {
		return n.raft.RemoveServer(sid, 0, timeout)
	})
}

// changeConfig reads the latest configuration, asks needed whether a change
// is required and, if so, proposes it and waits for it to commit. The
// proposal is unconditional (prevIndex 0): raft v1.8.0's GetConfiguration
// reports no index to condition it on. That is harmless here: raft applies
// configuration changes one at a time, and both changes are idempotent, so
// a concurrent caller can at worst cause a redundant configuration entry.
func (n *Node) changeConfig(ctx context.Context, what string, needed func(raft.Configuration) bool,
	propose func(timeout time.Duration) raft.IndexFuture) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("consensus: %s: %w", what, err)
	}
	if !n.IsLeader() {
		return 0, n.wrapErr(what, raft.ErrNotLeader)
	}
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return 0, n.wrapErr(what, err)
	}
	if !needed(cf.Configuration()) {
		return 0, nil
	}
	var timeout time.Duration // 0: raft waits for its apply queue without limit
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	f := propose(timeout)
	if err := waitFuture(ctx, f); err != nil {
		return 0, n.wrapErr(what, err)
	}
	n.log.Info("raft configuration changed", "change", what, "index", f.Index())
	return f.Index(), nil
}

// Servers returns the latest configuration (committed or not) as this node
// knows it, sorted by ID. Any head may call it, from any goroutine.
func (n *Node) Servers() ([]raft.Server, error) {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, n.wrapErr("servers", err)
	}
	servers := slices.Clone(cf.Configuration().Servers)
	slices.SortFunc(servers, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return servers, nil
}

// Stats is a point-in-time view of a node's Raft state, for the head's
// status API, metrics and tests. The indexes are Raft log indexes.
type Stats struct {
	// State is "Follower", "Candidate", "Leader" or "Shutdown"
	// (raft.RaftState's String).
	State string
	// Term is the current term.
	Term uint64
	// LastLogIndex is the last index in the log or the last snapshot,
	// whichever is later.
	LastLogIndex uint64
	// CommitIndex is the highest index known to be committed.
	CommitIndex uint64
	// AppliedIndex is the last index Raft handed to the FSM (the FSM may
	// still be applying it).
	AppliedIndex uint64
	// LastSnapshotIndex is the index the latest snapshot covers (0: none).
	LastSnapshotIndex uint64
	// LeaderCommitIndex is the highest commit index a leader has sent this
	// node (in an AppendEntries) since New: everything up to it is
	// committed. 0 until the first such request, even on a node restarted
	// with a long log: unlike CommitIndex it never shows what this node
	// only had before it restarted, and unlike CommitIndex it is not capped
	// at the last entry received while the node catches up. On the leader
	// it stays what earlier leaders sent (leaders send it, not receive it).
	LeaderCommitIndex uint64
	// LeaderID and LeaderAddr (Raft address) name the current leader; both
	// are empty when no leader is known.
	LeaderID   string
	LeaderAddr string
}

// Stats returns the node's current Stats. Any goroutine may call it.
func (n *Node) Stats() Stats {
	addr, id := n.Leader()
	s := Stats{
		State:        n.raft.State().String(),
		Term:         n.raft.CurrentTerm(),
		LastLogIndex: n.raft.LastIndex(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.raft.AppliedIndex(),
		LeaderID:     id,
		LeaderAddr:   addr,

		LeaderCommitIndex: n.watch.seen.Load(),
	}
	// raft has no typed getter for the snapshot index; Stats() reads it from
	// memory (and also asks the main loop for the configuration).
	s.LastSnapshotIndex, _ = strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
	return s
}

// wrapErr classifies raft's errors for callers: not leader as
// errs.NotLeader (with the leader's id), leadership lost and shutdown as
// errs.Unavailable. The raft error stays in the chain for errors.Is.
func (n *Node) wrapErr(what string, err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		addr, id := n.Leader()
		e := errs.New(errs.NotLeader, "%s is not the raft leader (leader: %q at %q)", n.cfg.NodeID, id, addr)
		e.LeaderID = id
		return fmt.Errorf("consensus: %s: %w: %w", what, e, err)
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown),
		errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("consensus: %s: %w: %w", what, errs.New(errs.Unavailable, "%v", err), err)
	}
	return fmt.Errorf("consensus: %s: %w", what, err)
}

// waitFuture waits for f or ctx. Raft answers every future, at the latest
// when it shuts down, so the goroutine that waits on it always ends.
func waitFuture(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
