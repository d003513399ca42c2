package head

import (
	"context"
	"time"

	"github.com/megaflow/megaflow/head/consensus"
	"github.com/megaflow/megaflow/internal/gossip"
)

// runMembership consumes gossip events for the life of the head: it
// bootstraps the Raft cluster once BootstrapExpect heads see each other,
// pokes the leader loop so it adds new heads as voters, and keeps the
// other heads' gossip addresses for the next start (gossip.SaveSeeds).
// Gossip is only a hint: what it triggers goes through Raft.
func (h *Head) runMembership(ctx context.Context) {
	bootstrapped := h.cfg.BootstrapExpect == 0 || h.node.HasExistingState()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	seeds := gossip.LoadSeeds(h.cfg.DataDir, h.gossip.LocalAddr())
	for {
		if !bootstrapped {
			bootstrapped = h.tryBootstrap()
		}
		seeds = h.gossip.SaveSeeds(h.cfg.DataDir, seeds)
		select {
		case <-ctx.Done():
			return
		case <-h.gossip.Events():
			select {
			case h.leaderKick <- struct{}{}:
			default:
			}
		case <-tick.C:
		}
	}
}

// aliveHeads returns the heads gossip sees alive, this one included, as
// consensus peers.
func (h *Head) aliveHeads() []consensus.Peer {
	var out []consensus.Peer
	for _, m := range h.gossip.Members() {
		if m.Meta.Role == gossip.RoleHead && m.Status == gossip.StatusAlive && m.Meta.RaftAddr != "" {
			out = append(out, consensus.Peer{ID: m.Meta.NodeID, Addr: m.Meta.RaftAddr})
		}
	}
	return out
}

// tryBootstrap bootstraps the cluster when enough heads are visible and no
// cluster exists yet. It reports whether there is nothing left to do.
func (h *Head) tryBootstrap() bool {
	if h.node.HasExistingState() {
		return true
	}
	if _, id := h.node.Leader(); id != "" {
		return true // a cluster exists and has a leader: wait to be added
	}
	servers, ok := consensus.BootstrapServers(h.cfg.NodeID, h.aliveHeads(), h.cfg.BootstrapExpect)
	if !ok {
		return false
	}
	if err := h.node.Bootstrap(servers); err != nil {
		h.logger.Warn("bootstrap failed", "err", err)
		return h.node.HasExistingState()
	}
	h.logger.Info("bootstrapped raft cluster", "servers", len(servers))
	return true
}
