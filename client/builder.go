package client

import (
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/spec"
)

// GraphBuilder assembles a GraphSpec in code: tasks, their dependencies,
// resources, queue type, execution mode, session, retries, timeouts and
// outputs. Methods return the builder so calls chain; nothing is checked
// until Build, which validates the whole graph as the head would. A
// GraphBuilder is not safe for concurrent use.
//
//	b := client.NewGraph("step-42").Tenant("team-a")
//	setup := b.Task("setup-0", "megaflow/swegym-moto:demo", "megaflow-agent", "setup").Session("rollout-0")
//	b.Task("rollout-0", "megaflow/swegym-moto:demo", "megaflow-agent", "rollout").
//		After(setup).Type("train").CPU(500).Memory(256<<20).Retries(2).Timeout(30 * time.Minute)
//	g, err := b.Build()
type GraphBuilder struct {
	g     *GraphSpec
	tasks []*TaskBuilder
}

// NewGraph starts a graph with id (empty: Submit picks one; a client-chosen
// id makes resubmission idempotent).
func NewGraph(id string) *GraphBuilder {
	return &GraphBuilder{g: &GraphSpec{Id: id}}
}

// Tenant sets the owning tenant (empty: "default").
func (b *GraphBuilder) Tenant(t string) *GraphBuilder { b.g.Tenant = t; return b }

// Name sets the human-readable name.
func (b *GraphBuilder) Name(n string) *GraphBuilder { b.g.Name = n; return b }

// Priority sets the priority tasks without their own inherit (higher runs
// first within a queue).
func (b *GraphBuilder) Priority(p int32) *GraphBuilder { b.g.Priority = p; return b }

// Label sets one graph label (e.g. megaflow.io/metric, the result field
// the head aggregates).
func (b *GraphBuilder) Label(k, v string) *GraphBuilder {
	if b.g.Labels == nil {
		b.g.Labels = map[string]string{}
	}
	b.g.Labels[k] = v
	return b
}

// Deadline sets the whole graph's deadline from submission, rounded up to
// whole seconds; 0: none.
func (b *GraphBuilder) Deadline(d time.Duration) *GraphBuilder {
	b.g.DeadlineSeconds = seconds(d)
	return b
}

// Task adds a batch task named name running command (argv) in image, and
// returns it for further settings. image may be "" for a task that runs
// as a plain process (Runtime("process")). Names are unique within a graph: a
// duplicate is reported by Build.
func (b *GraphBuilder) Task(name, image string, command ...string) *TaskBuilder {
	t := &TaskBuilder{s: &TaskSpec{Name: name, Image: image, Command: command}}
	b.tasks = append(b.tasks, t)
	b.g.Tasks = append(b.g.Tasks, t.s)
	return t
}

// Len returns the number of tasks added so far.
func (b *GraphBuilder) Len() int { return len(b.tasks) }

// Build validates the graph as the head would (names, dependencies that
// exist and form no cycle, resources, limits) and returns a copy of it;
// the builder may be changed and built again. Errors are
// errs.InvalidArgument and name the graph, the task and the field:
//
//	graph "step-42": task "eval": depends_on: unknown task "rollot"
func (b *GraphBuilder) Build() (*GraphSpec, error) {
	g := cloneGraph(b.g)
	if err := spec.Validate(spec.Normalize(cloneGraph(g)), spec.DefaultLimits()); err != nil {
		return nil, err
	}
	return g, nil
}

// TaskBuilder sets one task of a GraphBuilder. Its methods return it so
// calls chain.
type TaskBuilder struct {
	s *TaskSpec
}

// Name returns the task's name (for dependencies by name).
func (t *TaskBuilder) Name() string { return t.s.Name }

// After makes the task wait for the given tasks to succeed.
func (t *TaskBuilder) After(deps ...*TaskBuilder) *TaskBuilder {
	for _, d := range deps {
		t.s.DependsOn = append(t.s.DependsOn, d.s.Name)
	}
	return t
}

// AfterNames makes the task wait for the tasks of the same graph so named.
func (t *TaskBuilder) AfterNames(names ...string) *TaskBuilder {
	t.s.DependsOn = append(t.s.DependsOn, names...)
	return t
}

// RunOnUpstreamFailure makes the task run even when a dependency failed
// (aggregation, cleanup).
func (t *TaskBuilder) RunOnUpstreamFailure() *TaskBuilder { t.s.RunOnUpstreamFailure = true; return t }

func (t *TaskBuilder) res() *Resources {
	if t.s.Resources == nil {
		t.s.Resources = &Resources{}
	}
	return t.s.Resources
}

