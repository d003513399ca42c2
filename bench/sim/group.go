package sim

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/fake"
)

// TaskProgram is Command[0] of the harness's simulated rollout tasks; a
// Group answers only for specs running it (and KeeperProgram).
const TaskProgram = "megaflow-sim-rollout"

// KeeperProgram is the worker's PoolKeeper in persistent runs: the idle
// process of a warm container, which a Group keeps running until stopped.
const KeeperProgram = "megaflow-sim-keeper"

// Record is what a Group did with one task's container (or exec), in wall
// time.
type Record struct {
	// TaskID is the task (MEGAFLOW_TASK_ID).
	TaskID string
	// Instance is the index of the simulated instance within the group.
	Instance int
	// Colocated is how many tasks shared the instance when it started,
	// itself included.
	Colocated int
	// Called is when the runtime was asked to start it.
	Called time.Time
	// Startup and Work are the modelled wall durations: environment
	// start-up, then the work slowed down by contention.
	Startup, Work time.Duration
}

// End is when the modelled work ends: Called + Startup + Work.
func (r Record) End() time.Time { return r.Called.Add(r.Startup + r.Work) }

// Group is one worker's simulated instances: Instances instances of one
// Shape, offered by one worker as their sum. Each task container the
// fake runtime starts is bound to the first instance with a free slot
// (instances fill in order, as a bin-packing cloud scheduler would), and
// gets the model's start-up and contention-slowed work time. A task's
// slowdown is fixed when it starts, from the tasks then on its instance.
// Safe for concurrent use.
type Group struct {
	model     Model
	shape     Shape
	d         Deployment
	mode      Mode
	n         int
	instances int
	now       func() time.Time

	mu      sync.Mutex
	ends    [][]time.Time // per instance, the end of each task bound to it
	records []Record
}

// NewGroup returns a group of instances instances of shape for a run of n
// tasks in deployment d and mode; now is the clock (time.Now when nil).
func NewGroup(m Model, shape Shape, d Deployment, mode Mode, n, instances int, now func() time.Time) (*Group, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if instances < 1 || shape.TasksPerInstance < 1 || n < 1 {
		return nil, fmt.Errorf("sim group: instances %d, tasks per instance %d and n %d must be at least 1", instances, shape.TasksPerInstance, n)
	}
	if now == nil {
		now = time.Now
	}
	return &Group{model: m, shape: shape, d: d, mode: mode, n: n, instances: instances, now: now, ends: make([][]time.Time, instances)}, nil
}

// Attach makes rt run this group's tasks: rt.OnFunc(g.Behavior).
func (g *Group) Attach(rt *fake.Runtime) { rt.OnFunc(g.Behavior) }

// Behavior is the fake runtime rule: a KeeperProgram container hangs
// until stopped; a TaskProgram container (or exec) is bound to an instance
// and gets its modelled StartDelay and Duration; other specs are declined.
func (g *Group) Behavior(s contract.Spec) (fake.Behavior, bool) {
	if len(s.Command) == 0 {
		return fake.Behavior{}, false
	}
	switch s.Command[0] {
	case KeeperProgram:
		return fake.Behavior{Hang: true}, true
	case TaskProgram:
	default:
		return fake.Behavior{}, false
	}
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	inst, k := g.bind(now)
	r := Record{
		TaskID: s.Env["MEGAFLOW_TASK_ID"], Instance: inst, Colocated: k, Called: now,
		Startup: g.model.Wall(g.model.Startup(g.d, g.mode, g.n)),
		Work:    g.model.Wall(time.Duration(float64(g.model.Work) * g.model.Slowdown(k, g.shape.TasksPerInstance))),
	}
	if inst >= 0 {
		g.ends[inst] = append(g.ends[inst], r.End())
	}
	g.records = append(g.records, r)
	return fake.Behavior{StartDelay: r.Startup, Duration: r.Work}, true
}

// bind returns the first instance with a free slot at now and how many
// tasks it then hosts with the new one; (-1, 1) when every slot is taken
// (the scheduler over-placed: the task runs unbound, uncontended).
func (g *Group) bind(now time.Time) (int, int) {
	for i := range g.ends {
		live := g.ends[i][:0]
		for _, e := range g.ends[i] {
			if e.After(now) {
				live = append(live, e)
			}
		}
		g.ends[i] = live
		if len(live) < g.shape.TasksPerInstance {
			return i, len(live) + 1
		}
	}
	return -1, 1
}

// Records returns a copy of the records so far, in start order.
func (g *Group) Records() []Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Record(nil), g.records...)
}

// InstanceSpans returns, per instance that hosted a task, when its first
// task was called and when its last task's work ended (wall time), sorted
// by instance: the span it is billed for after the run's start.
func (g *Group) InstanceSpans() [][2]time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	spans := map[int][2]time.Time{}
	for _, r := range g.records {
		if r.Instance < 0 {
			continue
		}
		s, ok := spans[r.Instance]
		if !ok || r.Called.Before(s[0]) {
			s[0] = r.Called
		}
		if r.End().After(s[1]) {
			s[1] = r.End()
		}
		spans[r.Instance] = s
	}
	keys := make([]int, 0, len(spans))
	for k := range spans {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	out := make([][2]time.Time, len(keys))
	for i, k := range keys {
		out[i] = spans[k]
	}
	return out
}

// Utilization returns the fraction of the held instances' CPU and memory
// allocated to tasks at t (a task holds its request from Called to End:
// start-up and work). Instances are held from start (the run's first
// submit) to the end of their span, as InstanceSpans gives; shape gives
// each instance's size and each task's request (Shape.TaskRequest). 0 when
// no instance is held at t.
func Utilization(recs []Record, spans [][2]time.Time, start time.Time, shape Shape, t time.Time) (cpu, mem float64) {
	held := 0
	for _, s := range spans {
		if !t.Before(start) && t.Before(s[1]) {
			held++
		}
	}
	if held == 0 {
		return 0, 0
	}
	busy := 0
	for _, r := range recs {
		if !t.Before(r.Called) && t.Before(r.End()) {
			busy++
		}
	}
	reqCPU, reqMem := shape.TaskRequest()
	cpu = float64(int64(busy)*reqCPU) / float64(int64(held)*shape.CPUMillis)
	mem = float64(int64(busy)*reqMem) / float64(int64(held)*shape.MemoryBytes)
	return min(cpu, 1), min(mem, 1)
}
