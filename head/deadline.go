package head

import (
	"context"
	"fmt"
	"time"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/wire"
)

// pastDeadline returns the RUNNING graphs of view whose deadline_seconds
// from submission have passed at now, in id order. It is pure.
func pastDeadline(view *state.View, now time.Time) []*state.Graph {
	var out []*state.Graph
	for g := range view.GraphsInState(wire.GraphState_GRAPH_STATE_RUNNING) {
		if g.DeadlineSeconds <= 0 {
			continue
		}
		if now.UnixNano()-g.CreateUnixNanos > g.DeadlineSeconds*int64(time.Second) {
			out = append(out, g)
		}
	}
	return out
}

// deadlineCancels returns a CancelCommand for every RUNNING graph of view
// whose deadline has passed at now (pastDeadline), with the reason "graph
// deadline of N s passed", in id order. It is pure.
func deadlineCancels(view *state.View, now time.Time) []*wire.CancelCommand {
	var out []*wire.CancelCommand
	for _, g := range pastDeadline(view, now) {
		out = append(out, &wire.CancelCommand{GraphId: g.ID, UnixNanos: now.UnixNano(), ReasonCode: wire.ReasonCode_REASON_CODE_CANCELLED_DEADLINE,
			Reason: fmt.Sprintf("graph deadline of %d s passed", g.DeadlineSeconds)})
	}
	return out
}

// enforceDeadlines runs on the leader, from the leader loop about once a
// second: it proposes deadlineCancels, one CancelCommand each, and stops
// at the first that fails (the next tick tries again).
func (h *Head) enforceDeadlines(ctx context.Context) {
	for _, cmd := range deadlineCancels(h.fsm.View(), h.clock.Now()) {
		if _, err := h.prop.propose(ctx, fsm.OpCancel, cmd); err != nil {
			if ctx.Err() == nil {
				h.logger.Warn("cancelling a graph past its deadline failed", "graph", cmd.GraphId, "err", err)
			}
			return
		}
		h.logger.Info("cancelled a graph past its deadline", "graph", cmd.GraphId, "reason", cmd.Reason)
	}
}
