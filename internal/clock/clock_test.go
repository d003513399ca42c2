package clock

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// received returns the value waiting on ch, if any, without blocking.
func received(ch <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-ch:
		return v, true
	default:
		return time.Time{}, false
	}
}

func TestFakeTimer(t *testing.T) {
	cases := []struct {
		name string
		// run drives a fresh fake and its timer of 10 s; it returns whether
		// the timer should have a value waiting at the end, and which.
		run     func(t *testing.T, f *Fake, tm Timer) (fired bool, at time.Time)
		waiters int // armed timers at the end: 1 when tm is still armed
	}{
		{"not yet due", func(t *testing.T, f *Fake, tm Timer) (bool, time.Time) {
			f.Advance(10*time.Second - time.Nanosecond)
			return false, time.Time{}
		}, 1},
		{"fires at its exact deadline", func(t *testing.T, f *Fake, tm Timer) (bool, time.Time) {
			f.Advance(10*time.Second - time.Nanosecond)
			f.Advance(time.Nanosecond)
			return true, t0.Add(10 * time.Second)
		}, 0},
		{"sends its deadline when passed by far", func(t *testing.T, f *Fake, tm Timer) (bool, time.Time) {
			f.Advance(time.Hour)
			return true, t0.Add(10 * time.Second)
		}, 0},
		{"Set fires as Advance does", func(t *testing.T, f *Fake, tm Timer) (bool, time.Time) {
			f.Set(t0.Add(10 * time.Second))
			return true, t0.Add(10 * time.Second)
		}, 0},
		{"moving back fires nothing", func(t *testing.T, f *Fake, tm Timer) (bool, time.Time) {
			f.Advance(-time.Hour)
			f.Set(t0.Add(-time.Minute))
			return false, time.Time{}
		}, 1},
		{"Stop before the deadline", func(t *testing.T, f *Fake, tm Timer) (bool, time.Time) {
			if !tm.Stop() {
				t.Error("Stop of an armed timer = false")
			}
			f.Advance(time.Hour)
			return false, time.Time{}
		}, 0},
		{"Stop after it fired and was received", func(t *testing.T, f *Fake, tm Timer) (bool, time.Time) {
			f.Advance(time.Hour)
			if _, ok := received(tm.C()); !ok {
				t.Fatal("not fired")
			}
			if tm.Stop() {
				t.Error("Stop of a fired, received timer = true")
			}
			return false, time.Time{}
		}, 0},
		{"Stop after it fired, unreceived, discards the value", func(t *testing.T, f *Fake, tm Timer) (bool, time.Time) {
			f.Advance(time.Hour)
			if !tm.Stop() {
				t.Error("Stop of a fired, unreceived timer = false (time.Timer says true since Go 1.23)")
			}
			return false, time.Time{}
		}, 0},
		{"Reset while armed moves the deadline", func(t *testing.T, f *Fake, tm Timer) (bool, time.Time) {
			f.Advance(5 * time.Second)
			if !tm.Reset(time.Minute) {
				t.Error("Reset of an armed timer = false")
			}
			f.Advance(time.Minute - time.Nanosecond)
			if _, ok := received(tm.C()); ok {
				t.Error("fired at its old deadline")
			}
			f.Advance(time.Nanosecond)
			return true, t0.Add(5*time.Second + time.Minute)
		}, 0},
		{"Reset after it fired, unreceived, discards the stale value", func(t *testing.T, f *Fake, tm Timer) (bool, time.Time) {
			f.Advance(time.Hour)
			if !tm.Reset(time.Second) {
				t.Error("Reset of a fired, unreceived timer = false")
			}
			return false, time.Time{}
		}, 1},
		{"Reset after it fired and was received re-arms", func(t *testing.T, f *Fake, tm Timer) (bool, time.Time) {
			f.Advance(time.Hour)
			<-tm.C()
			if tm.Reset(time.Second) {
				t.Error("Reset of a fired, received timer = true")
			}
			f.Advance(time.Second)
			return true, t0.Add(time.Hour + time.Second)
		}, 0},
		{"Reset to 0 fires at once", func(t *testing.T, f *Fake, tm Timer) (bool, time.Time) {
			f.Advance(time.Second)
			tm.Reset(0)
			return true, t0.Add(time.Second)
		}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake(t0)
			tm := f.NewTimer(10 * time.Second)
			wantFired, wantAt := tc.run(t, f, tm)
			if got := f.Waiters(); got != tc.waiters {
				t.Errorf("Waiters = %d, want %d", got, tc.waiters)
			}
			v, ok := received(tm.C())
			switch {
			case ok != wantFired:
				t.Errorf("fired = %v (%v), want %v", ok, v, wantFired)
			case ok && !v.Equal(wantAt):
				t.Errorf("sent %v, want its deadline %v", v, wantAt)
			}
			if stopped := tm.Stop(); stopped != (tc.waiters == 1) {
				t.Errorf("final Stop = %v, want %v", stopped, tc.waiters == 1)
			}
			if f.Waiters() != 0 {
				t.Errorf("Waiters = %d after Stop, want 0", f.Waiters())
			}
		})
	}
}

