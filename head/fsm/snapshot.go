package fsm

import (
	"fmt"
	"io"

	"github.com/hashicorp/raft"
	"github.com/megaflow/megaflow/head/state"
)

// snapshot is a point-in-time view of the table; Persist streams it while
// the FSM goes on applying entries.
type snapshot struct {
	view *state.View
}

var _ raft.FSMSnapshot = (*snapshot)(nil)

// Snapshot captures the table as of the last applied entry. Raft calls it
// on the FSM goroutine; it copies nothing (an immutable memdb view), and the
// slow part, Persist, runs on raft's snapshot goroutine.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &snapshot{view: f.store.Snapshot()}, nil
}

// Persist writes the snapshot to sink (format.go) and closes it, or cancels
// it on error. Raft calls it on its snapshot goroutine.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := WriteSnapshot(sink, s.view); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot at index %d: %w", s.view.Index(), err)
	}
	return sink.Close()
}

// Release does nothing: the view holds no resources beyond memory.
func (s *snapshot) Release() {}

// Restore replaces the whole table with the snapshot read from rc and
// closes rc. The event ring starts empty at the snapshot's index: watchers
// with older cursors get OutOfRange. Raft calls it on the FSM goroutine,
// never concurrently with Apply. On error the table is left as it was.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	r := f.store.Restore()
	index, err := ReadSnapshot(rc, r)
	if err != nil {
		r.Abort()
		return fmt.Errorf("restore snapshot: %w", err)
	}
	r.Commit()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ring.reset(index)
	f.applied = index
	close(f.changed)
	f.changed = make(chan struct{})
	return nil
}
