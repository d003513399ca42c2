package head

import (
	"context"
	"time"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/scheduler"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/wire"
)

// scheduleLoop runs on the leader: a scheduling round whenever the table
// changes (batched over ScheduleInterval) and at least every second. It
// returns when ctx ends.
func (h *Head) scheduleLoop(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var round uint64
	for {
		changed := h.fsm.Changed()
		round++
		h.scheduleOnce(ctx, round)
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

// scheduleOnce builds the scheduler's input from the table (alive workers
// with a live stream, every QUEUED task), places, and commits the plan in
// one command. The FSM re-checks every placement against the newest table.
// A round that places nothing and changes no queueing reason commits
// nothing.
func (h *Head) scheduleOnce(ctx context.Context, round uint64) {
	view := h.fsm.View()
	in := scheduler.Input{Seed: round}
	for _, w := range view.AliveWorkers() {
		if !h.sessions.connected(w.ID()) {
			continue
		}
		starting := 0
		for _, t := range view.AssignedTo(w.ID()) {
			if a := t.ActiveAttempt(); a != nil && a.State == wire.TaskState_TASK_STATE_ASSIGNED {
				starting++
			}
		}
		in.Workers = append(in.Workers, scheduler.Worker{
			ID: w.ID(), Capacity: w.Capacity(), Allocated: w.Allocated, Labels: w.Info.GetLabels(),
			Images: w.Info.GetImages(), StartsInFlight: starting, MaxConcurrentStarts: int(w.Info.GetMaxConcurrentStarts()),
		})
	}
	queued := map[string]*state.Task{}
	for t := range view.Queued() {
		queued[t.ID] = t
		res := t.Spec.GetResources()
		in.Tasks = append(in.Tasks, scheduler.Task{
			ID: t.ID, Tenant: t.Tenant, Queue: t.Queue(), Priority: t.Priority, QueueSeq: t.QueueSeq,
			Resources: state.ResourcesOf(res), GPUModel: res.GetGpuModel(), GPUMemoryBytes: res.GetGpuMemoryBytes(),
			NodeSelector: t.Spec.GetNodeSelector(), Image: t.Spec.GetImage(),
		})
	}
	if len(in.Tasks) == 0 {
		return
	}
	plan := scheduler.Place(in)
	cmd := &wire.PlanCommand{LeaderTerm: h.node.Raft().CurrentTerm(), UnixNanos: time.Now().UnixNano()}
	for _, p := range plan.Placements {
		t := queued[p.TaskID]
		cmd.Attempts = append(cmd.Attempts, &wire.PlannedAttempt{TaskId: p.TaskID, Attempt: uint32(len(t.Attempts)) + 1,
			WorkerId: p.WorkerID, GpuUuids: p.GPUUUIDs})
	}
	for id, r := range plan.Unplaced {
		if msg := r.String(); queued[id].Reason != msg {
			if cmd.Unplaced == nil {
				cmd.Unplaced = map[string]string{}
			}
			cmd.Unplaced[id] = msg
		}
	}
	if len(cmd.Attempts) == 0 && len(cmd.Unplaced) == 0 {
		return
	}
	if _, _, err := h.apply(ctx, fsm.OpPlan, cmd); err != nil && ctx.Err() == nil {
		h.logger.Warn("committing a plan failed", "placements", len(cmd.Attempts), "err", err)
	}
}
