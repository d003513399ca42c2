package head

import (
	"context"
	"time"
)

// scheduleLoop runs on the leader: a scheduling round whenever the table
// changes (batched over ScheduleInterval) and at least every second. It
// returns when ctx ends.
func (h *Head) scheduleLoop(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		changed := h.fsm.Changed()
		h.scheduleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.cfg.ScheduleInterval):
		}
	}
}

// scheduleOnce places queued tasks on workers with a live stream and
// commits the plan. Filled in with head/scheduler.
func (h *Head) scheduleOnce(ctx context.Context) {}
