package worker

import (
	"strings"
	"sync"

	"github.com/megaflow/megaflow/internal/wire"
)

// outbox holds the attempt events on their way to the head: events not yet
// in a batch, and batches sent (or ready to send) but not yet acked. Batches
// keep their seq when they are sent again after a reconnect: delivery is at
// least once and the head deduplicates by attempt. Drivers add events from
// their goroutines; the session goroutine cuts batches, sends them and
// applies acks.
type outbox struct {
	maxBatch int

	mu      sync.Mutex
	nextSeq uint64
	pending []queued
	unacked []*batch
	ready   chan struct{} // signalled when pending becomes non-empty
	// waiters are closed once nothing is pending or unacked (emptied).
	waiters []chan struct{}
}

type queued struct {
	ev    *wire.AttemptEvent
	onAck func() // nil unless the sender waits for the ack
}

type batch struct {
	seq    uint64
	events []queued
}

// newOutbox returns an outbox whose first batch gets seq firstSeq.
func newOutbox(firstSeq uint64, maxBatch int) *outbox {
	return &outbox{maxBatch: maxBatch, nextSeq: firstSeq, ready: make(chan struct{}, 1)}
}

// cutMark ends a reason cut to the head's bound.
const cutMark = " [...]"

// maxEventReasonBytes is spec.MaxEventReasonBytes, the head's bound on an
// event's reason (TestOutboxCutsLongReasons checks they agree; the worker
// package's tests name a helper spec).
const maxEventReasonBytes = 16 << 10

// add queues ev; onAck, if not nil, is called (from the session goroutine)
// once the head acked the batch holding ev. It must not block.
// A reason over maxEventReasonBytes (a runtime's long error text) is
// cut to it: the head refuses a batch with a longer one.
func (o *outbox) add(ev *wire.AttemptEvent, onAck func()) {
	if r := ev.GetReason(); len(r) > maxEventReasonBytes {
		ev.Reason = strings.ToValidUTF8(r[:maxEventReasonBytes-len(cutMark)], "") + cutMark
	}
	o.mu.Lock()
	o.pending = append(o.pending, queued{ev: ev, onAck: onAck})
	o.mu.Unlock()
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// pendingLen returns how many events wait for a batch.
func (o *outbox) pendingLen() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pending)
}

// cut moves up to maxBatch pending events into a new batch, in order, and
// returns it as a message; nil when nothing is pending.
func (o *outbox) cut() *wire.EventBatch {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.pending) == 0 {
		return nil
	}
	n := min(len(o.pending), o.maxBatch)
	b := &batch{seq: o.nextSeq, events: o.pending[:n:n]}
	o.pending = o.pending[n:]
	if len(o.pending) == 0 {
		o.pending = nil
	}
	o.nextSeq++
	o.unacked = append(o.unacked, b)
	return b.message()
}

// unackedMessages returns every unacked batch, oldest first, to send again
// on a new stream.
func (o *outbox) unackedMessages() []*wire.EventBatch {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]*wire.EventBatch, len(o.unacked))
	for i, b := range o.unacked {
		out[i] = b.message()
	}
	return out
}

// ack drops every batch up to seq and returns the callbacks to run.
func (o *outbox) ack(seq uint64) []func() {
	o.mu.Lock()
	defer o.mu.Unlock()
	var cbs []func()
	i := 0
	for ; i < len(o.unacked) && o.unacked[i].seq <= seq; i++ {
		for _, q := range o.unacked[i].events {
			if q.onAck != nil {
				cbs = append(cbs, q.onAck)
			}
		}
	}
	o.unacked = o.unacked[i:]
	if len(o.pending) == 0 && len(o.unacked) == 0 {
		for _, ch := range o.waiters {
			close(ch)
		}
		o.waiters = nil
	}
	return cbs
}

// emptied returns a channel closed once an ack leaves nothing pending or
// unacked (at once when nothing is now): every event added before was
// committed by the head.
func (o *outbox) emptied() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	ch := make(chan struct{})
	if len(o.pending) == 0 && len(o.unacked) == 0 {
		close(ch)
		return ch
	}
	o.waiters = append(o.waiters, ch)
	return ch
}

// unackedLen returns how many batches wait for an ack.
func (o *outbox) unackedLen() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.unacked)
}

func (b *batch) message() *wire.EventBatch {
	m := &wire.EventBatch{Seq: b.seq, Events: make([]*wire.AttemptEvent, len(b.events))}
	for i, q := range b.events {
		m.Events[i] = q.ev
	}
	return m
}
