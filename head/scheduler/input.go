package scheduler

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/megaflow/megaflow/internal/resources"
)

// Input is everything one scheduling round looks at. The head leader builds
// it from a snapshot of the task table and passes it to Place; Place reads
// it and never modifies it.
type Input struct {
	// Workers are the alive workers that may take tasks. Ids are unique.
	Workers []Worker
	// Tasks are the QUEUED tasks, in any order; Place orders them. Ids are
	// unique.
	Tasks []Task
	// Running maps a queue to its tasks ASSIGNED or RUNNING now. Queues take
	// turns by weighted fair share counting these, so that fairness between
	// queues carries from one round to the next. Nil: none running.
	Running map[string]int
	// Policy says how queues are weighted and how workers are chosen.
	Policy Policy
	// Quotas maps a tenant to its quota and current usage. A tenant without
	// an entry has no quota.
	Quotas map[string]Quota
	// Cluster is a limit on the whole cluster, counted like a tenant quota
	// over every task (the cluster-wide semaphore). Zero: no limit.
	Cluster Quota
	// Admit, if set, is asked about each task before it is fitted; a task it
	// refuses is not placed this round and reason is reported. It is the hook
	// for limits kept outside this package. It must be a pure function of
	// the task: Place calls it at most once per task, in round order (the
	// members of a gang together, in task id order, when the round reaches
	// the first of them, and no further once one is refused).
	Admit func(Task) (ok bool, reason string)
	// Seed breaks ties between equally good workers. The leader may use a
	// fixed seed or vary it by round; the same seed gives the same plan.
	Seed uint64
}

// Worker is a worker as the scheduler sees it.
type Worker struct {
	// ID is the worker's unique id.
	ID string
	// Capacity is what the worker offers. Only CPUMillis and MemoryBytes are
	// read: GPUs are counted from the GPUs list.
	Capacity resources.Resources
	// Allocated is what the attempts ASSIGNED or RUNNING on the worker hold.
	// Only CPUMillis and MemoryBytes are read: a GPU in use is marked InUse.
	Allocated resources.Resources
	// Labels are matched exactly against a task's node selector.
	Labels map[string]string
	// Images are the container images the worker holds locally.
	Images []string
	// Runtime is the worker's container runtime ("docker", "process",
	// "fake"); "" for unknown. A task whose Runtime is set goes only to
	// workers with that runtime.
	Runtime string
	// ServesSandboxes is true for a worker that serves sandbox execs and
	// files to the heads (it advertises an address for them: worker
	// --sandbox-addr). A Task with Sandbox goes only to such workers.
	ServesSandboxes bool
	// GPUs are every GPU device of the worker, free or in use. They are the
	// only source of GPUs: a worker without devices here runs no GPU task,
	// whatever Capacity.GPUs says.
	GPUs []GPU
	// StartsInFlight is the number of containers the worker is starting now
	// (assigned attempts not yet RUNNING).
	StartsInFlight int
	// MaxConcurrentStarts caps StartsInFlight plus the tasks this round
	// places on the worker. Zero or less: no cap.
	MaxConcurrentStarts int
}

// GPU is one GPU device of a worker.
type GPU struct {
	// UUID identifies the device; plans pin GPUs by UUID.
	UUID string
	// Model is the device name, e.g. "NVIDIA H100 80GB HBM3". A task's
	// GPUModel matches it as a case-insensitive substring.
	Model string
	// MemoryBytes is the device's memory in bytes.
	MemoryBytes int64
	// InUse is true when an attempt holds the device.
	InUse bool
	// NVLinkPeers are the UUIDs of devices joined to this one by NVLink. Place
	// does not read it yet: it is the hook for topology-aware choice of GPUs
	// for multi-GPU tasks (see pickGPUs).
	NVLinkPeers []string
}

