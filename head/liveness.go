package head

import (
	"context"
	"time"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/gossip"
	"github.com/megaflow/megaflow/internal/wire"
)

// leaderLost returns a channel closed when this head's current leadership
// ends (already closed when it does not lead).
func (h *Head) leaderLost() <-chan struct{} {
	h.leaderMu.Lock()
	defer h.leaderMu.Unlock()
	if h.leaderDone == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return h.leaderDone
}

// checkWorkers runs on the leader: a worker the table holds ALIVE is
// declared down when it has had no stream to this leader for WorkerGrace,
// or for GossipDeadGrace while gossip says it is dead (both counted from
// its last stream, or from when this head became leader). A clean stop
// (gossip "left") gets the full grace, so that a worker restarted within it
// takes its containers over. Gossip and missed streams are hints; the
// verdict is a command in the log, and its attempts are re-queued by it.
func (h *Head) checkWorkers(ctx context.Context, since time.Time) {
	now := time.Now()
	dead := map[string]bool{}
	for _, m := range h.gossip.Members() {
		// A worker that left said goodbye (a clean stop, often a restart):
		// its containers keep running for it to take over, so it gets the
		// stream grace like a dropped stream. A dead one crashed, or its
		// host is too busy to answer probes: its stream decides.
		if m.Meta.Role == gossip.RoleWorker && m.Status == gossip.StatusDead {
			dead[m.Meta.NodeID] = true
		}
	}
	for _, w := range h.fsm.View().Workers() {
		if w.Status != wire.WorkerStatus_WORKER_STATUS_ALIVE || h.sessions.connected(w.Info.Id) {
			continue
		}
		ended, ok := h.sessions.since(w.Info.Id)
		if !ok || ended.Before(since) {
			ended = since
		}
		away := now.Sub(ended)
		var reason string
		switch {
		case away >= h.cfg.WorkerGrace:
			reason = "no stream to the leader for " + h.cfg.WorkerGrace.String()
		case dead[w.Info.Id] && away >= h.cfg.GossipDeadGrace:
			reason = "gossip: dead, and no stream to the leader for " + away.Round(time.Millisecond).String()
		default:
			continue
		}
		cmd := &wire.WorkerDownCommand{WorkerId: w.Info.Id, Reason: reason, UnixNanos: now.UnixNano()}
		if _, _, err := h.apply(ctx, fsm.OpWorkerDown, cmd); err != nil {
			h.logger.Warn("declaring worker down failed", "worker", w.Info.Id, "err", err)
			continue
		}
		h.logger.Info("worker declared down; its attempts are re-queued", "worker", w.Info.Id, "reason", reason)
	}
}
