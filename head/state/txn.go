package state

import (
	"fmt"
	"maps"
	"slices"

	memdb "github.com/hashicorp/go-memdb"
	"github.com/megaflow/megaflow/internal/wire"
)

// Txn is a write transaction on the table, used only by the FSM on its
// goroutine: WriteTxn, then the writes of one or more log entries (SetIndex
// between entries), then Commit. Until Commit, readers see nothing of it.
//
// Every change is stamped with the current entry's index and produces the
// events the FSM publishes (TakeEvents). Methods that refuse a change return
// an *errs.Error and change nothing; a broken invariant of the table (a
// dependent that does not exist, a count below zero) panics, since it means
// the log or the code that applies it is corrupt.
type Txn struct {
	mem   *memdb.Txn
	index uint64
	// seq numbers the events of the current entry.
	seq    uint32
	events []*wire.Event
	// graphs holds the graphs written by this transaction: private copies,
	// modified in place and inserted at Commit.
	graphs map[string]*Graph
	// workers holds the workers written by this transaction, like graphs.
	workers map[string]*Worker
	// nextQueueSeq is the counter of the meta table, loaded on first use.
	nextQueueSeq uint64
	// cancelling is the graph being cancelled by CancelGraph, which makes
	// DeriveGraphState say CANCELLED.
	cancelling string
	// taskWrites counts the task rows written or deleted (TaskWrites).
	taskWrites int
	// tasks holds the task rows written by this transaction and not yet
	// inserted into mem: a task moved several times in one batch of
	// entries (assigned, running, ended) is inserted once, each insert
	// costing a copy of its path in every index tree. Task returns them;
	// every read of the tasks table by an index (taskTxn) and Commit
	// insert them first (flushTasks).
	tasks map[string]*Task
	// tasksPlain is set while every row of tasks is a plain batch task's
	// (not of a gang or a service, not a sandbox from a snapshot), which
	// no version of is in the gang, service or snapshot-use index: those
	// indexes can then be read without flushing tasks (taskTxnFor).
	tasksPlain bool
}

// TaskWrites returns how many task rows the transaction wrote or deleted
// so far (a row written several times counts each time, though it is
// inserted once). The FSM commits a batch of entries in several transactions when
// it grows past a bound: go-memdb closes the watch channels of at most
// 8,192 changed tree nodes one by one, and past that walks every tree
// whole (go-immutable-radix's slowNotify), a cost in the size of the table,
// not of the change (bench/README.md, "Applying big graphs").
func (t *Txn) TaskWrites() int { return t.taskWrites }

// WriteTxn starts a write transaction for the log entry at index. The FSM
// calls it on its goroutine; only one may be open at a time.
func (s *Store) WriteTxn(index uint64) *Txn {
	return &Txn{mem: s.db.Load().Txn(true), index: index, graphs: map[string]*Graph{},
		workers: map[string]*Worker{}, tasks: map[string]*Task{}}
}

// SetIndex moves the transaction on to the next log entry of a batch: later
// changes carry index, and event numbering restarts at 0.
func (t *Txn) SetIndex(index uint64) {
	t.index, t.seq = index, 0
}

// Index returns the index of the entry being applied.
func (t *Txn) Index() uint64 { return t.index }

// TakeEvents returns the events produced since the last call, in commit
// order, and forgets them. The FSM calls it before Commit.
func (t *Txn) TakeEvents() []*wire.Event {
	ev := t.events
	t.events = nil
	return ev
}

// Commit writes the modified graphs, workers and counters, records the entry's
// index as the last applied, and makes everything visible to new views at
// once.
func (t *Txn) Commit() {
	t.flushTasks()
	for _, id := range slices.Sorted(maps.Keys(t.graphs)) {
		must(t.mem.Insert(tableGraphs, t.graphs[id]))
	}
	for _, id := range slices.Sorted(maps.Keys(t.workers)) {
		must(t.mem.Insert(tableWorkers, t.workers[id]))
	}
	must(t.mem.Insert(tableMeta, &metaRow{Key: metaIndex, Value: t.index}))
	if t.nextQueueSeq != 0 {
		must(t.mem.Insert(tableMeta, &metaRow{Key: metaQueueSeq, Value: t.nextQueueSeq}))
	}
	t.mem.Commit()
}

// Abort drops every change of the transaction.
func (t *Txn) Abort() { t.mem.Abort() }

// Graph returns the graph with id as this transaction sees it, or nil. The
// result must not be modified.
func (t *Txn) Graph(id string) *Graph {
	if g, ok := t.graphs[id]; ok {
		return g
	}
	if raw := first(t.mem, tableGraphs, indexID, id); raw != nil {
		return raw.(*Graph)
	}
	return nil
}

