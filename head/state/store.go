package state

import (
	"fmt"
	"sync/atomic"

	memdb "github.com/hashicorp/go-memdb"
)

// Store is the task table. Reads go through Snapshot from any goroutine;
// writes go through WriteTxn and Restore from the FSM's goroutine only (one
// writer at a time, as Raft applies entries).
type Store struct {
	// db is swapped whole by Restore; readers load it atomically.
	db atomic.Pointer[memdb.MemDB]
}

// NewStore returns an empty table. The head creates one per FSM.
func NewStore() *Store {
	s := &Store{}
	s.db.Store(newDB())
	return s
}

func newDB() *memdb.MemDB {
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		panic(fmt.Sprintf("state: invalid schema: %v", err)) // static; a bug
	}
	return db
}

// Snapshot returns an immutable view of the table as of the last committed
// write. It is cheap (no copy) and safe to call and use from any goroutine;
// later writes never change what it shows.
func (s *Store) Snapshot() *View {
	db := s.db.Load().Snapshot()
	v := &View{db: db}
	txn := db.Txn(false)
	v.index = readMeta(txn, metaIndex)
	v.nextQueueSeq = readMeta(txn, metaQueueSeq)
	return v
}

// Fork returns a new table holding what v shows, which writes then change
// independently of v and of the table v came from (go-memdb's snapshot:
// no copy until written, and a snapshot's commits notify no watcher of the
// table it came from). The leader applies a command to a fork to plan on
// its outcome before proposing it (fsm.Speculate).
func (v *View) Fork() *Store {
	s := &Store{}
	s.db.Store(v.db.Snapshot())
	return s
}

func readMeta(txn *memdb.Txn, key string) uint64 {
	raw, err := txn.First(tableMeta, indexID, key)
	if err != nil {
		panic(fmt.Sprintf("state: read meta %q: %v", key, err))
	}
	if raw == nil {
		return 0
	}
	return raw.(*metaRow).Value
}

// must panics on a memdb error. memdb fails only on schema misuse (unknown
// table or index, bad arguments), which is a bug in this package.
func must(err error) {
	if err != nil {
		panic(fmt.Sprintf("state: %v", err))
	}
}

// first returns the first row of table whose index matches args, or nil.
func first(txn *memdb.Txn, table, index string, args ...any) any {
	raw, err := txn.First(table, index, args...)
	must(err)
	return raw
}

// get iterates the rows of table whose index key starts with the key of
// args.
func get(txn *memdb.Txn, table, index string, args ...any) memdb.ResultIterator {
	it, err := txn.Get(table, index, args...)
	must(err)
	return it
}

// lowerBound iterates the rows of table from the first whose index key is
// at least key.
func lowerBound(txn *memdb.Txn, table, index string, key []byte) memdb.ResultIterator {
	it, err := txn.LowerBound(table, index, rawKey(key))
	must(err)
	return it
}
