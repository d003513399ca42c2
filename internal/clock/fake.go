package clock

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Fake is a Clock that moves only when a test calls Advance or Set, so a
// task "running" for an hour ends the moment the test says so. Its timers
// (NewTimer's and After's) fire during Advance or Set, in the order of
// their deadlines (ties in the order they were armed), each sending its
// deadline. Safe for concurrent use.
//
// A test that advances the clock past a goroutine's wait must first know
// that the goroutine armed its timer: it waits (with a deadline) for
// Waiters to reach what it expects, then advances.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64                // arming order, for ties
	timers map[*fakeTimer]uint64 // armed timers -> their seq
}

var _ Clock = (*Fake)(nil)

// NewFake returns a Fake that reads start until it is moved.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, timers: map[*fakeTimer]uint64{}}
}

// Now returns the fake's time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the fake reaches now+d; at once
// (sending now) when d <= 0.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, ch: make(chan time.Time, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armLocked(t, d)
	return t
}

// After returns the channel of a timer that fires when the fake reaches
// now+d; at once when d <= 0. It counts in Waiters until it fires.
func (f *Fake) After(d time.Duration) <-chan time.Time { return f.NewTimer(d).C() }

// Advance moves the fake forward by d and fires, in deadline order, every
// timer that came due. A negative d moves it back and fires nothing.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(f.now.Add(d))
}

// Set moves the fake to t and fires, in deadline order, every timer due by
// then. Moving back fires nothing; armed timers keep their deadlines.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(t)
}

// Waiters returns how many timers are armed: created by NewTimer or After
// and neither fired nor stopped. A test waits for it to reach what it
// expects (one per goroutine it knows is waiting) before it advances the
// fake, so nothing misses the step.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// Next returns the earliest deadline among the armed timers; ok is false
// when none is armed. A test that waits for one particular timer (a retry
// backoff among heartbeats) compares it with Now.
func (f *Fake) Next() (at time.Time, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for t := range f.timers {
		if !ok || t.at.Before(at) {
			at, ok = t.at, true
		}
	}
	return at, ok
}

// armLocked discards t's earlier arming and any value it left unreceived,
// then arms it for now+d, or fires it at once when d <= 0. It reports
// whether t was still armed (or its value unreceived). f.mu is held.
func (f *Fake) armLocked(t *fakeTimer, d time.Duration) bool {
	was := f.disarmLocked(t)
	if d <= 0 {
		t.ch <- f.now
		return was
	}
	f.seq++
	t.at = f.now.Add(d)
	f.timers[t] = f.seq
	return was
}

// disarmLocked removes t from the armed timers and drains a value it sent
// that nobody received; it reports whether either was there. f.mu is held.
func (f *Fake) disarmLocked(t *fakeTimer) bool {
	_, armed := f.timers[t]
	delete(f.timers, t)
	select {
	case <-t.ch:
		return true
	default:
		return armed
	}
}

// setLocked moves the fake to now and fires the timers due. f.mu is held.
// An armed timer's channel is empty (arming drained it), so the sends do
// not block.
func (f *Fake) setLocked(now time.Time) {
	f.now = now
	var due []*fakeTimer
	for t := range f.timers {
		if !t.at.After(now) {
			due = append(due, t)
		}
	}
	slices.SortFunc(due, func(a, b *fakeTimer) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return cmp.Compare(f.timers[a], f.timers[b])
	})
	for _, t := range due {
		delete(f.timers, t)
		t.ch <- t.at
	}
}

// fakeTimer is a Timer of a Fake; its fields are guarded by f.mu.
type fakeTimer struct {
	f  *Fake
	at time.Time // deadline while armed
	ch chan time.Time
}

var _ Timer = (*fakeTimer)(nil)

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.f.disarmLocked(t)
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.f.armLocked(t, d)
}
