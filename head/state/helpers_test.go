package state

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/wire"
)

// ts is a short task spec: "name" or "name<dep1,dep2" with an optional
// "@type" and "!prio", e.g. "c<a,b@eval!3".
func ts(s string) *wire.TaskSpec {
	spec := &wire.TaskSpec{}
	if i := strings.IndexByte(s, '!'); i >= 0 {
		fmt.Sscan(s[i+1:], &spec.Priority)
		s = s[:i]
	}
	if i := strings.IndexByte(s, '@'); i >= 0 {
		spec.Type, s = s[i+1:], s[:i]
	}
	name, deps, _ := strings.Cut(s, "<")
	spec.Name = name
	if deps != "" {
		spec.DependsOn = strings.Split(deps, ",")
	}
	return spec
}

// buildRows builds a graph and its tasks as the FSM does.
func buildRows(id, tenant string, specs ...string) (*Graph, []*Task) {
	g := &Graph{ID: id, Tenant: tenant}
	var tasks []*Task
	byName := map[string]*Task{}
	for _, s := range specs {
		spec := ts(s)
		tid := id + "/" + spec.Name
		t := &Task{ID: tid, GraphID: tid[:len(id)], Spec: spec, State: queued, Priority: spec.Priority,
			DepsRemaining: uint32(len(spec.DependsOn))}
		if t.DepsRemaining > 0 {
			t.State = pending
		}
		tasks = append(tasks, t)
		byName[spec.Name] = t
	}
	for _, t := range tasks {
		for _, d := range t.Spec.DependsOn {
			byName[d].Dependents = append(byName[d].Dependents, t.Spec.Name)
		}
	}
	return g, tasks
}

// testStore wraps a Store with an index counter.
type testStore struct {
	*Store
	tb    testing.TB
	index uint64
}

func newTestStore(tb testing.TB) *testStore { return &testStore{Store: NewStore(), tb: tb} }

// write runs fn in one transaction at the next index and returns its events.
func (s *testStore) write(fn func(txn *Txn)) []*wire.Event {
	s.tb.Helper()
	s.index++
	txn := s.WriteTxn(s.index)
	fn(txn)
	ev := txn.TakeEvents()
	txn.Commit()
	return ev
}

func (s *testStore) insert(id, tenant string, specs ...string) {
	s.tb.Helper()
	g, tasks := buildRows(id, tenant, specs...)
	s.write(func(txn *Txn) {
		if err := txn.InsertGraph(g, tasks, int64(s.index)); err != nil {
			s.tb.Fatal(err)
		}
	})
}

// move moves a task through states, one entry each; entering ASSIGNED
// opens an attempt on worker.
func (s *testStore) move(id, worker string, path ...wire.TaskState) {
	s.tb.Helper()
	for _, to := range path {
		s.write(func(txn *Txn) {
			cur := txn.Task(id)
			if to == assigned {
				if txn.Worker(worker) == nil {
					if _, err := txn.UpsertWorker(&wire.WorkerInfo{Id: worker}, int64(s.index)); err != nil {
						s.tb.Fatal(err)
					}
				}
				txn.move(cur, assigned, wire.ReasonCode_REASON_CODE_UNSPECIFIED, "", int64(s.index), func(n *Task) {
					n.Attempts = append(slices.Clone(n.Attempts), Attempt{Number: uint32(len(n.Attempts) + 1),
						WorkerID: worker, State: assigned, AssignUnixNanos: int64(s.index)})
				})
				return
			}
			task, err := txn.SetTaskState(id, to, "r", int64(s.index))
			if err != nil {
				s.tb.Fatal(err)
			}
			if IsTerminal(to) {
				if _, err := txn.ResolveDependents(task, int64(s.index)); err != nil {
					s.tb.Fatal(err)
				}
			}
		})
	}
}

func (s *testStore) task(id string) *Task {
	s.tb.Helper()
	t := s.Snapshot().Task(id)
	if t == nil {
		s.tb.Fatalf("no task %q", id)
	}
	return t
}

func stateNames(tasks ...*Task) string {
	var out []string
	for _, t := range tasks {
		out = append(out, strings.TrimPrefix(t.State.String(), "TASK_STATE_"))
	}
	return strings.Join(out, " ")
}

func ids(tasks []*Task) []string {
	var out []string
	for _, t := range tasks {
		out = append(out, t.ID)
	}
	return out
}

func evString(evs []*wire.Event) string {
	var out []string
	for _, ev := range evs {
		if ev.TaskId != "" {
			out = append(out, fmt.Sprintf("%d/%d %s %s", ev.Index, ev.Seq, ev.TaskId,
				strings.TrimPrefix(ev.TaskState.String(), "TASK_STATE_")))
		} else {
			out = append(out, fmt.Sprintf("%d/%d %s %s", ev.Index, ev.Seq, ev.GraphId,
				strings.TrimPrefix(ev.GraphState.String(), "GRAPH_STATE_")))
		}
	}
	return strings.Join(out, ", ")
}
