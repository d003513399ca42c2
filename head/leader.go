package head

import (
	"context"
	"time"

	"github.com/megaflow/megaflow/head/fsm"
)

// leaderLoop runs while this head leads: after a Raft barrier (so the table
// holds every committed entry) it keeps the Raft configuration in step with
// the heads gossip sees, drops graph submissions that never finished and
// cancels graphs past their deadline. It
// returns when ctx ends, which runLeadership does on step-down.
func (h *Head) leaderLoop(ctx context.Context) {
	for {
		err := h.node.Await(ctx, h.node.Raft().Barrier(h.cfg.ApplyTimeout))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		h.logger.Warn("leader barrier failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	h.leaderMu.Lock()
	h.leaderDone = make(chan struct{})
	h.leaderMu.Unlock()
	defer func() {
		h.leaderMu.Lock()
		close(h.leaderDone)
		h.leaderDone = nil
		h.leaderMu.Unlock()
	}()
	h.sessions.reset()
	since := h.clock.Now()
	h.leaderMu.Lock()
	h.leaderStart = since
	h.leaderMu.Unlock()
	h.leaderReady.Store(true)
	defer h.leaderReady.Store(false)
	h.logger.Info("leadership established", "term", h.node.Raft().CurrentTerm(), "applied", h.fsm.AppliedIndex())

	schedDone := make(chan struct{})
	go func() {
		defer close(schedDone)
		h.scheduleLoop(ctx)
	}()
	defer func() { <-schedDone }()
	retentionDone := make(chan struct{})
	go func() {
		defer close(retentionDone)
		h.retentionLoop(ctx)
	}()
	defer func() { <-retentionDone }()
	archiveDone := make(chan struct{})
	go func() {
		defer close(archiveDone)
		h.archiveLoop(ctx)
	}()
	defer func() { <-archiveDone }()
	leaseDone := make(chan struct{})
	go func() {
		defer close(leaseDone)
		h.leaseGossip(ctx)
	}()
	defer func() { <-leaseDone }()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		h.ensureClusterID(ctx)
		h.ensureRules(ctx)
		h.reconcileHeads(ctx)
		h.sweepStaged(ctx)
		h.checkWorkers(ctx, since)
		h.enforceDeadlines(ctx)
		select {
		case <-ctx.Done():
			h.logger.Info("leadership lost")
			return
		case <-h.leaderKick:
		case <-tick.C:
		}
	}
}

// reconcileHeads adds every head that gossip sees alive and Raft does not
// know (or knows at another address) as a voter. It never removes a head:
// that takes an operator's RemoveHead.
func (h *Head) reconcileHeads(ctx context.Context) {
	servers, err := h.node.Servers()
	if err != nil {
		return
	}
	known := make(map[string]string, len(servers))
	for _, s := range servers {
		known[string(s.ID)] = string(s.Address)
	}
	for _, p := range h.aliveHeads() {
		if addr, ok := known[p.ID]; ok && addr == p.Addr {
			continue
		}
		if err := h.node.AddVoter(ctx, p.ID, p.Addr); err != nil {
			h.logger.Warn("adding head as voter failed", "peer", p.ID, "addr", p.Addr, "err", err)
			continue
		}
		h.logger.Info("added head as voter", "peer", p.ID, "addr", p.Addr)
	}
}

// sweepStaged runs on the leader, from the leader loop: it proposes
// staleStaged, which drops the chunks of graph submissions older than
// StagedTTL that never received their last chunk (a client or leader died
// mid-way). A failure is logged; the next tick tries again.
func (h *Head) sweepStaged(ctx context.Context) {
	cmd := staleStaged(h.fsm.View(), h.clock.Now(), h.cfg.StagedTTL)
	if cmd == nil {
		return
	}
	if _, err := h.prop.propose(ctx, fsm.OpDropStaged, cmd); err != nil {
		h.logger.Warn("dropping stale staged graphs failed", "graphs", len(cmd.GraphIds), "err", err)
	}
}
