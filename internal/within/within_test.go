package within

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// recorder is a testing.TB that records Fatalf instead of ending the
// test, so the helpers' failures can be checked.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r) // stands in for FailNow's runtime.Goexit
}

// fails runs f with a recorder and returns what it failed with ("" when
// it did not).
func fails(t *testing.T, f func(tb testing.TB)) (msg string) {
	t.Helper()
	r := &recorder{TB: t}
	defer func() {
		if p := recover(); p != nil {
			if p != any(r) {
				panic(p)
			}
			msg = r.failed
		}
	}()
	f(r)
	return ""
}

func TestRecv(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := Recv(t, time.Second, ch, "a value"); got != 7 {
		t.Fatalf("Recv = %d, want 7", got)
	}
	closed := make(chan struct{})
	close(closed)
	Recv(t, time.Second, closed, "a closed channel")
	msg := fails(t, func(tb testing.TB) { Recv(tb, 10*time.Millisecond, make(chan int), "the answer") })
	if msg != "timed out after 10ms waiting for the answer" {
		t.Fatalf("Recv on a silent channel failed with %q", msg)
	}
}

func TestSend(t *testing.T) {
	ch := make(chan int, 1)
	Send(t, time.Second, ch, 1, "a value")
	msg := fails(t, func(tb testing.TB) { Send(tb, 10*time.Millisecond, ch, 2, "the second value") })
	if msg != "timed out after 10ms waiting to send the second value" {
		t.Fatalf("Send on a full channel failed with %q", msg)
	}
}

func TestWait(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(1)
	go wg.Done()
	Wait(t, time.Second, &wg, "one goroutine")
	wg.Add(1)
	defer wg.Done()
	msg := fails(t, func(tb testing.TB) { Wait(tb, 10*time.Millisecond, &wg, "a stuck goroutine") })
	if msg != "timed out after 10ms waiting for a stuck goroutine" {
		t.Fatalf("Wait on a stuck group failed with %q", msg)
	}
}
