package head

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/scheduler"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/artifact"
	"github.com/megaflow/megaflow/internal/lease"
	"github.com/megaflow/megaflow/internal/resources"
	"github.com/megaflow/megaflow/internal/wire"
)

// The leader's decisions, as pure functions of the table (a state.View),
// the time and what the leader alone knows (which workers have a stream to
// it, when it last heard from each). Each returns the commands to propose,
// or nil when there is nothing to commit; the loops in leader.go,
// schedule.go, liveness.go, deadline.go, retention.go, rules.go,
// clusterid.go and workers.go read the inputs, call these and propose what
// they return through a proposer (apply.go). Tests call them on tables
// built by applying commands to an FSM, with no Raft, socket or clock
// (leadercore_test.go), and run one iteration of each loop on a fake
// proposer (proposer_test.go).

// roundInput is what one scheduling round reads.
type roundInput struct {
	// View is the table the round plans from.
	View *state.View
	// Connected reports whether a worker has a stream to this leader:
	// only those are given new attempts.
	Connected func(workerID string) bool
	// Term is the leader's Raft term: the scheduler's seed (the same table
	// gives the same plan for a term) and the plan's fencing term.
	Term uint64
	// Now is the round's time: retry backoffs, gang readiness, and the
	// queue-wait cutoff are measured against it.
	Now time.Time
	// Policy is the placement policy (head.Config.Scheduler).
	Policy scheduler.Policy
	// MaxQueueWait is how long an unplaceable task may stay QUEUED before
	// it fails (head.Config.MaxQueueWait; 0: never).
	MaxQueueWait time.Duration
	// PerQueue, when positive, makes the round consider only the first
	// PerQueue tasks of each queue in queue order (state.View.QueuedFirst),
	// those in a retry backoff included, at a cost that does not grow with
	// the queues' length: the rounds of carried plans. 0: every queued
	// task is read (the loop's rounds: a backoff's end anywhere in a queue
	// sets Wake), maxQueuedPerQueue of each considered.
	PerQueue int
}

// round is what a scheduling round decided.
type round struct {
	// Plan places tasks and refreshes queueing reasons; nil when the round
	// changes nothing.
	Plan *wire.PlanCommand
	// Fail fails the tasks that no worker can run and that waited longer
	// than MaxQueueWait; nil when none. It is proposed after Plan commits.
	Fail *wire.FailQueuedCommand
	// Wake is the earliest time a task's retry backoff ends (zero: none),
	// when the next round must run even if nothing else changes.
	Wake time.Time
}

