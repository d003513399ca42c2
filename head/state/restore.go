package state

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	memdb "github.com/hashicorp/go-memdb"
)

// Restore fills a new, empty table from a snapshot and then replaces the
// store's table with it in one step. The FSM's Restore uses it on the FSM
// goroutine: Store.Restore, the rows in any order, Meta, Finish, then Commit
// (or Abort). Views taken before Commit keep showing the old table.
type Restore struct {
	store    *Store
	db       *memdb.MemDB
	mem      *memdb.Txn
	finished bool
}

// Restore starts a restore.
func (s *Store) Restore() *Restore {
	db := newDB()
	return &Restore{store: s, db: db, mem: db.Txn(true)}
}

// Graph adds a graph row, which the restore takes ownership of.
func (r *Restore) Graph(g *Graph) error { return r.mem.Insert(tableGraphs, g) }

// Task adds a task row, which the restore takes ownership of.
func (r *Restore) Task(t *Task) error { return r.mem.Insert(tableTasks, t) }

// Worker adds a worker row, which the restore takes ownership of. Its GPUs
// in use are filled in by Finish.
func (r *Restore) Worker(w *Worker) error {
	if w.Info == nil || !validWorkerID(w.ID()) {
		return fmt.Errorf("worker %q: invalid id", w.ID())
	}
	return r.mem.Insert(tableWorkers, w)
}

// Staged adds a staged chunk.
func (r *Restore) Staged(c *StagedChunk) error { return r.mem.Insert(tableStaged, c) }

// Meta sets the last applied index and the next queue_seq.
func (r *Restore) Meta(index, nextQueueSeq uint64) error {
	if err := r.mem.Insert(tableMeta, &metaRow{Key: metaIndex, Value: index}); err != nil {
		return err
	}
	return r.mem.Insert(tableMeta, &metaRow{Key: metaQueueSeq, Value: nextQueueSeq})
}

// Finish completes the restored rows after the last one: it recomputes each
// worker's GPUs in use from the active attempts (snapshots do not carry
// them) and checks that every worker's Allocated and ActiveAttempts agree
// with those attempts and that every active attempt's worker exists. It
// returns every discrepancy, joined: a snapshot that disagrees with itself
// must not become the table. Commit calls it if the caller did not.
func (r *Restore) Finish() error {
	r.finished = true
	use := map[string]*usage{}
	var problems []error
	it, err := r.mem.Get(tableTasks, indexWorker)
	if err != nil {
		return err
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if err := addUsage(use, raw.(*Task)); err != nil {
			problems = append(problems, err)
		}
	}
	var workers []*Worker
	wit, err := r.mem.Get(tableWorkers, indexID)
	if err != nil {
		return err
	}
	for raw := wit.Next(); raw != nil; raw = wit.Next() {
		workers = append(workers, raw.(*Worker))
	}
	for _, w := range workers {
		u := use[w.ID()]
		delete(use, w.ID())
		if u == nil {
			u = &usage{}
		}
		if u.alloc != w.Allocated || u.active != w.ActiveAttempts {
			problems = append(problems, fmt.Errorf("worker %q: snapshot says %d attempts holding %s; its attempts hold %s in %d",
				w.ID(), w.ActiveAttempts, w.Allocated, u.alloc, u.active))
		}
		if len(u.gpus) > 0 {
			c := w.clone()
			c.gpus = u.gpus
			if err := r.mem.Insert(tableWorkers, c); err != nil {
				return err
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(use)) {
		problems = append(problems, fmt.Errorf("%d active attempts on unknown worker %q", use[id].active, id))
	}
	return errors.Join(problems...)
}

// Commit replaces the store's table with the restored one.
func (r *Restore) Commit() {
	if !r.finished {
		_ = r.Finish() // the caller chose not to check
	}
	r.mem.Commit()
	r.store.db.Store(r.db)
}

// Abort drops the restored rows; the store keeps its table.
func (r *Restore) Abort() { r.mem.Abort() }
