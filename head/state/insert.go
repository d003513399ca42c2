package state

import (
	"fmt"

	"github.com/megaflow/megaflow/internal/errs"
)

// InsertGraph adds a new graph and its tasks, which it takes ownership of
// (stamping indexes, times and queue_seq). Tasks must be fully built by the
// caller: ids "<graph id>/<name>", unique; initial states PENDING or QUEUED;
// deps and dependents consistent. QUEUED tasks get queue_seq in slice order.
// The graph's counts and state are computed here. Events: the graph's, then
// each task's in slice order. It returns AlreadyExists if the graph exists
// and InvalidArgument for a task that does not belong to it or starts in a
// state other than PENDING or QUEUED, changing nothing.
func (t *Txn) InsertGraph(g *Graph, tasks []*Task, unixNanos int64) error {
	if t.Graph(g.ID) != nil {
		return errs.New(errs.AlreadyExists, "graph %q already exists", g.ID)
	}
	var counts StateCounts
	for _, task := range tasks {
		if task.GraphID != g.ID || len(task.ID) <= len(g.ID)+1 || task.ID[:len(g.ID)+1] != g.ID+"/" {
			return errs.New(errs.InvalidArgument, "task %q: not of graph %q", task.ID, g.ID)
		}
		if !CanTransition(unspecified, task.State) {
			return errs.New(errs.InvalidArgument, "task %q: cannot start in state %s", task.ID, task.State)
		}
		counts[task.State]++
	}
	g.TaskCount = uint32(len(tasks))
	g.Counts = counts
	g.State = DeriveGraphState(counts, g.TaskCount, false)
	g.CreateIndex, g.ModifyIndex = t.index, t.index
	g.CreateUnixNanos = unixNanos
	if IsGraphTerminal(g.State) {
		g.FinishUnixNanos = unixNanos
	}
	t.graphs[g.ID] = g
	t.emitGraph(g, unixNanos)
	for _, task := range tasks {
		if t.Task(task.ID) != nil {
			panic(fmt.Sprintf("state: index %d: duplicate task %q", t.index, task.ID))
		}
		task.Tenant = g.Tenant
		task.CreateIndex, task.ModifyIndex = t.index, t.index
		task.CreateUnixNanos, task.UpdateUnixNanos = unixNanos, unixNanos
		if task.State == queued {
			task.QueueSeq = t.takeQueueSeq()
			task.QueuedUnixNanos = unixNanos
		}
		t.putTask(nil, task)
		t.emitTask(task, unixNanos)
	}
	return nil
}
