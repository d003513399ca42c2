package state

import "github.com/megaflow/megaflow/internal/errs"

// DeleteGraph removes graph id and its tasks from the table and returns
// how many tasks it removed. Only a finished graph may go: every task
// terminal and no attempt still holding a worker, so no accounting moves.
// An archived graph (archive.go) loses its summary, with no task to
// remove. The FSM calls it for OpDeleteGraph. Errors: NotFound (no such
// graph, live or archived), FailedPrecondition (naming the first task that
// is not done); nothing changes then.
func (t *Txn) DeleteGraph(id string) (uint32, error) {
	g := t.Graph(id)
	if g == nil {
		if t.DropArchived([]string{id}) == 1 {
			return 0, nil
		}
		return 0, errs.New(errs.NotFound, "graph %q not found", id)
	}
	tasks := t.TasksOfGraph(id)
	for _, task := range tasks {
		if !IsTerminal(task.State) || task.ActiveAttempt() != nil {
			return 0, errs.New(errs.FailedPrecondition,
				"graph %q: task %q is %s with its attempt still on a worker or not finished; cancel the graph and wait until it ended, then delete it",
				id, task.ID, task.State)
		}
	}
	for _, task := range tasks {
		t.taskWrites++
		must(t.mem.Delete(tableTasks, task))
	}
	// The graph may live in the table, in this transaction's private
	// copies (written earlier in the same batch, or created by it), or in
	// both. Forget the copy, so that Commit does not write it back, and
	// delete the row if there is one: a batch must end where applying its
	// entries one by one ends.
	delete(t.graphs, id)
	if raw := first(t.mem, tableGraphs, indexID, id); raw != nil {
		must(t.mem.Delete(tableGraphs, raw))
	}
	return uint32(len(tasks)), nil
}
