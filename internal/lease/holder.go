package lease

import "time"

// maxPending bounds the renewals a Holder remembers as sent and not yet
// acked: at one per heartbeat (2 s) that is over two minutes of them.
const maxPending = 64

// Holder is a worker's side of its lease: the renewals it sent, the newest
// one the head acked, and the lapses it went through. It is pure (every
// method takes now) and not safe for concurrent use: the worker guards it
// with a mutex (worker/lease.go).
type Holder struct {
	pending []sentRenewal // ascending by id
	renewed time.Time     // send time of the newest acked renewal; zero: never renewed
	cfg     Config        // as the head last said
	// lapsedAt is when the worker last found its lease lapsed (Expired
	// true when asked, or an ack arriving after the expiry); zero: never.
	// lapsedExpiry is the expiry that lapse passed.
	lapsedAt, lapsedExpiry time.Time
}

type sentRenewal struct {
	id int64
	at time.Time
}

// Sent records that renewal id (the heartbeat's unix nanos, growing) was
// sent at at. Ids that do not grow are ignored.
func (h *Holder) Sent(id int64, at time.Time) {
	if n := len(h.pending); n > 0 && h.pending[n-1].id >= id {
		return
	}
	if len(h.pending) == maxPending {
		h.pending = h.pending[1:]
	}
	h.pending = append(h.pending, sentRenewal{id: id, at: at})
}

// Acked applies the head's ack of renewal id with the lease cfg the head
// runs. The lease then counts from when renewal id was sent. lapsed reports
// that the lease had expired at now before this ack: the caller must stop
// every attempt it holds before it does anything else (the head may have
// re-queued them, or will once it sees no other renewal in time). An ack of
// an id not sent, or older than the newest acked, changes nothing.
func (h *Holder) Acked(id int64, cfg Config, now time.Time) (lapsed bool) {
	i := 0
	for i < len(h.pending) && h.pending[i].id < id {
		i++
	}
	if i == len(h.pending) || h.pending[i].id != id {
		return false
	}
	at := h.pending[i].at
	h.pending = h.pending[i+1:]
	lapsed = h.Expired(now)
	if at.After(h.renewed) {
		h.renewed = at
	}
	h.cfg = cfg
	return lapsed
}

// Held reports whether the worker holds a lease at all: it has had one
// renewal acked.
func (h *Holder) Held() bool { return !h.renewed.IsZero() }

// Expired reports whether the lease has lapsed at now: it was held, and
// Duration has passed since the newest acked renewal was sent. A Holder
// never renewed is not expired (there is nothing it may run). It records
// the lapse for LapsedSince.
func (h *Holder) Expired(now time.Time) bool {
	if !h.Held() || now.Before(h.renewed.Add(h.cfg.Duration)) {
		return false
	}
	h.lapsedAt, h.lapsedExpiry = now, h.renewed.Add(h.cfg.Duration)
	return true
}

// LapsedSince reports whether the lease lapsed at t or later (as Expired
// or Acked found it), or is expired at now, and the expiry that lapse
// passed: an attempt that began at t and whose container ended at or
// after that expiry ended because of it (its init killed it) or must be
// stopped; one that ended before it ended on its own.
func (h *Holder) LapsedSince(t, now time.Time) (lapsed bool, expiry time.Time) {
	if h.Expired(now) || !h.lapsedAt.IsZero() && !h.lapsedAt.Before(t) {
		return true, h.lapsedExpiry
	}
	return false, time.Time{}
}

// Renewed returns the send time of the newest acked renewal (zero: none).
func (h *Holder) Renewed() time.Time { return h.renewed }

// ExpiresAt returns when the worker's view of its lease expires (zero
// when it holds none).
func (h *Holder) ExpiresAt() time.Time {
	if !h.Held() {
		return time.Time{}
	}
	return h.renewed.Add(h.cfg.Duration)
}

// InitExpiry returns the expiry the worker writes to its lease file for
// its tasks' inits: ExpiresAt plus InitSlack (zero when it holds none).
func (h *Holder) InitExpiry() time.Time {
	if !h.Held() {
		return time.Time{}
	}
	return h.renewed.Add(h.cfg.Duration + InitSlack(h.cfg.Margin))
}

// Config returns the lease the head last gave (zero before the first ack).
func (h *Holder) Config() Config { return h.cfg }
