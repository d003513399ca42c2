package state

import (
	"fmt"
	"maps"
	"slices"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/resources"
	"github.com/megaflow/megaflow/internal/wire"
)

// ResourcesOf returns the quantities of a wire Resources (a task's request
// or a worker's capacity) that the table accounts: CPU, memory and whole
// GPUs (GPU model and memory are a matter of placement). nil is nothing,
// and negative amounts count as 0, so that a malformed spec cannot make
// room on a worker.
func ResourcesOf(w *wire.Resources) resources.Resources {
	return resources.Resources{
		CPUMillis:   max(w.GetCpuMillis(), 0),
		MemoryBytes: max(w.GetMemoryBytes(), 0),
		GPUs:        int64(max(w.GetGpus(), 0)),
	}
}

// resourcesToWire converts accounted quantities into their wire form.
func resourcesToWire(r resources.Resources) *wire.Resources {
	return &wire.Resources{CpuMillis: r.CPUMillis, MemoryBytes: r.MemoryBytes, Gpus: int32(r.GPUs)}
}

// Worker is a worker's row in the workers table. Like Task, it is immutable
// once inserted and may be read from any goroutine; the FSM changes a
// worker by inserting a modified copy.
//
// Allocated, ActiveAttempts and the GPUs in use are kept by the table
// itself, incrementally, from the attempts that hold the worker (see
// Attempt.Active): every write of a task row that opens or ends such an
// attempt adjusts them in the same transaction. View.VerifyAccounting
// checks them against the tasks.
type Worker struct {
	// Info is what the worker offers, as its last WorkerUpsert announced it;
	// shared with that command and immutable. Info.Id is the row's id.
	Info *wire.WorkerInfo
	// Status is ALIVE, DOWN or LEFT.
	Status wire.WorkerStatus
	// Reason says why the worker is DOWN or LEFT; empty while ALIVE.
	Reason string
	// Allocated is the sum of the resources of the tasks whose attempts
	// hold the worker; ActiveAttempts counts those attempts.
	Allocated      resources.Resources
	ActiveAttempts uint32
	// gpus maps each GPU UUID held by an active attempt on the worker to
	// the id of the attempt's task. Copied on write.
	gpus map[string]string
	// UpdateUnixNanos is the leader's time of the last change of status or
	// info; ModifyIndex the Raft index of the row's last change.
	UpdateUnixNanos int64
	ModifyIndex     uint64
}

// ID returns the worker's id (Info.Id).
func (w *Worker) ID() string { return w.Info.GetId() }

// Alive reports whether the worker is ALIVE: the only status in which it
// receives placements.
func (w *Worker) Alive() bool { return w.Status == wire.WorkerStatus_WORKER_STATUS_ALIVE }

// Capacity returns what the worker offers, as accounted (ResourcesOf).
func (w *Worker) Capacity() resources.Resources { return ResourcesOf(w.Info.GetCapacity()) }

// Free returns Capacity minus Allocated; negative where the worker holds
// more than it now offers.
func (w *Worker) Free() resources.Resources { return w.Capacity().Sub(w.Allocated) }

// GPUHolder returns the id of the task whose active attempt holds the GPU
// with uuid on this worker, or "" if the GPU is free (as far as the table
// knows: UUIDs are recorded only for attempts placed with them).
func (w *Worker) GPUHolder(uuid string) string { return w.gpus[uuid] }

// GPUsInUse returns the UUIDs of the GPUs held by active attempts on the
// worker, sorted. The scheduler calls it to pick free UUIDs.
func (w *Worker) GPUsInUse() []string {
	return slices.Sorted(maps.Keys(w.gpus))
}

// clone returns a copy of w for modification inside a Txn; the GPU map is
// copied too.
func (w *Worker) clone() *Worker {
	c := *w
	c.gpus = maps.Clone(w.gpus)
	return &c
}

// ToWire converts the row into its wire form. The result shares Info with
// the row: callers may marshal it but must not modify it. The GPUs in use
// are not part of the wire form (they follow from the tasks' attempts).
func (w *Worker) ToWire() *wire.Worker {
	return &wire.Worker{
		Info:            w.Info,
		Status:          w.Status,
		Reason:          w.Reason,
		Allocated:       resourcesToWire(w.Allocated),
		UpdateUnixNanos: w.UpdateUnixNanos,
		ModifyIndex:     w.ModifyIndex,
		ActiveAttempts:  w.ActiveAttempts,
	}
}

