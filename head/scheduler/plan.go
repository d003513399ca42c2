package scheduler

// Plan is the outcome of one round: what to place where, and why the rest
// waits. The leader's plan verifier re-checks each placement against the
// newest state before proposing it.
type Plan struct {
	// Placements are in the order the round made them (queues interleaved
	// by weighted fair share). The members of a gang are placed together,
	// one after another in task id order.
	Placements []Placement
	// Unplaced maps the id of every task not placed to the reason.
	Unplaced map[string]Reason
	// Held lists the workers held for waiting tasks this round (head of
	// line), in the order they were held. Informational: nothing is
	// committed for them.
	Held []Hold
}

// Placement assigns one task to one worker.
type Placement struct {
	// TaskID is the placed task.
	TaskID string
	// WorkerID is the worker it goes to.
	WorkerID string
	// GPUUUIDs are the GPUs pinned to the task, by UUID; empty for a task
	// asking for none.
	GPUUUIDs []string
}

// Hold records a worker whose resources a waiting task held this round.
type Hold struct {
	// TaskID is the waiting task.
	TaskID string
	// WorkerID is the worker held for it.
	WorkerID string
}

// ReasonKind classifies why a task was not placed.
type ReasonKind uint8

const (
	// ReasonInfeasible: no worker in the input could run the task even if idle
	// (resources, GPUs, node selector), or its request alone exceeds its
	// tenant's or the cluster's quota. It waits for the cluster to change
	// (a larger worker, a new label, a raised quota), not for work to end.
	ReasonInfeasible ReasonKind = iota + 1
	// ReasonCapacity: some worker could run the task, but none has room now.
	ReasonCapacity
	// ReasonStartLimit: every worker with room is at its cap of container starts
	// in flight.
	ReasonStartLimit
	// ReasonQuota: the tenant's quota or the cluster limit is used up for now.
	ReasonQuota
	// ReasonLimit: the Input.Admit hook refused the task.
	ReasonLimit
	// ReasonDeferred: the round reached Policy.MaxPlacements before this task.
	ReasonDeferred
)

var kindNames = [...]string{"unknown", "infeasible", "capacity", "start-limit", "quota", "limit", "deferred"}

// String returns the kind's name in lower case: "infeasible", "capacity",
// "start-limit", "quota", "limit", "deferred".
func (k ReasonKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return kindNames[0]
}

// Reason says why a task was not placed, for people (Message) and for code
// (Kind).
type Reason struct {
	// Kind classifies the reason.
	Kind ReasonKind
	// Message is one specific sentence without a final period, e.g. "no
	// worker has 64 GiB of memory (the largest has 16 GiB)".
	Message string
}

// Infeasible reports whether no worker of the input could ever run the task
// as things stand, as opposed to waiting for capacity, starts or quota.
func (r Reason) Infeasible() bool { return r.Kind == ReasonInfeasible }

// String returns the message.
func (r Reason) String() string { return r.Message }
