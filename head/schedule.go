package head

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
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
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		changed := h.fsm.Changed()
		// The pause paces the round's own work, so it is measured on the
		// process's time; next is the head's clock's.
		start := time.Now()
		next := h.scheduleOnce(ctx)
		pause := max(h.cfg.ScheduleInterval, 2*time.Since(start))
		wake.Reset(time.Hour)
		if !next.IsZero() {
			wake.Reset(next.Sub(h.clock.Now()))
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
		case <-wake.C:
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
// nothing. Tasks that use a service without a ready endpoint are not
// placed; their reason says which service they wait for (serviceWait).
// Tasks waiting out a retry backoff (not_before in the future) are
// left out; scheduleOnce returns the earliest such time, when the loop
// runs a round again (zero: none).
func (h *Head) scheduleOnce(ctx context.Context) (wake time.Time) {
	view := h.fsm.View()
	// The seed is fixed for a term: the same table gives the same plan, and
	// queueing reasons do not flap between rounds.
	in := scheduler.Input{Seed: h.node.Raft().CurrentTerm(), Policy: h.cfg.Scheduler, Running: map[string]int{}}
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
		sw := scheduler.Worker{
			ID: w.ID(), Capacity: w.Capacity(), Allocated: w.Allocated, Labels: w.Info.GetLabels(),
			Images: w.Info.GetImages(), Runtime: w.Info.GetRuntime(), StartsInFlight: starting, MaxConcurrentStarts: int(w.Info.GetMaxConcurrentStarts()),
		}
		for _, d := range w.Info.GetGpus() {
			if d.GetUnhealthy() != "" {
				continue // no new work until it is healthy again
			}
			sw.GPUs = append(sw.GPUs, scheduler.GPU{UUID: d.GetUuid(), Model: d.GetModel(), MemoryBytes: d.GetMemoryBytes(),
				InUse: w.GPUHolder(d.GetUuid()) != "", NVLinkPeers: d.GetNvlinkPeers()})
		}
		in.Workers = append(in.Workers, sw)
	}
	if len(in.Workers) == 0 {
		return wake // nowhere to place; reasons are refreshed once a worker connects
	}
	queued := map[string]*state.Task{}
	waiting := map[string]string{} // tasks waiting for a service -> new reason
	perQueue := map[string]int{}
	now := h.clock.Now().UnixNano()
	for t := range view.Queued() {
		if t.ActiveAttempt() != nil {
			continue // its gang restarts: placed again once the attempt stopped
		}
		if nb := t.NotBeforeUnixNanos; nb > now {
			if wake.IsZero() || nb < wake.UnixNano() {
				wake = time.Unix(0, nb)
			}
			continue
		}
		if perQueue[t.Queue()]++; perQueue[t.Queue()] > maxQueuedPerQueue {
			continue
		}
		if r := serviceWait(view, t); r != "" {
			if t.Reason != r {
				waiting[t.ID] = r
			}
			continue
		}
		queued[t.ID] = t
		res := t.Spec.GetResources()
		in.Tasks = append(in.Tasks, scheduler.Task{
			ID: t.ID, Tenant: t.Tenant, Queue: t.Queue(), Priority: t.Priority, QueueSeq: t.QueueSeq,
			Resources: state.ResourcesOf(res), GPUModel: res.GetGpuModel(), GPUMemoryBytes: res.GetGpuMemoryBytes(),
			NodeSelector: t.Spec.GetNodeSelector(), Image: t.Spec.GetImage(), Session: t.Spec.GetSession(),
			Runtime: t.Spec.GetRuntime(), Gang: t.Spec.GetGang(),
		})
	}
	in.Tasks = holdIncompleteGangs(view, in.Tasks, queued, waiting, now)
	if len(in.Tasks) == 0 && len(waiting) == 0 {
		return wake
	}
	var plan scheduler.Plan
	if len(in.Tasks) > 0 {
		scheduler.PinSessions(in.Tasks, sessionAttempts(view, queued))
		in.Tasks = h.holdForReconnect(view, in.Tasks, queued, waiting)
		in.Quotas, in.Cluster = schedulerQuotas(view)
		if len(in.Tasks) > 0 {
			plan = scheduler.Place(in)
		}
	}
	cmd := &wire.PlanCommand{LeaderTerm: h.node.Raft().CurrentTerm(), UnixNanos: h.clock.Now().UnixNano()}
	if len(waiting) > 0 {
		cmd.Unplaced = waiting
	}
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
	if len(cmd.Attempts) > 0 || len(cmd.Unplaced) > 0 {
		if _, _, err := h.apply(ctx, fsm.OpPlan, cmd); err != nil {
			if ctx.Err() == nil {
				h.logger.Warn("committing a plan failed", "placements", len(cmd.Attempts), "err", err)
			}
			return wake
		}
	}
	h.failUnplaceable(ctx, queued, plan.Unplaced)
	return wake
}