func TestFakeNonPositiveFiresAtOnce(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		f := NewFake(t0)
		if v, ok := received(f.NewTimer(d).C()); !ok || !v.Equal(t0) {
			t.Errorf("NewTimer(%v): received %v, %v; want %v at once", d, v, ok, t0)
		}
		if v, ok := received(f.After(d)); !ok || !v.Equal(t0) {
			t.Errorf("After(%v): received %v, %v; want %v at once", d, v, ok, t0)
		}
		if f.Waiters() != 0 {
			t.Errorf("d=%v: Waiters = %d, want 0", d, f.Waiters())
		}
		if !Sleep(f, d, nil) {
			t.Errorf("Sleep(%v) = false", d)
		}
	}
}

func TestFakeWaitersAndNext(t *testing.T) {
	f := NewFake(t0)
	if _, ok := f.Next(); ok || f.Waiters() != 0 {
		t.Fatalf("a new fake has timers")
	}
	a := f.After(time.Minute)
	tm := f.NewTimer(time.Second)
	_ = f.After(time.Hour)
	if got := f.Waiters(); got != 3 {
		t.Fatalf("Waiters = %d, want 3", got)
	}
	if at, ok := f.Next(); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("Next = %v, %v; want %v", at, ok, t0.Add(time.Second))
	}
	tm.Stop()
	if at, _ := f.Next(); f.Waiters() != 2 || !at.Equal(t0.Add(time.Minute)) {
		t.Fatalf("after Stop: Waiters = %d, Next = %v; want 2, %v", f.Waiters(), at, t0.Add(time.Minute))
	}
	f.Advance(time.Minute)
	if _, ok := received(a); !ok || f.Waiters() != 1 {
		t.Fatalf("after Advance: After fired %v, Waiters = %d; want true, 1", ok, f.Waiters())
	}
}

// One Advance past several deadlines fires every timer due, each sending
// its own deadline (so a receiver can tell the order they came due in),
// and leaves the later ones armed.
func TestFakeAdvanceFiresAllDue(t *testing.T) {
	f := NewFake(t0)
	delays := []time.Duration{3 * time.Second, time.Second, 2 * time.Second, time.Second, time.Hour}
	var chans []<-chan time.Time
	for _, d := range delays {
		chans = append(chans, f.After(d))
	}
	f.Advance(3 * time.Second)
	for i, ch := range chans {
		v, ok := received(ch)
		if due := delays[i] <= 3*time.Second; ok != due || (ok && !v.Equal(t0.Add(delays[i]))) {
			t.Errorf("After(%v): received %v, %v; want %v", delays[i], v, ok, due)
		}
	}
	if !f.Now().Equal(t0.Add(3 * time.Second)) {
		t.Errorf("Now = %v, want %v", f.Now(), t0.Add(3*time.Second))
	}
	if f.Waiters() != 1 {
		t.Errorf("Waiters = %d, want 1 (the hour)", f.Waiters())
	}
}