// CPU sets the CPU request in millicores (1000 = one core).
func (t *TaskBuilder) CPU(millis int64) *TaskBuilder { t.res().CpuMillis = millis; return t }

// Memory sets the memory request in bytes.
func (t *TaskBuilder) Memory(bytes int64) *TaskBuilder { t.res().MemoryBytes = bytes; return t }

// GPUs sets the number of whole GPUs and, when model is not empty, the GPU
// model they must be (substring match, e.g. "H100").
func (t *TaskBuilder) GPUs(n int32, model string) *TaskBuilder {
	t.res().Gpus, t.res().GpuModel = n, model
	return t
}

// Env sets one environment variable of the task.
func (t *TaskBuilder) Env(k, v string) *TaskBuilder {
	if t.s.Env == nil {
		t.s.Env = map[string]string{}
	}
	t.s.Env[k] = v
	return t
}

// Type sets the queue: "train", "eval", "synth" or "" (the default queue).
func (t *TaskBuilder) Type(q string) *TaskBuilder { t.s.Type = q; return t }

// Priority sets the priority within the queue (0 inherits the graph's).
func (t *TaskBuilder) Priority(p int32) *TaskBuilder { t.s.Priority = p; return t }

// Retries sets how many times a failed attempt is retried (0 to 100).
func (t *TaskBuilder) Retries(n int32) *TaskBuilder { t.s.MaxRetries = n; return t }

// Timeout sets the per-attempt timeout, rounded up to whole seconds; 0:
// none.
func (t *TaskBuilder) Timeout(d time.Duration) *TaskBuilder {
	t.s.TimeoutSeconds = seconds(d)
	return t
}

// Persistent runs the task in a warm container of the worker's pool
// instead of a fresh one.
func (t *TaskBuilder) Persistent() *TaskBuilder { t.s.Mode = ModePersistent; return t }

// Session runs the task in the one persistent container that every task
// of the graph with the same session shares (it implies Persistent).
func (t *TaskBuilder) Session(s string) *TaskBuilder {
	t.s.Mode, t.s.Session = ModePersistent, s
	return t
}

// Gang puts the task in the gang g of its graph: the gang's tasks start
// all at once, each on its own worker, or not at all (multi-node
// training), and are retried as a whole; each receives MEGAFLOW_GANG_RANK,
// MEGAFLOW_GANG_SIZE, MEGAFLOW_GANG_HOSTS and MEGAFLOW_GANG_LEADER_HOST
// (docs/placement.md).
func (t *TaskBuilder) Gang(g string) *TaskBuilder { t.s.Gang = g; return t }

// Outputs names paths inside the task whose files are kept as artifacts.
func (t *TaskBuilder) Outputs(paths ...string) *TaskBuilder {
	t.s.OutputPaths = append(t.s.OutputPaths, paths...)
	return t
}

// WorkDir sets the working directory of the command.
func (t *TaskBuilder) WorkDir(dir string) *TaskBuilder { t.s.WorkingDir = dir; return t }

// Network sets the container network ("none", the default, "bridge",
// "host" or a network the workers define).
func (t *TaskBuilder) Network(n string) *TaskBuilder { t.s.Network = n; return t }

// Runtime sets the worker runtime the task needs: "docker" (its image's
// isolation: never a process worker), "process" (a process-runtime
// worker only; then the image may be left out, unless the task is
// persistent), or "" (any worker, the default). Build refuses any other.
func (t *TaskBuilder) Runtime(r string) *TaskBuilder { t.s.Runtime = r; return t }

// Selector requires a worker label to match exactly.
func (t *TaskBuilder) Selector(k, v string) *TaskBuilder {
	if t.s.NodeSelector == nil {
		t.s.NodeSelector = map[string]string{}
	}
	t.s.NodeSelector[k] = v
	return t
}

// Service makes the task a long-running service published under svc.Name
// (a model server): it serves until stopped instead of running to
// completion.
func (t *TaskBuilder) Service(svc *ServiceSpec) *TaskBuilder {
	t.s.Kind, t.s.Service = KindService, svc
	return t
}

// UsesServices gives the task the endpoints of the named services (in env
// MEGAFLOW_SERVICE_<NAME>).
func (t *TaskBuilder) UsesServices(names ...string) *TaskBuilder {
	t.s.UsesServices = append(t.s.UsesServices, names...)
	return t
}

// Spec returns the task's spec as built so far (shared with the builder:
// changes to it show in the graph).
func (t *TaskBuilder) Spec() *TaskSpec { return t.s }

func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

func cloneGraph(g *GraphSpec) *GraphSpec { return proto.Clone(g).(*GraphSpec) }