// failUnplaceable fails the tasks that no worker could run (an infeasible
// reason) and that have been QUEUED longer than MaxQueueWait, with their
// reason, in one FailQueuedCommand. The FSM re-checks that each is still
// QUEUED with that reason. It does nothing when MaxQueueWait is 0.
func (h *Head) failUnplaceable(ctx context.Context, queued map[string]*state.Task, unplaced map[string]scheduler.Reason) {
	if h.cfg.MaxQueueWait <= 0 {
		return
	}
	now := h.clock.Now()
	cutoff := now.Add(-h.cfg.MaxQueueWait).UnixNano()
	cmd := &wire.FailQueuedCommand{QueuedBeforeUnixNanos: cutoff, UnixNanos: now.UnixNano()}
	for _, id := range slices.Sorted(maps.Keys(unplaced)) {
		if r := unplaced[id]; r.Infeasible() && queued[id].QueuedUnixNanos <= cutoff {
			cmd.TaskIds = append(cmd.TaskIds, id)
			cmd.Reasons = append(cmd.Reasons, r.String())
		}
	}
	if len(cmd.TaskIds) == 0 {
		return
	}
	if _, _, err := h.apply(ctx, fsm.OpFailQueued, cmd); err != nil && ctx.Err() == nil {
		h.logger.Warn("failing unplaceable tasks failed", "tasks", len(cmd.TaskIds), "err", err)
	}
}

// schedulerQuotas adapts the table's quotas and the current usage (tasks
// ASSIGNED or RUNNING, per tenant and in all) into the scheduler's input.
// Usage is computed only when some quota is set.
func schedulerQuotas(view *state.View) (map[string]scheduler.Quota, scheduler.Quota) {
	tenants, cluster := view.Quotas()
	if len(tenants) == 0 && cluster == nil {
		return nil, scheduler.Quota{}
	}
	usage, total := view.Usage()
	out := make(map[string]scheduler.Quota, len(tenants))
	for _, q := range tenants {
		u := usage[q.Tenant]
		out[q.Tenant] = scheduler.Quota{MaxRunning: int(q.MaxRunning), Max: q.Max, Running: int(u.Running), Used: u.Used}
	}
	var c scheduler.Quota
	if cluster != nil {
		c = scheduler.Quota{MaxRunning: int(cluster.MaxRunning), Max: cluster.Max, Running: int(total.Running), Used: total.Used}
	}
	return out, c
}

// sessionAttempts returns, for the graphs of the queued tasks that name a
// session, the workers their session's earlier attempts ran on, so that a
// session's tasks follow its container (persistent mode).
func sessionAttempts(view *state.View, queued map[string]*state.Task) []scheduler.SessionAttempt {
	var out []scheduler.SessionAttempt
	seen := map[string]bool{}
	for _, t := range queued {
		if t.Spec.GetSession() == "" || seen[t.GraphID] {
			continue
		}
		seen[t.GraphID] = true
		for _, o := range view.TasksOfGraph(t.GraphID) {
			if o.Spec.GetSession() == "" {
				continue
			}
			for _, a := range o.Attempts {
				out = append(out, scheduler.SessionAttempt{Graph: o.GraphID, Session: o.Spec.GetSession(),
					WorkerID: a.WorkerID, Order: a.AssignUnixNanos})
			}
		}
	}
	return out
}

