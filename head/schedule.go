package head

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/scheduler"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/wire"
)

// scheduleLoop runs on the leader: a scheduling round whenever the table
// changes and at least every second. A round starts at least
// ScheduleInterval and twice the last round's planning time after the
// last round ended, so scheduling never takes more than about a third of
// a core however large the queue. The wait for the plan's commit is not planning: it costs no
// CPU here, and pausing for it again would add a commit's latency to
// every placement (a slot freed by an exit waited one commit for the
// exit, one for the plan and two more of pause).
// It returns when ctx ends.
func (h *Head) scheduleLoop(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	pause := time.NewTimer(time.Hour)
	defer pause.Stop()
	full := true // the first round, and those of the tick and of a backoff's end
	for {
		changed := h.fsm.Changed()
		var next time.Time
		var planning time.Duration
		if view := h.fsm.View(); full || roomFor(view, h.sessions.connected, h.clock.Now()) {
			next, planning = h.scheduleOnce(ctx)
		} else if wake := nextBackoffEnd(view, h.clock.Now()); !wake.IsZero() {
			next = wake
		}
		full = false
		earliest := time.Now().Add(max(h.cfg.ScheduleInterval, 2*planning))
		wake.Reset(time.Hour)
		if !next.IsZero() {
			wake.Reset(next.Sub(h.clock.Now()))
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
			full = true
		case <-wake.C:
			full = true
		}
		// The spacing counts from the round's end: a change that comes
		// after a quiet spell is planned at once, and changes that come
		// while the spacing runs are planned together when it ends.
		if d := time.Until(earliest); d > 0 {
			pause.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-pause.C:
			}
		}
	}
}

// roomFor reports whether a round on view could place a task, or must
// give one its first queueing reason: some task waits past its backoff
// without a reason, or some connected worker has the CPU and the memory
// of the smallest waiting task free. False when every worker is full for
// every waiting task: the commands that freed room carried their own
// plans (eventsPlan), and a round now would place nothing and only read
// the queues. The loop then skips the rounds a change asks for; its tick
// (every second) and a backoff's end still run one, which refreshes the
// reasons and fails what waited too long.
func roomFor(view *state.View, connected func(string) bool, now time.Time) bool {
	nowNanos := now.UnixNano()
	minCPU, minMem := int64(-1), int64(-1)
	perQueue := map[string]int{}
	for t := range view.Queued() {
		if t.ActiveAttempt() != nil || t.NotBeforeUnixNanos > nowNanos {
			continue
		}
		// The tasks a round considers (planRound): those further down a
		// queue are placed only after these.
		if perQueue[t.Queue()]++; perQueue[t.Queue()] > maxQueuedPerQueue {
			continue
		}
		if t.Reason == "" {
			return true
		}
		r := state.ResourcesOf(t.Spec.GetResources())
		if minCPU < 0 || r.CPUMillis < minCPU {
			minCPU = r.CPUMillis
		}
		if minMem < 0 || r.MemoryBytes < minMem {
			minMem = r.MemoryBytes
		}
	}
	if minCPU < 0 {
		return false // nothing waits
	}
	for _, w := range view.AliveWorkers() {
		if !connected(w.ID()) {
			continue
		}
		c := w.Capacity()
		if c.CPUMillis-w.Allocated.CPUMillis >= minCPU && c.MemoryBytes-w.Allocated.MemoryBytes >= minMem {
			return true
		}
	}
	return false
}

// nextBackoffEnd returns the earliest end of a retry backoff after now
// among the tasks waiting in view; zero when none.
func nextBackoffEnd(view *state.View, now time.Time) time.Time {
	var wake time.Time
	nowNanos := now.UnixNano()
	for t := range view.Queued() {
		if nb := t.NotBeforeUnixNanos; nb > nowNanos && (wake.IsZero() || nb < wake.UnixNano()) {
			wake = time.Unix(0, nb)
		}
	}
	return wake
}

// behindReason is the queueing reason of a task a round does not consider
// because maxQueuedPerQueue tasks of its queue come before it.
var behindReason = fmt.Sprintf("waiting behind the first %d tasks of its queue", maxQueuedPerQueue)

// maxQueuedPerQueue bounds how many tasks of one queue a round considers,
// in queue order: a round can place at most what the workers have room
// for, so looking further down a long queue only costs time.
const maxQueuedPerQueue = 4096

// scheduleOnce runs one scheduling round (planRound) on the current
// table and commits its plan, then fails the tasks it found unplaceable
// for too long. A round that places nothing and changes no queueing reason
// commits nothing. It returns the earliest end of a retry backoff, when
// the loop runs a round again (zero: none), and how long planning the
// round took (on the process's time: it paces the round's own work, not
// the head's clock), without the commits' wait.
func (h *Head) scheduleOnce(ctx context.Context) (wake time.Time, planning time.Duration) {
	start := time.Now()
	r := planRound(roundInput{View: h.fsm.View(), Connected: h.sessions.connected, Term: h.prop.term(),
		Now: h.clock.Now(), Policy: h.cfg.Scheduler, MaxQueueWait: h.cfg.MaxQueueWait})
	planning = time.Since(start)
	if r.Plan != nil {
		// Stamped when proposed, after placement: attempts' assign times
		// (and the queue times measured from them) include the round.
		r.Plan.UnixNanos = h.clock.Now().UnixNano()
		h.planning.Store(true) // no command carries a plan meanwhile (submissionPlan, eventsPlan): it would place the same tasks
		_, err := h.prop.propose(ctx, fsm.OpPlan, r.Plan)
		h.planning.Store(false)
		if err != nil {
			if ctx.Err() == nil {
				h.logger.Warn("committing a plan failed", "placements", len(r.Plan.Attempts), "err", err)
			}
			return r.Wake, planning
		}
	}
	if r.Fail != nil {
		r.Fail.UnixNanos = h.clock.Now().UnixNano()
		if _, err := h.prop.propose(ctx, fsm.OpFailQueued, r.Fail); err != nil && ctx.Err() == nil {
			h.logger.Warn("failing unplaceable tasks failed", "tasks", len(r.Fail.TaskIds), "err", err)
		}
	}
	return r.Wake, planning
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
