// Package clock owns MegaFlow's injected time: the Clock interface that
// everything which stamps, waits or expires reads (the head, the worker,
// the container runtimes, the Go client's retries), Real for production, and Fake, which moves
// only when a test says so (docs/leader.md, "One clock"). It imports
// nothing of the module, so any package may import it.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock is a source of time. Implementations are safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once, d after now; at once when
	// d <= 0.
	NewTimer(d time.Duration) Timer
	// After returns a channel that receives the time once, d after now; at
	// once when d <= 0. Its timer cannot be stopped: prefer NewTimer where
	// the caller may give up first.
	After(d time.Duration) <-chan time.Time
}

// Timer is a one-shot timer of a Clock. It behaves as a *time.Timer does
// since Go 1.23: after Stop or Reset returns, no value sent for the earlier
// arming can be received from C.
type Timer interface {
	// C returns the channel the timer sends its firing time on (one value
	// per arming; its capacity is at most 1).
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether it did so:
	// false when the timer had already fired and its value was received, or
	// was stopped already.
	Stop() bool
	// Reset re-arms the timer to fire d after now (at once when d <= 0),
	// discarding the earlier arming; it reports whether the timer was still
	// armed, as Stop does.
	Reset(d time.Duration) bool
}

// Real returns the system clock: the time package.
func Real() Clock { return realClock{} }

type realClock struct{}

var _ Clock = realClock{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) NewTimer(d time.Duration) Timer         { return realTimer{time.NewTimer(d)} }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

type realTimer struct{ t *time.Timer }

var _ Timer = realTimer{}

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// Sleep waits d on clock c, or until done closes (a nil done never does);
// it reports whether the full time passed. With d <= 0 it returns true at
// once unless done is closed already (then either result). Loops that run every interval until their context ends call it with
// ctx.Done().
func Sleep(c Clock, d time.Duration, done <-chan struct{}) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-done:
		return false
	}
}

// WithTimeout returns a copy of parent that is cancelled d after now on
// clock c (or when parent ends, or when cancel is called), as
// context.WithTimeout does on the real clock; a Fake moves it only when
// the test advances time. Call cancel to release its timer and goroutine.
// Once the timer fired, the context's Err is context.Canceled and its
// context.Cause is context.DeadlineExceeded.
func WithTimeout(parent context.Context, c Clock, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	t := c.NewTimer(d)
	done := make(chan struct{})
	go func() { // owned by the returned context: ends with it or with the timer
		defer t.Stop()
		select {
		case <-t.C():
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() { close(done) })
		cancel(context.Canceled)
	}
}
