package state

import (
	memdb "github.com/hashicorp/go-memdb"
)

// Restore fills a new, empty table from a snapshot and then replaces the
// store's table with it in one step. The FSM's Restore uses it on the FSM
// goroutine: Store.Restore, the rows in any order, Meta, then Commit (or
// Abort). Views taken before Commit keep showing the old table.
type Restore struct {
	store *Store
	db    *memdb.MemDB
	mem   *memdb.Txn
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

// Staged adds a staged chunk.
func (r *Restore) Staged(c *StagedChunk) error { return r.mem.Insert(tableStaged, c) }

// Meta sets the last applied index and the next queue_seq.
func (r *Restore) Meta(index, nextQueueSeq uint64) error {
	if err := r.mem.Insert(tableMeta, &metaRow{Key: metaIndex, Value: index}); err != nil {
		return err
	}
	return r.mem.Insert(tableMeta, &metaRow{Key: metaQueueSeq, Value: nextQueueSeq})
}

// Commit replaces the store's table with the restored one.
func (r *Restore) Commit() {
	r.mem.Commit()
	r.store.db.Store(r.db)
}

// Abort drops the restored rows; the store keeps its table.
func (r *Restore) Abort() { r.mem.Abort() }