// holdForReconnect removes from tasks those pinned to the worker of their
// session (PinnedWorker) when that worker is still ALIVE in the table but
// has no stream to this leader right now: it is reconnecting (after a
// leader change, or a dropped stream), and the session's container is
// still there. Placing such a task elsewhere would split the session; it
// waits, with a reason, until the worker is back or is declared down (and
// its sessions with it). Changed reasons go into waiting.
func (h *Head) holdForReconnect(view *state.View, tasks []scheduler.Task, queued map[string]*state.Task, waiting map[string]string) []scheduler.Task {
	kept := tasks[:0]
	for _, t := range tasks {
		if t.PinnedWorker != "" && !h.sessions.connected(t.PinnedWorker) {
			if w := view.Worker(t.PinnedWorker); w != nil && w.Status == wire.WorkerStatus_WORKER_STATUS_ALIVE {
				r := fmt.Sprintf("waiting for session %s's worker %s to reconnect", t.Session, t.PinnedWorker)
				if queued[t.ID].Reason != r {
					waiting[t.ID] = r
				}
				continue
			}
		}
		kept = append(kept, t)
	}
	return kept
}

// holdIncompleteGangs removes from tasks the tasks of every gang that is
// not whole in it: a gang is placed all at once, so it waits until each of
// its tasks is QUEUED, past any retry backoff, with no attempt still
// stopping. Their reason names the first task of the gang that is not
// ready and why; changed reasons go into waiting.
func holdIncompleteGangs(view *state.View, tasks []scheduler.Task, queued map[string]*state.Task, waiting map[string]string, now int64) []scheduler.Task {
	type key struct{ graph, gang string }
	present := map[key]int{}
	for _, t := range tasks {
		if t.Gang != "" {
			present[key{scheduler.GraphOf(t.ID), t.Gang}]++
		}
	}
	if len(present) == 0 {
		return tasks
	}
	why := map[key]string{} // gangs held -> reason
	for k, n := range present {
		members := view.GangMembers(k.graph, k.gang)
		if n == len(members) {
			continue
		}
		verb := "are"
		if n == 1 {
			verb = "is"
		}
		r := fmt.Sprintf("waiting for its gang %q: %d of its %d tasks %s ready to start", k.gang, n, len(members), verb)
		for _, m := range members {
			if _, ok := queued[m.ID]; ok {
				continue
			}
			switch a := m.ActiveAttempt(); {
			case m.State == wire.TaskState_TASK_STATE_QUEUED && a != nil:
				r += fmt.Sprintf(" (task %q: attempt %d on worker %s is being stopped)", m.Name(), a.Number, a.WorkerID)
			case m.State == wire.TaskState_TASK_STATE_QUEUED && m.NotBeforeUnixNanos > now:
				r += fmt.Sprintf(" (task %q waits out its retry backoff)", m.Name())
			case waiting[m.ID] != "":
				r += fmt.Sprintf(" (task %q is %s)", m.Name(), waiting[m.ID])
			case m.State == wire.TaskState_TASK_STATE_QUEUED && m.Reason != "" && !strings.HasPrefix(m.Reason, "waiting for its gang"):
				r += fmt.Sprintf(" (task %q is %s)", m.Name(), m.Reason)
			case m.State == wire.TaskState_TASK_STATE_PENDING:
				r += fmt.Sprintf(" (task %q waits for its dependencies)", m.Name())
			default:
				r += fmt.Sprintf(" (task %q is %s)", m.Name(), strings.TrimPrefix(m.State.String(), "TASK_STATE_"))
			}
			break
		}
		why[k] = r
	}
	kept := tasks[:0]
	for _, t := range tasks {
		if t.Gang != "" {
			if r, held := why[key{scheduler.GraphOf(t.ID), t.Gang}]; held {
				if queued[t.ID].Reason != r {
					waiting[t.ID] = r
				}
				continue
			}
		}
		kept = append(kept, t)
	}
	return kept
}

// serviceWait returns why task t may not be placed yet: the first service
// it names in uses_services that has no ready endpoint ("waiting for
// service \"model/qwen-7b\" to have a ready endpoint"), or "" when every
// one has. A task using services is placed only once each has at least
// one; its assignment then carries their endpoints (taskEnv). Services are
// not depends_on parents: a service never ends to unblock anyone.
func serviceWait(view *state.View, t *state.Task) string {
	for _, name := range t.Spec.GetUsesServices() {
		if len(view.ServiceEndpoints(name)) == 0 {
			return fmt.Sprintf("waiting for service %q to have a ready endpoint", name)
		}
	}
	return ""
}
