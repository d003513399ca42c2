package cluster

import (
	"context"
	"errors"
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
// own) goes to ended, with name.
func (s *slot[D]) run(ended func(name string, err error), name string, d D) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.mu.Lock()
	s.d, s.live, s.cancel, s.done, s.runErr = d, true, cancel, done, nil
	s.mu.Unlock()
	go func() { // owned by the slot: kill and stop wait for done
		err := d.Run(ctx)
		if err != nil && ctx.Err() == nil {
			ended(name, err)
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

// kill stops the daemon as a crash would and waits for its goroutine.
func (s *slot[D]) kill() {
	d, cancel, done, live := s.take()
	if !live {
		return
	}
	d.Kill()
	cancel()
	<-done
}

// stop shuts the daemon down cleanly (timeout at most) and waits for it.
// It reports whether a daemon was running, and the errors of its Shutdown
// and of a Run that had ended on its own.
func (s *slot[D]) stop(timeout time.Duration) (bool, error) {
	d, cancel, done, live := s.take()
	if !live {
		return false, nil
	}
	ctx, stop := context.WithTimeout(context.Background(), timeout)
	err := d.Shutdown(ctx)
	stop()
	cancel()
	<-done
	s.mu.Lock()
	err = errors.Join(err, s.runErr)
	s.mu.Unlock()
	return true, err
}
