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
// changes and at least every second. Rounds are spaced by at least
// ScheduleInterval and by twice the last round's duration, so scheduling
// never takes more than about a third of a core however large the queue.
// It returns when ctx ends.
func (h *Head) scheduleLoop(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		changed := h.fsm.Changed()
		start := time.Now()
		h.scheduleOnce(ctx)
		pause := max(h.cfg.ScheduleInterval, 2*time.Since(start))
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

// maxQueuedPerQueue bounds how many tasks of one queue a round considers,
// in queue order: a round can place at most what the workers have room
// for, so looking further down a long queue only costs time.
const maxQueuedPerQueue = 4096

// scheduleOnce builds the scheduler's input from the table (alive workers
// with a live stream, every QUEUED task), places, and commits the plan in
// one command. The FSM re-checks every placement against the newest table.
// A round that places nothing and changes no queueing reason commits
// nothing.
func (h *Head) scheduleOnce(ctx context.Context) {
	view := h.fsm.View()
	// The seed is fixed for a term: the same table gives the same plan, and
	// queueing reasons do not flap between rounds.
	in := scheduler.Input{Seed: h.node.Raft().CurrentTerm(), Policy: scheduler.DefaultPolicy(), Running: map[string]int{}}
	for _, w := range view.AliveWorkers() {
		if !h.sessions.connected(w.ID()) {
			continue
		}
		starting := 0
		for _, t := range view.AssignedTo(w.ID()) {
			if a := t.ActiveAttempt(); a != nil && a.State == wire.TaskState_TASK_STATE_ASSIGNED {
				starting++
			}
			in.Running[t.Queue()]++
		}
		in.Workers = append(in.Workers, scheduler.Worker{
			ID: w.ID(), Capacity: w.Capacity(), Allocated: w.Allocated, Labels: w.Info.GetLabels(),
			Images: w.Info.GetImages(), StartsInFlight: starting, MaxConcurrentStarts: int(w.Info.GetMaxConcurrentStarts()),
		})
	}
	if len(in.Workers) == 0 {
		return // nowhere to place; reasons are refreshed once a worker connects
	}
	queued := map[string]*state.Task{}
	perQueue := map[string]int{}
	for t := range view.Queued() {
		if perQueue[t.Queue()]++; perQueue[t.Queue()] > maxQueuedPerQueue {
			continue
		}
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