// Task is a QUEUED task as the scheduler sees it.
type Task struct {
	// ID is the task's unique id ("<graph id>/<task name>").
	ID string
	// Tenant owns the task; quotas are per tenant.
	Tenant string
	// Queue is the task type: "", "train", "eval", "synth" or any other name.
	Queue string
	// Priority orders tasks within a queue, higher first.
	Priority int32
	// QueueSeq orders tasks of equal priority within a queue, lower first
	// (FIFO).
	QueueSeq uint64
	// Resources is what the task asks for: millicores, bytes, whole GPUs.
	Resources resources.Resources
	// GPUModel, if set, must be a case-insensitive substring of each
	// assigned GPU's model.
	GPUModel string
	// GPUMemoryBytes, if positive, is the least memory each assigned GPU
	// must have, in bytes.
	GPUMemoryBytes int64
	// NodeSelector must match the worker's labels exactly, key by key.
	NodeSelector map[string]string
	// Image is the task's container image; workers holding it are preferred.
	Image string
	// Runtime, if set, is the only worker runtime the task may run on
	// ("docker": the image's isolation is required, so never a process
	// worker; "process"). It is matched like a node selector on the label
	// RuntimeLabel, and reasons name it so.
	Runtime string
	// Sandbox is true for a sandbox's task: it goes only to a worker that
	// ServesSandboxes (matched like a node selector on SandboxLabel), or
	// its execs would all fail.
	Sandbox bool
	// QueuedSinceUnixNanos is when the task entered QUEUED, in nanoseconds
	// since the Unix epoch. Place does not read it; it is carried for the
	// leader's reports, and for aging should a policy want it.
	QueuedSinceUnixNanos int64
	// Session is the task's session key (TaskSpec.session), scoped to its
	// graph (the part of ID before the '/'); "" for none. Tasks of one
	// graph with the same session run in one persistent container, so on
	// one worker: Place puts a session task placed in the same round as
	// another of its session on the same worker.
	Session string
	// PinnedWorker, if set, is the only worker the task may go to: the
	// worker where an earlier task of its session ran (PinSessions fills
	// it), or, for a task without a Session, the worker the head chose (a
	// sandbox from a snapshot: the worker holding the snapshot's image). When that worker has no room the task waits, with the reason
	// "waiting for session <s>'s worker <w>". A PinnedWorker that is not in
	// Input.Workers (the worker died, and the session's container with it)
	// pins nothing: the task is placed like any other.
	PinnedWorker string
	// Gang is the task's gang name (TaskSpec.gang), scoped to its graph
	// (the part of ID before the '/'); "" for none. The tasks of one graph
	// with the same Gang start all at once, each on a worker of its own
	// (multi-node training: one task per node), or not at all: Place
	// places every member in the same round or none of them.
	//
	// The head passes either every QUEUED member of a gang or none of
	// them: Place treats the members present in Input.Tasks as the whole
	// gang. Gang members never have a Session (nor a PinnedWorker); Place
	// ignores both for them.
	Gang string
}

// RuntimeLabel is the pseudo label under which Place matches Task.Runtime
// against Worker.Runtime. Worker labels given under this key are replaced
// by the worker's runtime.
const RuntimeLabel = "megaflow.io/runtime"

// SandboxLabel is the pseudo label, "true" on a worker that
// ServesSandboxes, under which Place matches Task.Sandbox; an unplaced
// sandbox's reason names it ("no worker matches node selector
// megaflow.io/serves-sandboxes=true").
const SandboxLabel = "megaflow.io/serves-sandboxes"

// Quota is a limit and the current usage it is checked against: a tenant's,
// or the cluster's. Zero limits are no limit.
type Quota struct {
	// MaxRunning is the most tasks ASSIGNED or RUNNING at once; 0: no limit.
	MaxRunning int
	// Max limits the sum of the running tasks' requests, per dimension
	// (millicores, bytes, GPUs); a zero dimension is not limited.
	Max resources.Resources
	// Running is the number of tasks ASSIGNED or RUNNING now.
	Running int
	// Used is the sum of their requests.
	Used resources.Resources
}

// Strategy says how a queue's tasks choose among the workers that fit.
type Strategy uint8