// planRound is one scheduling round: it builds the scheduler's input from
// the table (alive workers with a live stream, every QUEUED task past its
// backoff, at most maxQueuedPerQueue per queue), holds tasks that wait for
// a service, a whole gang or their session's reconnecting worker, places
// the rest, and returns the plan as one command. The FSM re-checks every
// placement against the newest table when it applies it.
func planRound(in roundInput) round {
	var out round
	view := in.View
	nowNanos := in.Now.UnixNano()
	sin := scheduler.Input{Seed: in.Term, Policy: in.Policy, Running: map[string]int{}}
	// Connectivity is read once: a worker that connects mid-round must not
	// count as away when the workers are listed and as back when pinned
	// tasks are held for it (its session's task was then placed elsewhere).
	connected := map[string]bool{}
	for _, w := range view.AliveWorkers() {
		if !in.Connected(w.ID()) {
			continue
		}
		connected[w.ID()] = true
		starting := 0
		for _, t := range view.AssignedTo(w.ID()) {
			if a := t.ActiveAttempt(); a != nil && a.State == wire.TaskState_TASK_STATE_ASSIGNED {
				starting++
			}
			sin.Running[t.Queue()]++
		}
		sw := scheduler.Worker{
			ID: w.ID(), Capacity: w.Capacity(), Allocated: w.Allocated, Labels: w.Info.GetLabels(),
			Images: w.Info.GetImages(), Runtime: w.Info.GetRuntime(), StartsInFlight: starting, MaxConcurrentStarts: int(w.Info.GetMaxConcurrentStarts()),
			ServesSandboxes: w.Info.GetAddr() != "",
		}
		for _, d := range w.Info.GetGpus() {
			if d.GetUnhealthy() != "" {
				continue // no new work until it is healthy again
			}
			sw.GPUs = append(sw.GPUs, scheduler.GPU{UUID: d.GetUuid(), Model: d.GetModel(), MemoryBytes: d.GetMemoryBytes(),
				InUse: w.GPUHolder(d.GetUuid()) != "", NVLinkPeers: d.GetNvlinkPeers()})
		}
		sin.Workers = append(sin.Workers, sw)
	}
	if len(sin.Workers) == 0 {
		return out // nowhere to place; reasons are refreshed once a worker connects
	}
	queued := map[string]*state.Task{}
	waiting := map[string]string{} // tasks held back -> new reason
	perQueue := map[string]int{}
	queuedTasks := view.Queued()
	if in.PerQueue > 0 {
		queuedTasks = view.QueuedFirst(in.PerQueue)
	}
	for t := range queuedTasks {
		if t.ActiveAttempt() != nil {
			continue // its gang restarts: placed again once the attempt stopped
		}
		if nb := t.NotBeforeUnixNanos; nb > nowNanos {
			if out.Wake.IsZero() || nb < out.Wake.UnixNano() {
				out.Wake = time.Unix(0, nb)
			}
			continue
		}
		if perQueue[t.Queue()]++; perQueue[t.Queue()] > maxQueuedPerQueue {
			if t.Reason == "" {
				// Never considered while the tasks ahead of it wait: say
				// so, once, rather than nothing.
				waiting[t.ID] = behindReason
			}
			continue
		}
		if r := serviceWait(view, t); r != "" {
			if t.Reason != r {
				waiting[t.ID] = r
			}
			continue
		}
		if r := snapshotWorkerWait(view, t); r != "" {
			if t.Reason != r {
				waiting[t.ID] = r
			}
			continue
		}
		queued[t.ID] = t
		res := t.Spec.GetResources()
		sin.Tasks = append(sin.Tasks, scheduler.Task{
			ID: t.ID, Tenant: t.Tenant, Queue: t.Queue(), Priority: t.Priority, QueueSeq: t.QueueSeq,
			Resources: state.ResourcesOf(res), GPUModel: res.GetGpuModel(), GPUMemoryBytes: res.GetGpuMemoryBytes(),
			NodeSelector: t.Spec.GetNodeSelector(), Image: t.Spec.GetImage(), Session: t.Spec.GetSession(),
			Runtime: t.Spec.GetRuntime(), Gang: t.Spec.GetGang(), Sandbox: t.Spec.GetSandbox() != nil,
			// A sandbox from a snapshot runs only where the image is.
			PinnedWorker: t.Spec.GetSandbox().GetSnapshotWorker(),
		})
	}
	sin.Tasks = holdIncompleteGangs(view, sin.Tasks, queued, waiting, nowNanos)
	if len(sin.Tasks) == 0 && len(waiting) == 0 {
		return out
	}
	var plan scheduler.Plan
	if len(sin.Tasks) > 0 {
		scheduler.PinSessions(sin.Tasks, sessionAttempts(view, queued))
		sin.Tasks = holdForReconnect(view, func(id string) bool { return connected[id] }, sin.Tasks, queued, waiting)
		sin.Quotas, sin.Cluster = schedulerQuotas(view)
		if len(sin.Tasks) > 0 {
			plan = scheduler.Place(sin)
		}
	}
	cmd := &wire.PlanCommand{LeaderTerm: in.Term, UnixNanos: nowNanos}
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
		out.Plan = cmd
	}
	out.Fail = unplaceable(queued, plan.Unplaced, in.Now, in.MaxQueueWait)
	return out
}

