package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker/attempt"
)

// heldStartRT is a fake runtime whose Starts stop at a gate on entry
// (entered is signalled), as a start does while it waits for its slot or
// its image, and go on into the fake (which refuses a cancelled context)
// once the test opens it; returned then gets what the fake said.
type heldStartRT struct {
	*fakeRT
	entered  chan struct{}
	open     chan struct{}
	returned chan error
	once     sync.Once
	opened   sync.Once
}

// release lets the held start go on (again: nothing). The test calls it,
// and a cleanup too, so that a test that failed before does not leave the
// start, and with it the worker's Kill in the next cleanup, blocked.
func (r *heldStartRT) release() { r.opened.Do(func() { close(r.open) }) }

func (r *heldStartRT) Start(ctx context.Context, spec contract.Spec) (string, error) {
	r.once.Do(func() { close(r.entered) })
	<-r.open
	id, err := r.fakeRT.Start(ctx, spec)
	r.returned <- err
	return id, err
}

// A stop that reached the worker while the attempt's start was under way
// keeps its container from starting, even when the attempt's driver
// goroutine has not run since (here: held by the test on the handle's
// lock, as a busy machine would leave it): the stream goroutine's hand-over
// itself cancels the start. Before the fix the stop only went into the
// driver's mailbox, and the start went on into the runtime: the container
// started after the stop had arrived (issue 18, finding 14).
func TestStopHandedOverCancelsAStartUnderWay(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := &heldStartRT{fakeRT: newFakeRT(t), entered: make(chan struct{}), open: make(chan struct{}), returned: make(chan error, 1)}
	w := startWorker(t, testConfig(t, rt, t.TempDir(), head.addr))
	t.Cleanup(rt.release) // before startWorker's kill (cleanups run last in, first out)
	head.send(assignMsg("g/t", 1, spec("busybox", "hang")))
	select {
	case <-rt.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the start never reached the runtime")
	}

	key := attempt.Key{TaskID: "g/t", Attempt: 1}
	w.mu.Lock()
	h := w.attempts[key]
	w.mu.Unlock()
	if h == nil {
		t.Fatal("the worker does not hold g/t#1")
	}
	h.mu.Lock() // the driver cannot get past its next event
	w.stopAttempt(&wire.StopAttempt{TaskId: "g/t", Attempt: 1, Reason: "cancelled"})
	rt.release()
	var err error
	select {
	case err = <-rt.returned:
	case <-time.After(5 * time.Second):
		h.mu.Unlock()
		t.Fatal("the held start never returned")
	}
	h.mu.Unlock()
	if err == nil {
		t.Fatal("the container started after the stop was handed over")
	}
	if id := rt.containerOf("g/t", 1); id != "" {
		t.Fatalf("container %s exists after the stop", id)
	}
	e := head.waitEvent("g/t", 1, kindStopped)
	if e.GetContainerId() != "" || e.GetReason() != "cancelled" {
		t.Errorf("final event %v; want STOPPED \"cancelled\" with no container", e)
	}
	for _, e := range head.eventsOf("g/t", 1) {
		if e.GetKind() == kindStarted {
			t.Errorf("STARTED reported for an attempt stopped before its start: %v", e)
		}
	}
}