func TestSleep(t *testing.T) {
	f := NewFake(t0)
	done := make(chan struct{})
	res := make(chan bool, 2)
	go func() { res <- Sleep(f, time.Minute, nil) }()
	go func() { res <- Sleep(f, time.Hour, done) }()
	waitFor(t, "both sleepers armed", func() bool { return f.Waiters() == 2 })
	f.Advance(time.Minute)
	if !recvBool(t, res) {
		t.Error("Sleep(minute) after a minute = false")
	}
	close(done)
	if recvBool(t, res) {
		t.Error("Sleep(hour) cut short by done = true")
	}
	waitFor(t, "the cut-short sleeper's timer stopped", func() bool { return f.Waiters() == 0 })
}

func TestRealClock(t *testing.T) {
	c := Real()
	before := time.Now()
	if now := c.Now(); now.Before(before) {
		t.Fatalf("Real().Now() = %v, before %v", now, before)
	}
	tm := c.NewTimer(time.Hour)
	if !tm.Stop() || tm.Stop() {
		t.Error("Stop of an armed real timer")
	}
	tm.Reset(time.Millisecond)
	select {
	case <-tm.C():
	case <-time.After(10 * time.Second):
		t.Fatal("a reset real timer did not fire")
	}
	select {
	case <-c.After(0):
	case <-time.After(10 * time.Second):
		t.Fatal("After(0) did not fire")
	}
	if !Sleep(c, 0, nil) {
		t.Error("Sleep(0) = false")
	}
}

// Many goroutines arm, stop, reset and read timers while others advance:
// run under -race. Every timer armed for at most the total advance fires or
// is stopped, and nothing blocks.
func TestFakeConcurrentUse(t *testing.T) {
	f := NewFake(t0)
	const goroutines, rounds = 8, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				d := time.Duration(1+(g*rounds+i)%5) * time.Millisecond
				tm := f.NewTimer(d)
				switch i % 3 {
				case 0:
					tm.Stop()
				case 1:
					tm.Reset(d)
					tm.Stop()
				default:
					select {
					case <-tm.C():
					case <-f.After(d):
					}
				}
				_ = f.Now()
				_ = f.Waiters()
				_, _ = f.Next()
			}
		}()
	}
	stop := make(chan struct{})
	advanced := make(chan struct{})
	go func() {
		defer close(advanced)
		for {
			select {
			case <-stop:
				return
			default:
				f.Advance(time.Millisecond)
			}
		}
	}()
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(time.Minute):
		t.Fatal("goroutines still waiting on the fake after a minute")
	}
	close(stop)
	<-advanced
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func recvBool(t *testing.T, ch <-chan bool) bool {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no result after 10 s")
		return false
	}
}

// TestWithTimeout: the context ends when the fake clock passes the
// timeout (cause DeadlineExceeded), not before; cancel ends it at once
// (cause Canceled); a parent's end ends it.
func TestWithTimeout(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	ctx, cancel := WithTimeout(context.Background(), f, time.Second)
	defer cancel()
	f.Advance(999 * time.Millisecond)
	select {
	case <-ctx.Done():
		t.Fatal("ended before its timeout")
	default:
	}
	f.Advance(time.Millisecond)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not ended 5 s (real) after the fake clock passed its timeout")
	}
	if c := context.Cause(ctx); c != context.DeadlineExceeded {
		t.Fatalf("cause %v, want DeadlineExceeded", c)
	}

	ctx2, cancel2 := WithTimeout(context.Background(), f, time.Hour)
	cancel2()
	<-ctx2.Done()
	if c := context.Cause(ctx2); c != context.Canceled {
		t.Fatalf("cause %v after cancel, want Canceled", c)
	}
	cancel2() // a second call is harmless

	parent, stop := context.WithCancel(context.Background())
	ctx3, cancel3 := WithTimeout(parent, f, time.Hour)
	defer cancel3()
	stop()
	<-ctx3.Done()
	if f.Waiters() != 0 {
		// The goroutines stop their timers once their contexts end;
		// wait for that with a deadline.
		deadline := time.Now().Add(5 * time.Second)
		for f.Waiters() != 0 && time.Now().Before(deadline) {
			runtime.Gosched()
		}
		if n := f.Waiters(); n != 0 {
			t.Fatalf("%d fake timers still armed after every context ended", n)
		}
	}
}
