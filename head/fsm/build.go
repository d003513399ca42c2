package fsm

import (
	"strings"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// defaultTenant owns graphs submitted without a tenant.
const defaultTenant = "default"

// buildGraph turns the chunks of a submission into a graph row and its task
// rows, ready for Txn.InsertGraph. The last chunk's header describes the
// graph. The leader validated the spec; this checks again what would break
// the table (names, dependencies, cycles, the task count) and refuses the
// graph with InvalidArgument or FailedPrecondition rather than corrupt it.
func buildGraph(chunks []*wire.SubmitGraphCommand) (*state.Graph, []*state.Task, error) {
	lastCmd := chunks[len(chunks)-1]
	h := lastCmd.GetHeader()
	id := h.GetId()
	total := 0
	for _, c := range chunks {
		total += len(c.GetTasks())
	}
	if uint32(total) != lastCmd.GetTaskCount() {
		return nil, nil, errs.New(errs.FailedPrecondition,
			"submit graph %q: chunks hold %d tasks, header says %d; submit every chunk again",
			id, total, lastCmd.GetTaskCount())
	}
	specs := make([]*wire.TaskSpec, 0, total)
	for _, c := range chunks {
		specs = append(specs, c.GetTasks()...)
	}
	index := make(map[string]int32, total)
	for i, s := range specs {
		name := s.GetName()
		if !validName(name) {
			return nil, nil, errs.New(errs.InvalidArgument, "graph %q: task %d: invalid name %q", id, i, name)
		}
		if _, dup := index[name]; dup {
			return nil, nil, errs.New(errs.InvalidArgument, "graph %q: two tasks named %q", id, name)
		}
		index[name] = int32(i)
	}
	dag, err := newDAG(id, specs, index)
	if err != nil {
		return nil, nil, err
	}
	tenant := h.GetTenant()
	if tenant == "" {
		tenant = defaultTenant
	}
	g := &state.Graph{
		ID:              id,
		Tenant:          tenant,
		Name:            h.GetName(),
		Priority:        h.GetPriority(),
		Labels:          h.GetLabels(),
		DeadlineSeconds: h.GetDeadlineSeconds(),
		SpecDigest:      lastCmd.GetSpecDigest(),
	}
	tasks := make([]*state.Task, total)
	for i, s := range specs {
		tid := id + "/" + s.GetName()
		t := &state.Task{
			ID:            tid,
			GraphID:       tid[:len(id)],
			Tenant:        tenant,
			Spec:          s,
			State:         wire.TaskState_TASK_STATE_QUEUED,
			Priority:      s.GetPriority(),
			DepsRemaining: uint32(len(s.GetDependsOn())),
			Dependents:    dag.dependents(specs, i),
		}
		if t.Priority == 0 {
			t.Priority = h.GetPriority()
		}
		if t.DepsRemaining > 0 {
			t.State = wire.TaskState_TASK_STATE_PENDING
		}
		tasks[i] = t
	}
	return g, tasks, nil
}

// validName reports whether s can be a graph id or a task name without
// breaking the table's keys: not empty, no '/' (it separates graph and task
// in task ids), no 0 byte (it ends index keys). The leader checks the
// stricter rules of the API.
func validName(s string) bool {
	return s != "" && !strings.ContainsAny(s, "/\x00")
}

// dag holds a graph's reverse edges: the dependents of task i are
// edges[offsets[i]:offsets[i+1]], in task order.
type dag struct {
	offsets []int32
	edges   []int32
	// names holds the dependents' names of all tasks in one allocation.
	names []string
}

// newDAG checks the dependencies of specs (known names, no task depending on
// itself or twice on the same task, no cycle) and builds the reverse edges.
func newDAG(graphID string, specs []*wire.TaskSpec, index map[string]int32) (*dag, error) {
	n := len(specs)
	d := &dag{offsets: make([]int32, n+1)}
	for i, s := range specs {
		deps := s.GetDependsOn()
		for k, name := range deps {
			j, ok := index[name]
			switch {
			case !ok:
				return nil, errs.New(errs.InvalidArgument, "graph %q: task %q depends on unknown task %q",
					graphID, s.GetName(), name)
			case int(j) == i:
				return nil, errs.New(errs.InvalidArgument, "graph %q: task %q depends on itself", graphID, name)
			}
			for _, earlier := range deps[:k] {
				if earlier == name {
					return nil, errs.New(errs.InvalidArgument, "graph %q: task %q lists dependency %q twice",
						graphID, s.GetName(), name)
				}
			}
			d.offsets[j+1]++
		}
	}
	for i := range n {
		d.offsets[i+1] += d.offsets[i]
	}
	d.edges = make([]int32, d.offsets[n])
	fill := make([]int32, n)
	copy(fill, d.offsets[:n])
	for i, s := range specs {
		for _, name := range s.GetDependsOn() {
			j := index[name]
			d.edges[fill[j]] = int32(i)
			fill[j]++
		}
	}
	// Kahn's algorithm: a graph is acyclic iff every task can be ordered.
	waiting := make([]int32, n)
	ready := make([]int32, 0, n)
	for i, s := range specs {
		waiting[i] = int32(len(s.GetDependsOn()))
		if waiting[i] == 0 {
			ready = append(ready, int32(i))
		}
	}
	for k := 0; k < len(ready); k++ {
		for _, c := range d.edges[d.offsets[ready[k]]:d.offsets[ready[k]+1]] {
			if waiting[c]--; waiting[c] == 0 {
				ready = append(ready, c)
			}
		}
	}
	if len(ready) < n {
		for i := range n {
			if waiting[i] > 0 {
				return nil, errs.New(errs.InvalidArgument,
					"graph %q: dependencies form a cycle; task %q can never become ready", graphID, specs[i].GetName())
			}
		}
	}
	return d, nil
}

// dependents returns the names of the dependents of task i. They share
// the specs' name strings and one backing array for the whole graph, capped
// so that an append can never write into a neighbour's names.
func (d *dag) dependents(specs []*wire.TaskSpec, i int) []string {
	if d.names == nil {
		d.names = make([]string, len(d.edges))
		for k, c := range d.edges {
			d.names[k] = specs[c].GetName()
		}
	}
	a, b := d.offsets[i], d.offsets[i+1]
	if a == b {
		return nil
	}
	return d.names[a:b:b]
}
