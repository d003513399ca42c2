package state

import (
	"iter"

	memdb "github.com/hashicorp/go-memdb"
	"github.com/megaflow/megaflow/internal/wire"
)

// View is an immutable view of the table at one Raft index. gRPC handlers,
// the scheduler and the snapshot writer read it from any goroutine, at the
// same time, for as long as they like. Nothing it returns is ever modified.
type View struct {
	db           *memdb.MemDB
	index        uint64
	nextQueueSeq uint64
}

func (v *View) txn() *memdb.Txn { return v.db.Txn(false) }

// Index returns the last Raft index applied to the table in this view.
func (v *View) Index() uint64 { return v.index }

// NextQueueSeq returns the queue_seq the next task to enter QUEUED will get
// (at least 1). The snapshot writer records it.
func (v *View) NextQueueSeq() uint64 { return max(v.nextQueueSeq, 1) }

// Graph returns the graph with id, or nil.
func (v *View) Graph(id string) *Graph {
	if raw := first(v.txn(), tableGraphs, indexID, id); raw != nil {
		return raw.(*Graph)
	}
	return nil
}

// Task returns the task with id ("<graph id>/<task name>"), or nil.
func (v *View) Task(id string) *Task {
	if raw := first(v.txn(), tableTasks, indexID, id); raw != nil {
		return raw.(*Task)
	}
	return nil
}

// Worker returns the worker with id, or nil.
func (v *View) Worker(id string) *Worker {
	if raw := first(v.txn(), tableWorkers, indexID, id); raw != nil {
		return raw.(*Worker)
	}
	return nil
}

// Workers returns every worker, whatever its status, in id order. The
// leader's liveness loop and the scheduler call it.
func (v *View) Workers() []*Worker {
	return collect[*Worker](get(v.txn(), tableWorkers, indexID))
}

// AliveWorkers returns the ALIVE workers in id order: those that may
// receive placements.
func (v *View) AliveWorkers() []*Worker {
	return collect[*Worker](get(v.txn(), tableWorkers, indexStatus, wire.WorkerStatus_WORKER_STATUS_ALIVE))
}

// AssignedTo returns the tasks whose current attempt holds the worker with
// id (Task.ActiveAttempt), in task id order: the tasks ASSIGNED or RUNNING
// there, and the CANCELLED ones whose attempt the worker has not yet
// reported ended (Task.Stopping), which it must be told to stop. The
// worker stream on the leader calls it to send assignments and stops and
// to reconcile what a worker announces.
func (v *View) AssignedTo(workerID string) []*Task {
	return collect[*Task](get(v.txn(), tableTasks, indexWorker, workerID))
}

// TasksOfGraph returns the tasks of the graph with id in id order; none if
// the graph does not exist.
func (v *View) TasksOfGraph(id string) []*Task {
	return tasksOfGraph(v.txn(), id)
}

func tasksOfGraph(txn *memdb.Txn, id string) []*Task {
	var out []*Task
	it := get(txn, tableTasks, indexID+"_prefix", id+"/")
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*Task))
	}
	return out
}

// QueuedTasks iterates the QUEUED tasks of one queue (a task spec's type;
// "" is the default queue) in scheduling order: priority highest first,
// then queue_seq oldest first. The scheduler calls it on the leader.
func (v *View) QueuedTasks(queue string) iter.Seq[*Task] {
	return rows[*Task](func(txn *memdb.Txn) memdb.ResultIterator {
		return get(txn, tableTasks, indexState, queued, queue)
	}, v)
}

// Graphs iterates all graphs in id order.
func (v *View) Graphs() iter.Seq[*Graph] {
	return rows[*Graph](func(txn *memdb.Txn) memdb.ResultIterator {
		return get(txn, tableGraphs, indexID)
	}, v)
}

// Tasks iterates all tasks in id order.
func (v *View) Tasks() iter.Seq[*Task] {
	return rows[*Task](func(txn *memdb.Txn) memdb.ResultIterator {
		return get(txn, tableTasks, indexID)
	}, v)
}

// StagedChunks iterates all staged chunks by graph id and chunk number.
func (v *View) StagedChunks() iter.Seq[*StagedChunk] {
	return rows[*StagedChunk](func(txn *memdb.Txn) memdb.ResultIterator {
		return get(txn, tableStaged, indexID)
	}, v)
}

// StagedGraphs summarizes the graphs with staged chunks, by graph id. The
// leader's sweeper calls it to drop submissions that never finished.
func (v *View) StagedGraphs() []StagedGraph {
	var out []StagedGraph
	for c := range v.StagedChunks() {
		if n := len(out); n == 0 || out[n-1].GraphID != c.GraphID {
			out = append(out, StagedGraph{GraphID: c.GraphID, FirstUnixNanos: c.Command.GetUnixNanos(),
				Chunks: c.Command.GetChunks()})
		}
		s := &out[len(out)-1]
		s.Staged++
		s.FirstUnixNanos = min(s.FirstUnixNanos, c.Command.GetUnixNanos())
	}
	return out
}

// collect reads every row of it.
func collect[T any](it memdb.ResultIterator) []T {
	var out []T
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(T))
	}
	return out
}

// rows adapts a memdb iterator to a typed sequence that opens a fresh
// iterator each time it is ranged over.
func rows[T any](open func(*memdb.Txn) memdb.ResultIterator, v *View) iter.Seq[T] {
	return func(yield func(T) bool) {
		it := open(v.txn())
		for raw := it.Next(); raw != nil; raw = it.Next() {
			if !yield(raw.(T)) {
				return
			}
		}
	}
}

// Queued iterates every QUEUED task of every queue, ordered by queue name,
// then priority (higher first), then queue_seq (FIFO). The scheduler's
// round reads it.
func (v *View) Queued() iter.Seq[*Task] {
	return rows[*Task](func(txn *memdb.Txn) memdb.ResultIterator {
		return get(txn, tableTasks, indexState, queued)
	}, v)
}

// QueuedFirst iterates the first n QUEUED tasks (n > 0) of each queue, in
// Queued's order, skipping the rest of each queue without reading it: the
// tasks a round would consider first, at a cost that does not grow with
// the queues' length. The leader plans the placements a command carries
// from them (head's carried plans).
func (v *View) QueuedFirst(n int) iter.Seq[*Task] {
	return func(yield func(*Task) bool) {
		txn := v.txn()
		key := []byte{byte(queued)}
		for {
			it := lowerBound(txn, tableTasks, indexState, key)
			var q string
			taken := 0
			for raw := it.Next(); ; raw = it.Next() {
				if raw == nil {
					return
				}
				t := raw.(*Task)
				if t.State != queued {
					return
				}
				if taken == 0 || t.Queue() != q {
					q, taken = t.Queue(), 0
				}
				if !yield(t) {
					return
				}
				if taken++; taken >= n {
					break
				}
			}
			// The next queue: its keys follow every key of q, whose name
			// ends with a 0 byte in the index (taskStateKey).
			key = append(append([]byte{byte(queued)}, q...), 1)
		}
	}
}

// GraphsInState iterates the graphs in state s, in id order. The leader's
// deadline loop reads the RUNNING ones.
func (v *View) GraphsInState(s wire.GraphState) iter.Seq[*Graph] {
	return rows[*Graph](func(txn *memdb.Txn) memdb.ResultIterator {
		return get(txn, tableGraphs, indexState, s)
	}, v)
}