// Task returns the task with id as this transaction sees it, or nil. The
// result must not be modified.
func (t *Txn) Task(id string) *Task {
	if task, ok := t.tasks[id]; ok {
		return task
	}
	if raw := first(t.mem, tableTasks, indexID, id); raw != nil {
		return raw.(*Task)
	}
	return nil
}

// Worker returns the worker with id as this transaction sees it, or nil.
// The result must not be modified.
func (t *Txn) Worker(id string) *Worker {
	if w, ok := t.workers[id]; ok {
		return w
	}
	if raw := first(t.mem, tableWorkers, indexID, id); raw != nil {
		return raw.(*Worker)
	}
	return nil
}

// writableWorker returns the transaction's private copy of a worker, or nil
// if there is no such worker.
func (t *Txn) writableWorker(id string) *Worker {
	if w, ok := t.workers[id]; ok {
		return w
	}
	raw := first(t.mem, tableWorkers, indexID, id)
	if raw == nil {
		return nil
	}
	w := raw.(*Worker).clone()
	t.workers[id] = w
	return w
}

// TasksOfGraph returns the tasks of the graph with id in id order.
func (t *Txn) TasksOfGraph(id string) []*Task { return tasksOfGraph(t.taskTxn(), id) }

// writableGraph returns the transaction's private copy of a graph, which
// must exist.
func (t *Txn) writableGraph(id string) *Graph {
	if g, ok := t.graphs[id]; ok {
		return g
	}
	raw := first(t.mem, tableGraphs, indexID, id)
	if raw == nil {
		panic(fmt.Sprintf("state: index %d: task of missing graph %q", t.index, id))
	}
	g := raw.(*Graph).clone()
	t.graphs[id] = g
	return g
}

// putTask writes n, the new version of old (nil for a new task), and
// moves the accounting of the workers along (account).
func (t *Txn) putTask(old, n *Task) {
	t.account(old, n)
	t.taskWrites++
	if len(t.tasks) == 0 {
		t.tasksPlain = true
	}
	t.tasks[n.ID] = n
	t.tasksPlain = t.tasksPlain && !inSparseIndexes(n)
}

// inSparseIndexes reports whether any version of task may be in the gang,
// service or snapshot-use index: those depend on its spec alone being of
// a gang, a service or a sandbox from a snapshot (and then on its state).
func inSparseIndexes(task *Task) bool {
	return task.Spec.GetGang() != "" || task.ServiceName() != "" || task.Spec.GetSandbox().GetFromSnapshot() != ""
}

// flushTasks inserts the task rows written since the last flush into mem,
// in id order (neighbours share the tree nodes copied for the first).
func (t *Txn) flushTasks() {
	if len(t.tasks) == 0 {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(t.tasks)) {
		must(t.mem.Insert(tableTasks, t.tasks[id]))
	}
	clear(t.tasks)
}

// taskTxn returns mem with every task row written so far in it: for a
// read of the tasks table by any index but the id (Task reads the rows
// not yet flushed itself).
func (t *Txn) taskTxn() *memdb.Txn {
	t.flushTasks()
	return t.mem
}

// taskTxnFor is taskTxn for a read of the gang, service or snapshot-use
// index (index), which rows of plain batch tasks never enter: those need
// not be flushed first.
func (t *Txn) taskTxnFor(index string) *memdb.Txn {
	switch index {
	case indexGang, indexService, indexGraphService, indexSnapshotUse:
		if t.tasksPlain {
			return t.mem
		}
	}
	return t.taskTxn()
}

// takeQueueSeq hands out the next queue_seq.
func (t *Txn) takeQueueSeq() uint64 {
	if t.nextQueueSeq == 0 {
		t.nextQueueSeq = max(readMeta(t.mem, metaQueueSeq), 1)
	}
	s := t.nextQueueSeq
	t.nextQueueSeq++
	return s
}

// emit records an event of the current entry.
func (t *Txn) emit(ev *wire.Event) {
	ev.Index, ev.Seq = t.index, t.seq
	t.seq++
	t.events = append(t.events, ev)
}

func (t *Txn) emitTask(task *Task, nanos int64) {
	ev := &wire.Event{UnixNanos: nanos, GraphId: task.GraphID, TaskId: task.ID,
		TaskState: task.State, Reason: task.Reason, ReasonCode: task.ReasonCode}
	if a := task.CurrentAttempt(); a != nil {
		ev.Attempt, ev.WorkerId = a.Number, a.WorkerID
	}
	t.emit(ev)
}

func (t *Txn) emitGraph(g *Graph, nanos int64) {
	t.emit(&wire.Event{UnixNanos: nanos, GraphId: g.ID, GraphState: g.State, Reason: g.Reason})
}