const (
	// Spread prefers the worker least allocated after placement (the mean of
	// the allocated fractions of CPU, memory and GPUs). It is the default.
	Spread Strategy = iota
	// BinPack prefers the worker most allocated after placement, keeping
	// other workers empty for large tasks and for scaling down.
	BinPack
)

// String returns "spread" or "binpack".
func (s Strategy) String() string {
	if s == BinPack {
		return "binpack"
	}
	return "spread"
}

// QueuePolicy is how one queue is served.
type QueuePolicy struct {
	// Weight is the queue's share of turns in the weighted round-robin
	// between queues; 0 or less means 1.
	Weight int
	// Strategy is how the queue's tasks choose workers.
	Strategy Strategy
}

// Policy is the scheduler's configuration. The zero value is usable: every
// queue has weight 1 and spreads, image locality only breaks ties, one
// waiting task per queue holds a worker, and a round places any number of
// tasks.
type Policy struct {
	// Default applies to queues without an entry in Queues.
	Default QueuePolicy
	// Queues maps a queue name to its policy.
	Queues map[string]QueuePolicy
	// ImageLocalityBonus is added to the strategy score of a worker holding
	// the task's image, in millionths of allocated fraction (100000 lets a
	// worker 10 points more loaded under Spread still win by its image).
	// Zero: the image only breaks ties between equal scores.
	ImageLocalityBonus int64
	// Reservations is how many waiting tasks per queue may hold a worker
	// each round (head of line; at most 64 holds a round in all). 0 means
	// 1; negative: none.
	Reservations int
	// MaxPlacements caps the placements of one round (the size of one Raft
	// command); 0: no cap. A gang is placed whole or not at all: it may be
	// placed when fewer than MaxPlacements placements were made before it,
	// so a round with gangs may overshoot the cap by a gang's size less
	// one.
	MaxPlacements int
}

// DefaultPolicy returns the policy the head starts with: weight 1 and Spread
// for every queue, an image locality bonus of 100000 (10 points of
// allocated fraction), one reservation per queue.
func DefaultPolicy() Policy {
	return Policy{ImageLocalityBonus: 100_000}
}

func (p Policy) queue(name string) QueuePolicy {
	if q, ok := p.Queues[name]; ok {
		return q
	}
	return p.Default
}

func (p Policy) reservations() int {
	switch {
	case p.Reservations == 0:
		return 1
	case p.Reservations < 0:
		return 0
	}
	return p.Reservations
}

// ParseQueuePolicies reads the command-line form of per-queue policies into
// p.Queues: weights as "train=2,eval=1" and strategies as
// "eval=binpack,train=spread" (either may be empty; the default queue is
// written "default"). Errors name the bad entry and what is allowed.
func (p *Policy) ParseQueuePolicies(weights, strategies string) error {
	set := func(queue string, f func(*QueuePolicy)) {
		if queue == "default" {
			queue = ""
		}
		if p.Queues == nil {
			p.Queues = map[string]QueuePolicy{}
		}
		q, ok := p.Queues[queue]
		if !ok {
			q = p.Default
		}
		f(&q)
		p.Queues[queue] = q
	}
	for _, kv := range splitList(weights) {
		queue, v, ok := strings.Cut(kv, "=")
		w, err := strconv.Atoi(v)
		if !ok || queue == "" || err != nil || w < 1 || w > 1000 {
			return fmt.Errorf("queue weight %q: want QUEUE=N with N from 1 to 1000, e.g. train=2", kv)
		}
		set(queue, func(q *QueuePolicy) { q.Weight = w })
	}
	for _, kv := range splitList(strategies) {
		queue, v, ok := strings.Cut(kv, "=")
		var s Strategy
		switch v {
		case "spread":
			s = Spread
		case "binpack":
			s = BinPack
		default:
			ok = false
		}
		if !ok || queue == "" {
			return fmt.Errorf("queue strategy %q: want QUEUE=spread or QUEUE=binpack, e.g. eval=binpack", kv)
		}
		set(queue, func(q *QueuePolicy) { q.Strategy = s })
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
