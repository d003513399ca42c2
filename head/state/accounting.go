package state

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/megaflow/megaflow/internal/resources"
)

// Worker accounting. A worker's Allocated, ActiveAttempts and GPUs in use
// are the sums over the attempts that hold it (Attempt.Active). They are
// kept incrementally: putTask compares a task's old and new rows and moves
// the accounting from the old row's active attempt to the new one's, so
// that every path that opens or ends an attempt (a plan, a worker's event,
// a lost worker, a cancel, SetTaskState) keeps it right without doing
// anything itself. Restore recomputes the GPUs in use, which snapshots do
// not carry, and VerifyAccounting recomputes everything from the tasks.

// account moves the workers' accounting from the active attempt of old (nil
// for a new task) to that of n.
func (t *Txn) account(old, n *Task) {
	var oa *Attempt
	if old != nil {
		oa = old.ActiveAttempt()
	}
	na := n.ActiveAttempt()
	if oa != nil && na != nil && oa.Number == na.Number && oa.WorkerID == na.WorkerID {
		return // the same attempt, e.g. started
	}
	if oa != nil {
		t.release(old, oa)
	}
	if na != nil {
		t.hold(n, na)
	}
}

// hold books the resources and GPUs of task's attempt a on its worker. A
// missing worker or a GPU already held is a broken invariant: Place checks
// both before it opens an attempt.
func (t *Txn) hold(task *Task, a *Attempt) {
	w := t.writableWorker(a.WorkerID)
	if w == nil {
		panic(fmt.Sprintf("state: index %d: task %q: attempt %d on unknown worker %q", t.index, task.ID, a.Number, a.WorkerID))
	}
	w.Allocated = w.Allocated.Add(ResourcesOf(task.Spec.GetResources()))
	w.ActiveAttempts++
	w.ModifyIndex = t.index
	for _, u := range a.GPUUUIDs {
		if h, held := w.gpus[u]; held {
			panic(fmt.Sprintf("state: index %d: GPU %q of worker %q held by %q and %q", t.index, u, w.ID(), h, task.ID))
		}
		if w.gpus == nil {
			w.gpus = map[string]string{}
		}
		w.gpus[u] = task.ID
	}
}

// release gives back what hold booked for task's attempt a.
func (t *Txn) release(task *Task, a *Attempt) {
	w := t.writableWorker(a.WorkerID)
	if w == nil {
		panic(fmt.Sprintf("state: index %d: task %q: attempt %d on unknown worker %q", t.index, task.ID, a.Number, a.WorkerID))
	}
	left := w.Allocated.Sub(ResourcesOf(task.Spec.GetResources()))
	if w.ActiveAttempts == 0 || left.CPUMillis < 0 || left.MemoryBytes < 0 || left.GPUs < 0 {
		panic(fmt.Sprintf("state: index %d: worker %q: releasing task %q from %d attempts holding %s",
			t.index, w.ID(), task.ID, w.ActiveAttempts, w.Allocated))
	}
	w.Allocated = left
	w.ActiveAttempts--
	w.ModifyIndex = t.index
	for _, u := range a.GPUUUIDs {
		if w.gpus[u] != task.ID {
			panic(fmt.Sprintf("state: index %d: worker %q: GPU %q released by %q but held by %q", t.index, w.ID(), u, task.ID, w.gpus[u]))
		}
		delete(w.gpus, u)
	}
	if len(w.gpus) == 0 {
		w.gpus = nil
	}
}

// usage is what the active attempts on one worker hold, recomputed from the
// tasks.
type usage struct {
	alloc  resources.Resources
	active uint32
	gpus   map[string]string
}

// addUsage adds task's active attempt, if any, to use.
func addUsage(use map[string]*usage, task *Task) error {
	a := task.ActiveAttempt()
	if a == nil {
		return nil
	}
	u := use[a.WorkerID]
	if u == nil {
		u = &usage{}
		use[a.WorkerID] = u
	}
	u.alloc = u.alloc.Add(ResourcesOf(task.Spec.GetResources()))
	u.active++
	for _, g := range a.GPUUUIDs {
		if h, held := u.gpus[g]; held {
			return fmt.Errorf("worker %q: GPU %q held by the attempts of %q and %q", a.WorkerID, g, h, task.ID)
		}
		if u.gpus == nil {
			u.gpus = map[string]string{}
		}
		u.gpus[g] = task.ID
	}
	return nil
}

// VerifyAccounting recomputes what every worker holds from the tasks and
// compares it with the workers table: Allocated, ActiveAttempts and the GPUs
// in use must equal the sums over the active attempts on the worker; no GPU
// may be held by two attempts; only a task's current attempt may be active,
// only while the task is ASSIGNED, RUNNING or CANCELLED, and always while it
// is ASSIGNED or RUNNING with attempts; every active attempt's worker must
// exist. It returns nil or every discrepancy found, joined. It reads the
// whole table: tests call it after random histories, and an operator's debug
// endpoint may.
func (v *View) VerifyAccounting() error {
	var problems []error
	use := map[string]*usage{}
	for t := range v.Tasks() {
		for i := range t.Attempts {
			if t.Attempts[i].Active() && i != len(t.Attempts)-1 {
				problems = append(problems, fmt.Errorf("task %q: attempt %d is active but not current", t.ID, t.Attempts[i].Number))
			}
		}
		a := t.ActiveAttempt()
		switch {
		case a == nil && IsActive(t.State) && len(t.Attempts) > 0:
			problems = append(problems, fmt.Errorf("task %q is %s but its attempt %d ended %s",
				t.ID, t.State, t.CurrentAttempt().Number, t.CurrentAttempt().State))
		case a != nil && !IsActive(t.State) && t.State != cancelled && !(t.State == queued && t.Spec.GetGang() != ""):
			problems = append(problems, fmt.Errorf("task %q is %s but its attempt %d is still %s", t.ID, t.State, a.Number, a.State))
		}
		if err := addUsage(use, t); err != nil {
			problems = append(problems, err)
		}
	}
	for _, w := range v.Workers() {
		u := use[w.ID()]
		delete(use, w.ID())
		if u == nil {
			u = &usage{}
		}
		if u.alloc != w.Allocated || u.active != w.ActiveAttempts || !maps.Equal(u.gpus, w.gpus) {
			problems = append(problems, fmt.Errorf("worker %q: table says %d attempts holding %s and GPUs %v; its attempts hold %s in %d attempts and GPUs %v",
				w.ID(), w.ActiveAttempts, w.Allocated, w.gpus, u.alloc, u.active, u.gpus))
		}
		if len(v.AssignedTo(w.ID())) != int(u.active) {
			problems = append(problems, fmt.Errorf("worker %q: index lists %d tasks, %d attempts hold it",
				w.ID(), len(v.AssignedTo(w.ID())), u.active))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(use)) {
		problems = append(problems, fmt.Errorf("%d active attempts on unknown worker %q", use[id].active, id))
	}
	return errors.Join(problems...)
}