// carriedPlanPerQueue is how many tasks of each queue the round of a
// carried plan considers, in queue order (roundInput.PerQueue): a command
// frees or fills a few slots, and the scheduling loop's rounds, which
// read every queue whole, place and explain the rest.
const carriedPlanPerQueue = 256

// submissionPlan returns the plan of a scheduling round (planRound) run on
// the table as submission cmd (a new graph in one chunk) will leave it
// (fsm.Speculate), for the submission to carry (SubmitGraphCommand.plan):
// the graph's ready tasks, and any task that waited before them, in queue
// order, are then placed in the submission's own entry rather than one
// commit later. The round considers the first carriedPlanPerQueue tasks
// of each queue. Nil when the rules in force predate it
// (fsm.RulesSubmitPlan), while the scheduling loop's own plan is being
// committed (loopPlanning: both would place the same queued tasks), or
// when the round places nothing. The FSM checks each placement again when
// it applies the submission, as it does a plan's.
func submissionPlan(in roundInput, cmd *wire.SubmitGraphCommand, loopPlanning bool) *wire.PlanCommand {
	if in.View.Rules() < fsm.RulesSubmitPlan || cmd.GetChunks() != 1 || loopPlanning {
		return nil
	}
	after, err := fsm.Speculate(in.View, cmd)
	return carriedRound(in, after, err)
}

// eventsPlan returns the plan of a scheduling round run on the table as
// the event batch cmd will leave it (fsm.SpeculateEvents), for the batch
// to carry (TaskEventsCommand.plan): the slots its attempts' ends free and
// the tasks those ends make ready (dependents, retries without a backoff)
// are then placed in the batch's own entry, rather than after the loop's
// spacing and one commit later. The round considers the first
// carriedPlanPerQueue tasks of each queue. Nil when the rules in force
// predate it (fsm.RulesEventPlan), while the scheduling loop's own plan
// is being committed (loopPlanning), when no attempt ends in the batch or
// nothing could be placed after it (no task waits, and no end makes one
// ready), or when the round places nothing.
func eventsPlan(in roundInput, cmd *wire.TaskEventsCommand, loopPlanning bool) *wire.PlanCommand {
	if in.View.Rules() < fsm.RulesEventPlan || loopPlanning || !mayQueue(in.View, cmd.GetEvents()) {
		return nil
	}
	after, err := fsm.SpeculateEvents(in.View, cmd)
	return carriedRound(in, after, err)
}

// carriedRound returns the placements of a round on after, the table as a
// command will leave it (the first carriedPlanPerQueue tasks of each
// queue); nil when the speculative apply failed (err: the command's own
// apply says why) or the round places nothing (placements).
func carriedRound(in roundInput, after *state.View, err error) *wire.PlanCommand {
	if err != nil {
		return nil
	}
	in.View, in.PerQueue = after, carriedPlanPerQueue
	return placements(planRound(in))
}

// mayQueue reports whether a round after events could place anything: an
// attempt ends among them (its slot is free) and a task waits in view, or
// the end can make one ready (a task with dependents, or an attempt that
// did not succeed, which may be retried).
func mayQueue(view *state.View, events []*wire.AttemptEvent) bool {
	checked := false
	for _, ev := range events {
		switch ev.GetKind() {
		case wire.AttemptEventKind_ATTEMPT_EVENT_KIND_EXITED:
			if ev.GetExitCode() != 0 {
				return true
			}
		case wire.AttemptEventKind_ATTEMPT_EVENT_KIND_FAILED, wire.AttemptEventKind_ATTEMPT_EVENT_KIND_TIMED_OUT,
			wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STOPPED:
			return true
		default:
			continue // the attempt goes on
		}
		if t := view.Task(ev.GetTaskId()); t != nil && len(t.Dependents) > 0 {
			return true
		}
		if !checked {
			checked = true
			for range view.QueuedFirst(1) {
				return true
			}
		}
	}
	return false
}

