package head

import (
	"context"
	"time"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/lease"
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

// leaderSince returns when this head's current leadership began (zero
// when it does not lead).
func (h *Head) leaderSince() time.Time {
	h.leaderMu.Lock()
	defer h.leaderMu.Unlock()
	return h.leaderStart
}

// checkWorkers runs on the leader: a worker the table holds ALIVE is
// declared down once its lease has expired on this leader, that is when
// the leader has not heard from it (a message on its stream, a lease
// renewal through gossip) for Lease.Duration+Lease.Margin, counted from
// when this head became leader at the earliest (lease.HeadExpired). By
// then the worker has stopped its attempts itself (its view expires
// first), or its tasks' inits have. Gossip's verdicts are not used: a
// worker gossip calls dead may still run its attempts until its lease
// lapses, and one gossip calls alive but that renews nothing is as good as
// gone. The verdict is a command in the log, and its attempts are
// re-queued by it.
func (h *Head) checkWorkers(ctx context.Context, since time.Time) {
	for _, cmd := range lapsedWorkers(h.fsm.View(), h.sessions.renewedAt, h.cfg.Lease, since, h.clock.Now()) {
		if _, err := h.prop.propose(ctx, fsm.OpWorkerDown, cmd); err != nil {
			h.logger.Warn("declaring worker down failed", "worker", cmd.WorkerId, "err", err)
			continue
		}
		h.logger.Info("worker declared down; its attempts are re-queued", "worker", cmd.WorkerId, "reason", cmd.Reason)
	}
}

// leaseGossip serves the lease renewals workers send through gossip
// (lease.Renewal) while this head leads: each renews the worker's lease as
// a message on its stream would, and is answered with a lease.Ack to the
// sender's gossip member. The leader loop owns it; it returns when ctx
// ends.
func (h *Head) leaseGossip(ctx context.Context) {
	for {
		var msg []byte
		select {
		case <-ctx.Done():
			return
		case msg = <-h.leaseMsgs:
		}
		r, _, err := lease.Decode(msg)
		if err != nil || r == nil || r.Worker == "" || r.From == "" {
			continue
		}
		h.sessions.renew(r.Worker, h.clock.Now())
		ack := lease.EncodeAck(lease.Ack{Worker: r.Worker, ID: r.ID,
			LeaseMillis: h.cfg.Lease.Duration.Milliseconds(), MarginMillis: h.cfg.Lease.Margin.Milliseconds()})
		if err := h.gossip.SendTo(r.From, ack); err != nil {
			h.logger.Debug("lease ack through gossip failed", "worker", r.Worker, "err", err)
		}
	}
}

// onGossipMessage is the gossip member's Config.OnMessage: it queues a
// user message for leaseGossip, dropping it when the queue is full (the
// worker renews again a heartbeat later).
func (h *Head) onGossipMessage(b []byte) {
	select {
	case h.leaseMsgs <- b:
	default:
	}
}
