package worker

import (
	"context"
	"sync"
)

// fifoSem is a counting semaphore that admits waiters in arrival order: the
// cap on container starts in flight.
type fifoSem struct {
	mu      sync.Mutex
	free    int
	waiters []chan struct{}
}

func newFIFOSem(n int) *fifoSem { return &fifoSem{free: n} }

// acquire takes a slot, waiting behind earlier callers, or returns ctx's
// error.
func (s *fifoSem) acquire(ctx context.Context) error {
	s.mu.Lock()
	if s.free > 0 && len(s.waiters) == 0 {
		s.free--
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	s.waiters = append(s.waiters, ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, w := range s.waiters {
			if w == ch {
				s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
				return ctx.Err()
			}
		}
		// Granted meanwhile: hand the slot on.
		s.releaseLocked()
		return ctx.Err()
	}
}

// release returns a slot, to the oldest waiter if any.
func (s *fifoSem) release() {
	s.mu.Lock()
	s.releaseLocked()
	s.mu.Unlock()
}

func (s *fifoSem) releaseLocked() {
	if len(s.waiters) > 0 {
		close(s.waiters[0])
		s.waiters = s.waiters[1:]
		return
	}
	s.free++
}