// placements returns r's plan when it places a task, else nil: a carried
// plan that only refreshes queueing reasons is left to the loop.
func placements(r round) *wire.PlanCommand {
	if r.Plan == nil || len(r.Plan.Attempts) == 0 {
		return nil
	}
	return r.Plan
}

// unplaceable returns the command that fails the tasks no worker could run
// (an infeasible reason) and that have been QUEUED longer than maxWait,
// with their reasons, in id order; nil when there are none or maxWait is 0.
// The FSM re-checks that each is still QUEUED with that reason.
func unplaceable(queued map[string]*state.Task, unplaced map[string]scheduler.Reason, now time.Time, maxWait time.Duration) *wire.FailQueuedCommand {
	if maxWait <= 0 {
		return nil
	}
	cutoff := now.Add(-maxWait).UnixNano()
	cmd := &wire.FailQueuedCommand{QueuedBeforeUnixNanos: cutoff, UnixNanos: now.UnixNano()}
	for _, id := range slices.Sorted(maps.Keys(unplaced)) {
		if r := unplaced[id]; r.Infeasible() && queued[id].QueuedUnixNanos <= cutoff {
			cmd.TaskIds = append(cmd.TaskIds, id)
			cmd.Reasons = append(cmd.Reasons, r.String())
		}
	}
	if len(cmd.TaskIds) == 0 {
		return nil
	}
	return cmd
}

// snapshotWorkerWait returns why queued task t (a sandbox created from a
// snapshot) cannot be placed now: the worker holding its snapshot's image
// is not ALIVE in the table. "" when t can be placed (or is no such
// sandbox). The task then waits with that reason until the worker is back
// (with the same id), it is closed, or its lifetime ends it.
func snapshotWorkerWait(view *state.View, t *state.Task) string {
	id := t.Spec.GetSandbox().GetSnapshotWorker()
	if id == "" {
		return ""
	}
	if w := view.Worker(id); w != nil && w.Alive() {
		return ""
	}
	why := view.SnapshotUnavailable(&wire.Snapshot{WorkerId: id})
	return fmt.Sprintf("waiting for snapshot %s: %s; it starts there once the worker is back with the same id, or close this sandbox and create one from another snapshot",
		t.Spec.GetSandbox().GetFromSnapshot(), why)
}

