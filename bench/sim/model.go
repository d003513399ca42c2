// Package sim holds the benchmark harness's models of the paper's simulated
// instances (arXiv 2601.07526, "MegaFlow"): how long a rollout's work takes
// on an instance shared with other rollouts (contention), how long its
// environment takes to start (start-up), and what the instances cost. The
// models are pure functions of their parameters, calibrated on the paper's
// published figures (named at each formula), and unit-tested; Group turns
// them into fake-runtime Behaviors for the real system under test.
//
// Only the benchmark harness (cmd/megaflow-bench) imports this package.
package sim

import (
	"fmt"
	"math"
	"time"
)

// Deployment is how the simulated instances are shaped.
type Deployment string

// Deployments of the paper's Figure 3.
const (
	// Distributed is many small instances (8 vCPU / 16 GiB, AWS c6g.2xlarge
	// class), one task each: the paper's choice.
	Distributed Deployment = "distributed"
	// Centralized is few high-spec instances (208 cores / 3 TiB) with 50
	// tasks each: the paper's baseline.
	Centralized Deployment = "centralized"
)

// Mode is the execution mode: a fresh container per task, or a warm one.
type Mode string

// Execution modes of the paper's Figure 5.
const (
	Ephemeral  Mode = "ephemeral"
	Persistent Mode = "persistent"
)

// Shape is one simulated instance: what it has and how many tasks share it.
type Shape struct {
	// CPUMillis is its CPU in millicores (1000 = one vCPU or core).
	CPUMillis int64
	// MemoryBytes is its memory in bytes.
	MemoryBytes int64
	// TasksPerInstance is how many tasks it hosts at once (>= 1).
	TasksPerInstance int
	// PricePerHour is its on-demand price in USD per instance-hour.
	PricePerHour float64
}

// TaskRequest returns the resources one task asks for on this shape: the
// instance divided evenly among TasksPerInstance, CPU in millicores and
// memory in bytes, so that the scheduler fits exactly TasksPerInstance
// tasks per instance.
func (s Shape) TaskRequest() (cpuMillis, memoryBytes int64) {
	n := int64(s.TasksPerInstance)
	return s.CPUMillis / n, s.MemoryBytes / n
}

// Instances returns how many instances n tasks need: ceil(n/TasksPerInstance).
func (s Shape) Instances(n int) int {
	return (n + s.TasksPerInstance - 1) / s.TasksPerInstance
}

// Default prices, USD per instance-hour.
const (
	// SmallPricePerHour is AWS c6g.2xlarge (8 vCPU, 16 GiB) on demand in
	// us-east-1, the class the paper's distributed deployment used.
	SmallPricePerHour = 0.272
	// LargePricePerHour is the paper's centralized instance's price implied
	// by its own figures: 1,470 USD for 2,000 tasks = 40 instances of 50
	// tasks for 110 min, so 1470 / (40 * 110/60) = 20.05 USD per hour.
	LargePricePerHour = 20.05
)

// DefaultShape returns the paper's instance shape for d: distributed
// 8,000 millicores / 16 GiB / 1 task, centralized 208,000 millicores /
// 3 TiB / 50 tasks; prices as SmallPricePerHour and LargePricePerHour.
func DefaultShape(d Deployment) Shape {
	if d == Centralized {
		return Shape{CPUMillis: 208_000, MemoryBytes: 3 << 40, TasksPerInstance: 50, PricePerHour: LargePricePerHour}
	}
	return Shape{CPUMillis: 8_000, MemoryBytes: 16 << 30, TasksPerInstance: 1, PricePerHour: SmallPricePerHour}
}

// Model is the whole simulated-time model of one run. Times are simulated
// (the paper's scale); Compress divides them into wall-clock time.
type Model struct {
	// Work is a rollout's work alone on an instance: the paper's ~100 min
	// wall time for 1 task (Figure 3).
	Work time.Duration
	// MaxSlowdown is the work's slowdown on a full centralized instance:
	// the paper's centralized deployment degrades from 100 to 110 min
	// (Figure 3), so 1.10. Distributed instances host one task: no slowdown.
	MaxSlowdown float64
	// Startup ranges, simulated time, at 1 task and at 10,000 tasks (the
	// paper's Figure 5: persistent under 1 min, ephemeral 1 to 6 min,
	// centralized 1 to 13 min).
	PersistentStartup  [2]time.Duration
	EphemeralStartup   [2]time.Duration
	CentralizedStartup [2]time.Duration
	// Compress is the time-compression factor: wall time = simulated time
	// / Compress.
	Compress float64
}

