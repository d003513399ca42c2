package fsm

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// Cursor is a position in the event stream: the event (Index, Seq) and
// everything before it. The zero Cursor means "from the oldest retained
// event".
type Cursor struct {
	// Index is the Raft index of the entry that made the event.
	Index uint64
	// Seq is the event's position among the events of that entry, from 0.
	Seq uint32
}

// Less reports whether c is before d.
func (c Cursor) Less(d Cursor) bool {
	return c.Index < d.Index || (c.Index == d.Index && c.Seq < d.Seq)
}

// String formats c as "index/seq".
func (c Cursor) String() string { return fmt.Sprintf("%d/%d", c.Index, c.Seq) }

func cursorOf(ev *wire.Event) Cursor { return Cursor{Index: ev.Index, Seq: ev.Seq} }

// ring keeps the most recent events in commit order.
type ring struct {
	buf   []*wire.Event
	start int // position of the oldest event
	n     int
	// floor is the newest event no longer retained (or the restored
	// index): a cursor before it has missed events.
	floor Cursor
	// last holds, for each graph with a retained event, the cursor of its
	// newest one: a watcher of one graph with nothing new skips the scan
	// of every other graph's events (EventsAfter), which made each change
	// cost O(watchers x events) once hundreds of clients waited.
	last map[string]Cursor
}

func newRing(size int) ring {
	return ring{buf: make([]*wire.Event, size), last: map[string]Cursor{}}
}

func (r *ring) at(i int) *wire.Event { return r.buf[(r.start+i)%len(r.buf)] }

func (r *ring) push(ev *wire.Event) {
	if ev.GraphId != "" {
		r.last[ev.GraphId] = cursorOf(ev)
	}
	if r.n < len(r.buf) {
		r.buf[(r.start+r.n)%len(r.buf)] = ev
		r.n++
		return
	}
	old := r.buf[r.start]
	r.floor = cursorOf(old)
	if c, ok := r.last[old.GraphId]; ok && c == r.floor { // its graph's newest leaves the ring
		delete(r.last, old.GraphId)
	}
	r.buf[r.start] = ev
	r.start = (r.start + 1) % len(r.buf)
}

// reset empties the ring after a restore at index: every cursor before the
// end of that entry is out of range.
func (r *ring) reset(index uint64) {
	clear(r.buf)
	clear(r.last)
	r.start, r.n = 0, 0
	r.floor = Cursor{Index: index, Seq: math.MaxUint32}
}

// EventsAfter returns up to limit retained events after cursor after, of the
// graph graphID ("" for all), in commit order, and the cursor to pass next
// time: the last event examined, so that a filtered watcher moves past
// events of other graphs. The zero cursor starts at the oldest retained
// event. It returns OutOfRange if events after the cursor are no longer
// retained (the watcher must list the table again and watch from its
// index), and InvalidArgument if limit is not positive. Watch handlers call it
// from any goroutine; the events returned are shared and must not be
// modified.
func (f *FSM) EventsAfter(after Cursor, graphID string, limit int) ([]*wire.Event, Cursor, error) {
	if limit <= 0 {
		return nil, after, errs.New(errs.InvalidArgument, "fsm: events: limit %d must be positive", limit)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := &f.ring
	next := after
	if after.Less(r.floor) {
		if after != (Cursor{}) {
			return nil, after, errs.New(errs.OutOfRange,
				"watch cursor %s is older than the oldest retained event (after %s); read the state again and watch from its index",
				after, r.floor)
		}
		next = r.floor
	}
	if graphID != "" && r.n > 0 {
		if c, ok := r.last[graphID]; !ok || !after.Less(c) {
			// No event of the graph after the cursor: move to the newest.
			if newest := cursorOf(r.at(r.n - 1)); next.Less(newest) {
				next = newest
			}
			return nil, next, nil
		}
	}
	i := sort.Search(r.n, func(i int) bool { return after.Less(cursorOf(r.at(i))) })
	var out []*wire.Event
	for ; i < r.n && len(out) < limit; i++ {
		ev := r.at(i)
		next = cursorOf(ev)
		if graphID == "" || ev.GraphId == graphID {
			out = append(out, ev)
		}
	}
	return out, next, nil
}

// LastCursor returns the cursor of the end of the stream as of the last
// apply, for a watch that starts now.
func (f *FSM) LastCursor() Cursor {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Cursor{Index: f.applied, Seq: math.MaxUint32}
}

// Changed returns a channel that is closed by the next apply or restore.
// Watchers take it before EventsAfter and wait on it when they got nothing,
// so that no event is missed.
func (f *FSM) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// AppliedIndex returns the index of the last entry applied (or restored).
func (f *FSM) AppliedIndex() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

// WaitForIndex blocks until the entry at index has been applied or ctx ends,
// returning ctx's error wrapped in the latter case. Reads with a min_index
// call it from their gRPC goroutine before taking a View.
func (f *FSM) WaitForIndex(ctx context.Context, index uint64) error {
	for {
		f.mu.Lock()
		applied, ch := f.applied, f.changed
		f.mu.Unlock()
		if applied >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for index %d (applied %d): %w", index, applied, ctx.Err())
		}
	}
}