// WorkerFromWire converts a worker's wire form (as written by a snapshot)
// back into a row, taking ownership of its info. The GPUs in use are
// restored from the tasks (Restore.Finish). It returns InvalidArgument for a
// worker without an id.
func WorkerFromWire(w *wire.Worker) (*Worker, error) {
	if !validWorkerID(w.GetInfo().GetId()) {
		return nil, errs.New(errs.InvalidArgument, "worker %q: invalid id", w.GetInfo().GetId())
	}
	return &Worker{
		Info:            w.GetInfo(),
		Status:          w.GetStatus(),
		Reason:          w.GetReason(),
		Allocated:       ResourcesOf(w.GetAllocated()),
		ActiveAttempts:  w.GetActiveAttempts(),
		UpdateUnixNanos: w.GetUpdateUnixNanos(),
		ModifyIndex:     w.GetModifyIndex(),
	}, nil
}

// validWorkerID reports whether id can key the workers table: not empty
// and without a 0 byte (it ends index keys).
func validWorkerID(id string) bool {
	if id == "" {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] == 0 {
			return false
		}
	}
	return true
}

// UpsertWorker records the worker info describes as ALIVE with that info,
// inserting it or updating it (a DOWN or LEFT worker that comes back is
// ALIVE again; its old attempts were lost when it went down, so it holds
// nothing). What the worker holds is kept: a worker that re-announces
// itself keeps its attempts. The FSM calls it for OpWorkerUpsert. It
// returns whether the worker is new, or InvalidArgument for an invalid id
// (changing nothing).
func (t *Txn) UpsertWorker(info *wire.WorkerInfo, unixNanos int64) (created bool, err error) {
	id := info.GetId()
	if !validWorkerID(id) {
		return false, errs.New(errs.InvalidArgument, "worker %q: invalid id", id)
	}
	w := t.writableWorker(id)
	if w == nil {
		w = &Worker{}
		t.workers[id] = w
		created = true
	}
	w.Info = info
	w.Status, w.Reason = wire.WorkerStatus_WORKER_STATUS_ALIVE, ""
	w.UpdateUnixNanos, w.ModifyIndex = unixNanos, t.index
	return created, nil
}

// Losses counts what losing attempts did to their tasks.
type Losses struct {
	// Requeued counts tasks that went back to QUEUED for a new attempt.
	Requeued uint32
	// Failed counts tasks that FAILED, lost MaxLostAttempts times.
	Failed uint32
	// Stopped counts attempts of tasks already CANCELLED that ended.
	Stopped uint32
}

// Total returns how many attempts were lost.
func (l Losses) Total() uint32 { return l.Requeued + l.Failed + l.Stopped }

// Add counts one outcome of LoseAttempt (LossNone counts nothing).
func (l *Losses) Add(o Loss) {
	switch o {
	case LossRequeued:
		l.Requeued++
	case LossFailed:
		l.Failed++
	case LossStopped:
		l.Stopped++
	}
}

// WorkerDown declares the worker with id DOWN, or LEFT if left, with
// reason, and loses every attempt that holds it (in task id order) as
// LoseAttempt does, with the attempt reason "worker <id> lost: <reason>".
// The worker ends holding nothing; its sandbox snapshots stay in the table
// (unavailable until it is ALIVE again: View.SnapshotUnavailable). A
// worker already DOWN or LEFT takes the new status and reason. The FSM calls it for OpWorkerDown. It returns
// what the losses did, or NotFound for an unknown worker (changing
// nothing).
func (t *Txn) WorkerDown(id string, left bool, code wire.ReasonCode, reason string, unixNanos int64) (Losses, error) {
	w := t.writableWorker(id)
	if w == nil {
		return Losses{}, errs.New(errs.NotFound, "worker %q not found", id)
	}
	w.Status = wire.WorkerStatus_WORKER_STATUS_DOWN
	if left {
		w.Status = wire.WorkerStatus_WORKER_STATUS_LEFT
	}
	w.Reason = reason
	w.UpdateUnixNanos, w.ModifyIndex = unixNanos, t.index
	// Collect first: the loop writes the index it would walk.
	held := collect[*Task](get(t.taskTxn(), tableTasks, indexWorker, id))
	var l Losses
	why := LostReason(id, reason)
	for _, task := range held {
		l.Add(t.lose(task, attemptEnd{state: failed, code: code, reason: why}, unixNanos))
	}
	if w := t.Worker(id); w.ActiveAttempts != 0 || !w.Allocated.IsZero() || len(w.gpus) != 0 {
		panic(fmt.Sprintf("state: index %d: worker %q down but still holds %s in %d attempts", t.index, id, w.Allocated, w.ActiveAttempts))
	}
	return l, nil
}

// LostReason is the reason recorded on an attempt lost with its worker:
// "worker <id> lost: <reason>".
func LostReason(workerID, reason string) string {
	return "worker " + workerID + " lost: " + reason
}