// DefaultModel returns the model calibrated on the paper's figures, with
// time compressed by compress.
func DefaultModel(compress float64) Model {
	return Model{
		Work:               100 * time.Minute,
		MaxSlowdown:        1.10,
		PersistentStartup:  [2]time.Duration{20 * time.Second, 50 * time.Second},
		EphemeralStartup:   [2]time.Duration{1 * time.Minute, 6 * time.Minute},
		CentralizedStartup: [2]time.Duration{1 * time.Minute, 13 * time.Minute},
		Compress:           compress,
	}
}

// Validate names the first field out of range.
func (m Model) Validate() error {
	switch {
	case m.Work <= 0:
		return fmt.Errorf("model: Work %v must be positive", m.Work)
	case m.MaxSlowdown < 1:
		return fmt.Errorf("model: MaxSlowdown %.3f is below 1 (a shared instance cannot be faster)", m.MaxSlowdown)
	case m.Compress < 1 || m.Compress > 100_000:
		return fmt.Errorf("model: Compress %g is outside [1, 100000]", m.Compress)
	}
	for _, r := range [][2]time.Duration{m.PersistentStartup, m.EphemeralStartup, m.CentralizedStartup} {
		if r[0] < 0 || r[1] < r[0] {
			return fmt.Errorf("model: start-up range %v..%v must be non-negative and increasing", r[0], r[1])
		}
	}
	return nil
}

// Slowdown is the contention model: the factor a task's work takes longer
// when k tasks share an instance that hosts at most capacity, growing
// linearly from 1 (alone) to MaxSlowdown (full):
//
//	slowdown(k) = 1 + (MaxSlowdown-1) * (k-1) / (capacity-1)
//
// Calibrated on the paper's Figure 3 (centralized 100 -> 110 min with 50
// tasks per 208-core instance). k is clamped to [1, capacity]; a capacity
// of 1 (distributed) never slows down.
func (m Model) Slowdown(k, capacity int) float64 {
	if capacity <= 1 {
		return 1
	}
	k = max(1, min(k, capacity))
	return 1 + (m.MaxSlowdown-1)*float64(k-1)/float64(capacity-1)
}

// Startup is the start-up model: a task's environment start-up time
// (simulated) in a run of n concurrent tasks, interpolated log-linearly in
// n between the paper's Figure 5 values at 1 and 10,000 tasks:
//
//	startup(n) = lo + (hi-lo) * log10(n) / 4,  n clamped to [1, 10,000]
//
// Persistent mode (exec in a warm container) uses PersistentStartup in both
// deployments; ephemeral mode uses EphemeralStartup (distributed) or
// CentralizedStartup (centralized: 50 containers created at once on one
// host's engine and disk).
func (m Model) Startup(d Deployment, mode Mode, n int) time.Duration {
	r := m.EphemeralStartup
	switch {
	case mode == Persistent:
		r = m.PersistentStartup
	case d == Centralized:
		r = m.CentralizedStartup
	}
	n = max(1, min(n, 10_000))
	f := math.Log10(float64(n)) / 4
	return r[0] + time.Duration(f*float64(r[1]-r[0]))
}

// Floor is the model's own makespan for n tasks submitted at once on
// instances of shape s, simulated time: every task starts up for
// Startup(d, mode, n), then works for Work slowed down by the tasks that
// share its instance (min(n, s.TasksPerInstance); the instances are
// filled in turn, so the first is full whenever n reaches its capacity).
// A run of the real system can only be longer: what it adds to the floor
// is orchestration (queueing, dispatch, reporting) and the harness's own
// scheduling on a busy machine. The scaling goal compares
// makespan(10,000) / makespan(100) against Floor(10,000) / Floor(100).
func (m Model) Floor(d Deployment, mode Mode, n int, s Shape) time.Duration {
	k := max(1, min(n, s.TasksPerInstance))
	return m.Startup(d, mode, n) + time.Duration(float64(m.Work)*m.Slowdown(k, s.TasksPerInstance))
}

// Wall converts simulated time to wall-clock time (divides by Compress).
func (m Model) Wall(d time.Duration) time.Duration {
	return time.Duration(float64(d) / m.Compress)
}

// Simulated converts wall-clock time to simulated time (multiplies by
// Compress).
func (m Model) Simulated(d time.Duration) time.Duration {
	return time.Duration(float64(d) * m.Compress)
}

// Cost is the cost model: instance-hours times the price, in USD.
// instanceHours is the sum over instances of the time each was held
// (simulated hours).
func Cost(instanceHours, pricePerHour float64) float64 {
	return instanceHours * pricePerHour
}

// PaperCostRatio is the paper's distributed/centralized cost at 2,000
// tasks: 1,005 / 1,470 USD.
const PaperCostRatio = 1005.0 / 1470.0