// holdForReconnect removes from tasks those pinned to the worker of their
// session (PinnedWorker) when that worker is still ALIVE in the table but
// has no stream to this leader right now: it is reconnecting (after a
// leader change, or a dropped stream), and the session's container is
// still there. Placing such a task elsewhere would split the session; it
// waits, with a reason, until the worker is back or is declared down (and
// its sessions with it). Changed reasons go into waiting.
func holdForReconnect(view *state.View, connected func(string) bool, tasks []scheduler.Task, queued map[string]*state.Task, waiting map[string]string) []scheduler.Task {
	kept := tasks[:0]
	for _, t := range tasks {
		if t.PinnedWorker != "" && !connected(t.PinnedWorker) {
			if w := view.Worker(t.PinnedWorker); w != nil && w.Status == wire.WorkerStatus_WORKER_STATUS_ALIVE {
				r := fmt.Sprintf("waiting for session %s's worker %s to reconnect", t.Session, t.PinnedWorker)
				if t.Session == "" {
					r = fmt.Sprintf("waiting for worker %s, the only one it may run on, to reconnect", t.PinnedWorker)
				}
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

// lapsedWorkers returns a WorkerDownCommand for every worker the table
// holds ALIVE whose lease has expired on this leader at now: the leader
// has not heard from it (renewedAt: a message on its stream, a renewal
// through gossip; zero when never) for l.Duration+l.Margin, counted from
// since, when this head became leader, at the earliest
// (lease.HeadExpired). In the table's worker order.
func lapsedWorkers(view *state.View, renewedAt func(workerID string) time.Time, l lease.Config, since, now time.Time) []*wire.WorkerDownCommand {
	var out []*wire.WorkerDownCommand
	for _, w := range view.Workers() {
		if w.Status != wire.WorkerStatus_WORKER_STATUS_ALIVE {
			continue
		}
		if !lease.HeadExpired(l, renewedAt(w.Info.Id), since, now) {
			continue
		}
		reason := "lease expired: not heard from for " + (l.Duration + l.Margin).String() + " (--worker-lease plus --worker-lease-margin)"
		out = append(out, &wire.WorkerDownCommand{WorkerId: w.Info.Id, Reason: reason,
			ReasonCode: wire.ReasonCode_REASON_CODE_LEASE_LAPSED, UnixNanos: now.UnixNano()})
	}
	return out
}

// staleStaged returns the command that drops the chunks of graph
// submissions first staged more than ttl before now that never received
// their last chunk (a client or leader died mid-way); nil when none.
func staleStaged(view *state.View, now time.Time, ttl time.Duration) *wire.DropStagedCommand {
	var stale []string
	for _, s := range view.StagedGraphs() {
		if now.Sub(time.Unix(0, s.FirstUnixNanos)) > ttl {
			stale = append(stale, s.GraphID)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	return &wire.DropStagedCommand{GraphIds: stale, UnixNanos: now.UnixNano()}
}

// reconciliation is what the leader does about what a worker announces
// when its stream opens.
type reconciliation struct {
	// Held is the attempts the worker holds that are current: already
	// delivered, not to be sent again.
	Held map[attemptKey]bool
	// Stops is a stop for every attempt the worker holds that the table
	// does not hold as current and active on it.
	Stops []*wire.HeadMessage
	// Lost marks lost the attempts the table has RUNNING (or stopping) on
	// the worker that the worker no longer has (their tasks are retried);
	// nil when none. Attempts ASSIGNED but never received are not lost:
	// they are sent again.
	Lost *wire.AttemptsLostCommand
}

// reconcile compares what worker workerID announces (running) with the
// table.
func reconcile(view *state.View, workerID string, running []*wire.RunningAttempt, now time.Time) reconciliation {
	r := reconciliation{Held: map[attemptKey]bool{}}
	for _, ra := range running {
		t := view.Task(ra.TaskId)
		var cur *state.Attempt
		if t != nil {
			cur = t.CurrentAttempt()
		}
		if cur == nil || cur.Number != ra.Attempt || cur.WorkerID != workerID || !cur.Active() {
			r.Stops = append(r.Stops, stopMsg(ra.TaskId, ra.Attempt, "attempt is not current"))
			continue
		}
		r.Held[attemptKey{task: ra.TaskId, attempt: ra.Attempt}] = true
	}
	r.Stops = append(r.Stops, overCapacity(view, workerID, r.Held)...)
	var lost []*wire.PlannedAttempt
	for _, t := range view.AssignedTo(workerID) {
		cur := t.CurrentAttempt()
		if r.Held[attemptKey{task: t.ID, attempt: cur.Number}] {
			continue
		}
		if cur.State == wire.TaskState_TASK_STATE_RUNNING || t.Stopping() {
			lost = append(lost, &wire.PlannedAttempt{TaskId: t.ID, Attempt: cur.Number, WorkerId: workerID})
		}
	}
	if len(lost) > 0 {
		r.Lost = &wire.AttemptsLostCommand{Attempts: lost,
			Reason:     "worker " + workerID + " no longer runs it (restarted?)",
			ReasonCode: wire.ReasonCode_REASON_CODE_NOT_ON_WORKER, UnixNanos: now.UnixNano()}
	}
	return r
}

// overCapacity returns stops for attempts held by a worker back with less
// capacity than they take (restarted with a smaller --cpu-millis, say), so
// that it runs within what it offers: the newest first, a sandbox's (whose
// state a stop loses) after every other, until the rest fit in CPU, memory
// and GPUs. They stay held (delivered) until the worker reports them
// STOPPED, which re-queues their tasks as a lost attempt's. None when they
// fit.
func overCapacity(view *state.View, workerID string, held map[attemptKey]bool) []*wire.HeadMessage {
	w := view.Worker(workerID)
	if w == nil || len(held) == 0 {
		return nil
	}
	type use struct {
		key     attemptKey
		sandbox bool
		start   int64
		need    resources.Resources
	}
	var uses []use
	var used resources.Resources
	for k := range held {
		t := view.Task(k.task)
		u := use{key: k, sandbox: t.Spec.GetSandbox() != nil, start: t.CurrentAttempt().StartUnixNanos, need: state.ResourcesOf(t.Spec.GetResources())}
		uses = append(uses, u)
		used = used.Add(u.need)
	}
	capacity := w.Capacity()
	if used.Fits(capacity) {
		return nil
	}
	// Stopped first: not a sandbox, then the newest, then by task id.
	slices.SortFunc(uses, func(a, b use) int {
		if a.sandbox != b.sandbox {
			if a.sandbox {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(b.start, a.start); c != 0 {
			return c
		}
		return strings.Compare(a.key.task, b.key.task)
	})
	why := fmt.Sprintf("worker %s now offers %s, %s and %d GPUs, less than its attempts take (%s, %s, %d GPUs): "+
		"the newest are stopped so that it runs within what it offers", workerID, resources.FormatCPU(capacity.CPUMillis),
		resources.FormatBytes(capacity.MemoryBytes), capacity.GPUs, resources.FormatCPU(used.CPUMillis), resources.FormatBytes(used.MemoryBytes), used.GPUs)
	var stops []*wire.HeadMessage
	for _, u := range uses {
		if used.Fits(capacity) {
			break
		}
		stops = append(stops, stopMsg(u.key.task, u.key.attempt, why))
		used = used.Sub(u.need)
	}
	return stops
}

// taskEvents is the command that commits a batch of a worker's attempt
// events at now. It carries the retry backoff's parameters (base and
// maxWait: Config.RetryBackoff and RetryBackoffMax) and seed, the source of
// the backoffs' jitter (random on the leader); the FSM computes each wait
// itself under rules 1 and later (state.RetryBackoff), only for the events
// that do send a task back to QUEUED. Under rules 0 (a cluster that has not
// yet committed rules 1: a rolling upgrade from an older build) the heads
// apply the waits the leader adds from view (rules0Backoffs, each jitter
// from draw) instead.
func taskEvents(view *state.View, workerID string, events []*wire.AttemptEvent, now time.Time, base, maxWait time.Duration, seed uint64, draw func() float64) *wire.TaskEventsCommand {
	cmd := &wire.TaskEventsCommand{WorkerId: workerID, Events: events, UnixNanos: now.UnixNano(),
		RetrySeed: seed, RetryBackoffBaseNanos: int64(base), RetryBackoffMaxNanos: int64(maxWait)}
	if view.Rules() == 0 {
		cmd.RetryBackoffNanos = rules0Backoffs(view, events, base, maxWait, draw)
	}
	return cmd
}

// workerUpsert is the command that records worker info.Id as ALIVE with
// what info announces, at now: committed when the worker's stream opens
// (its hello, before the Welcome) and whenever a heartbeat carries a
// changed advertisement (images, GPUs). The FSM validates info.
func workerUpsert(info *wire.WorkerInfo, now time.Time) *wire.WorkerUpsertCommand {
	return &wire.WorkerUpsertCommand{Info: info, UnixNanos: now.UnixNano()}
}

// gpuHealth is the command that commits the GPU health worker workerID
// reports at now: unhealthy maps the UUID of each unhealthy GPU to why,
// and a GPU it leaves out is healthy (again). Every report is committed:
// the worker sends one when a GPU's health changes and a full one when
// its stream opens. The FSM marks the GPUs in the table and loses the
// attempts that hold an unhealthy one.
func gpuHealth(workerID string, unhealthy map[string]string, now time.Time) *wire.GpuHealthCommand {
	return &wire.GpuHealthCommand{WorkerId: workerID, Unhealthy: unhealthy, UnixNanos: now.UnixNano()}
}

// pendingArtifact is an ended attempt still marked artifacts_pending: its
// worker's ARTIFACTS_LANDED has not been committed.
type pendingArtifact struct {
	// WorkerID is the worker the attempt ran on, in whose name its
	// ARTIFACTS_LANDED is committed.
	WorkerID string
	// TaskID and Attempt name the attempt.
	TaskID  string
	Attempt uint32
	// Manifest is the store key of the attempt's manifest (uploaded last:
	// once it is there, everything before it is).
	Manifest string
}

// pendingArtifacts returns the attempts of view that ended at least wait
// before now and are still marked artifacts_pending, in the table's task
// order, each task's attempts in order. Younger ones are left to their
// worker's own ARTIFACTS_LANDED, which is likely on its way.
func pendingArtifacts(view *state.View, now time.Time, wait time.Duration) []pendingArtifact {
	cutoff := now.Add(-wait).UnixNano()
	var out []pendingArtifact
	for t := range view.Tasks() {
		for i := range t.Attempts {
			a := &t.Attempts[i]
			if !a.ArtifactsPending || a.Active() || a.FinishUnixNanos > cutoff {
				continue
			}
			out = append(out, pendingArtifact{WorkerID: a.WorkerID, TaskID: t.ID, Attempt: a.Number,
				Manifest: artifact.ForTask(t.Tenant, t.GraphID, t.ID, a.Number).ManifestKey()})
		}
	}
	return out
}

// artifactsLanded returns the commands that clear artifacts_pending on
// landed (attempts whose manifest the leader found in the store): one
// TaskEventsCommand per worker, in worker id order, holding an
// ARTIFACTS_LANDED event per attempt in the order of landed, all stamped
// now; nil when landed is empty. The table ignores a repeated one.
func artifactsLanded(landed []pendingArtifact, now time.Time) []*wire.TaskEventsCommand {
	byWorker := map[string][]*wire.AttemptEvent{}
	for _, p := range landed {
		byWorker[p.WorkerID] = append(byWorker[p.WorkerID], &wire.AttemptEvent{TaskId: p.TaskID, Attempt: p.Attempt,
			Kind: wire.AttemptEventKind_ATTEMPT_EVENT_KIND_ARTIFACTS_LANDED, UnixNanos: now.UnixNano()})
	}
	var out []*wire.TaskEventsCommand
	for _, w := range slices.Sorted(maps.Keys(byWorker)) {
		out = append(out, &wire.TaskEventsCommand{WorkerId: w, Events: byWorker[w], UnixNanos: now.UnixNano()})
	}
	return out
}

// clusterIDCommand returns the command that gives the cluster its id
// when view holds none: a nonzero 64-bit number from draw (crypto/rand on
// the leader), drawn again while it gives 0; nil (draw not called) when
// the table has an id. The FSM keeps the first id committed, so two
// leaders racing right after a bootstrap still agree.
func clusterIDCommand(view *state.View, draw func() uint64) *wrapperspb.UInt64Value {
	if view.ClusterID() != 0 {
		return nil
	}
	var id uint64
	for id == 0 {
		id = draw()
	}
	return wrapperspb.UInt64(id)
}

// rulesCommand returns the command that raises the table's rules version
// to what rulesToCommit decides for voters (the Raft configuration's
// voters) and canApply (the version each advertises); nil when the table
// is at this build's fsm.RulesCurrent or there is nothing to raise.
func rulesCommand(view *state.View, voters []string, canApply func(voterID string) (uint64, bool)) *wrapperspb.UInt64Value {
	target, ok := rulesToCommit(view.Rules(), voters, canApply)
	if !ok {
		return nil
	}
	return wrapperspb.UInt64(target)
}
