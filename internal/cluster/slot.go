package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// daemon is what a head and a worker have in common for a cluster: run
// until the context ends, stop cleanly, or stop as a crash would.
type daemon interface {
	Run(ctx context.Context) error
	Shutdown(ctx context.Context) error
	Kill()
}

// slot runs at most one daemon of a member at a time, in a goroutine it
// owns, and stops it by crash (kill) or cleanly (stop).
type slot[D daemon] struct {
	mu     sync.Mutex
	d      D
	live   bool
	cancel context.CancelFunc
	done   chan struct{}
	runErr error // what Run returned, once done is closed
	// name and ended: run's, for a Run that does not return after kill
	// or stop.
	name  string
	ended func(name string, err error)
	// runTimeout overrides runReturnTimeout (tests); zero: not.
	runTimeout time.Duration
}

// runReturnTimeout bounds how long kill and stop wait for the daemon's
// Run to return once it was killed or shut down (and its context
// cancelled): a Run still going after that is a bug, reported, and its
// goroutine is given up on rather than hanging the cluster's caller.
const runReturnTimeout = time.Minute

// awaitRun waits for done, runReturnTimeout at most; otherwise it
// reports the daemon to run's ended and returns that error.
func (s *slot[D]) awaitRun(done chan struct{}, how string) error {
	s.mu.Lock()
	name, ended, wait := s.name, s.ended, cmp.Or(s.runTimeout, runReturnTimeout)
	s.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		err := fmt.Errorf("Run has not returned %v after its %s; its goroutine is left running", wait, how)
		ended(name, err)
		return err
	}
}

// get returns the running daemon, or D's zero value (nil) when none runs.
func (s *slot[D]) get() D {
	s.mu.Lock()
	defer s.mu.Unlock()
	var zero D
	if !s.live {
		return zero
	}
	return s.d
}

// run starts d; a Run error other than the context's (Run ended on its
// own) goes to ended, with name, and so does a Run that kill or stop
// waited for in vain.
func (s *slot[D]) run(ended func(name string, err error), name string, d D) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.mu.Lock()
	s.d, s.live, s.cancel, s.done, s.runErr = d, true, cancel, done, nil
	s.name, s.ended = name, ended
	s.mu.Unlock()
	go func() { // owned by the slot: kill and stop wait for done
		err := d.Run(ctx)
		if err != nil && ctx.Err() == nil {
			ended(name, fmt.Errorf("Run ended on its own: %w", err))
		} else {
			err = nil
		}
		s.mu.Lock()
		s.runErr = err
		s.mu.Unlock()
		close(done)
	}()
}

// take detaches the running daemon, if any, for the caller to stop.
func (s *slot[D]) take() (D, context.CancelFunc, chan struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := s.live
	s.live = false
	return s.d, s.cancel, s.done, live
}

// kill stops the daemon as a crash would and waits for its goroutine
// (runReturnTimeout at most; a Run that outlives it goes to run's ended).
func (s *slot[D]) kill() {
	d, cancel, done, live := s.take()
	if !live {
		return
	}
	d.Kill()
	cancel()
	_ = s.awaitRun(done, "kill") // reported
}

// stop shuts the daemon down cleanly (timeout at most) and waits for it
// (runReturnTimeout at most). It reports whether a daemon was running,
// and the errors of its Shutdown, of a Run that had ended on its own and
// of a Run that did not return.
func (s *slot[D]) stop(timeout time.Duration) (bool, error) {
	d, cancel, done, live := s.take()
	if !live {
		return false, nil
	}
	ctx, stop := context.WithTimeout(context.Background(), timeout)
	err := d.Shutdown(ctx)
	stop()
	cancel()
	if werr := s.awaitRun(done, "shutdown"); werr != nil {
		return true, errors.Join(err, werr)
	}
	s.mu.Lock()
	err = errors.Join(err, s.runErr)
	s.mu.Unlock()
	return true, err
}
