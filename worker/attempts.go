package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/worker/attempt"
)

// The attempt registry: the head's assignments and stops become attempt
// drivers (worker/attempt and driver.go), one per (task, attempt), kept
// until their attempt ended and its outcome was acknowledged.

// assign handles an Assignment from the leader; the stream goroutine calls
// it. A duplicate of an attempt held here is ignored, as is an attempt older
// than one held here for the same task; older attempts of the task are
// stopped, and the new one starts once they stopped.
func (w *Worker) assign(ctx context.Context, a *wire.Assignment) {
	key := attempt.Key{TaskID: a.GetTaskId(), Attempt: a.GetAttempt()}
	log := w.log.With("graph", a.GetGraphId(), "task", key.TaskID, "attempt", key.Attempt, "term", a.GetLeaderTerm())
	if key.TaskID == "" || key.Attempt == 0 {
		log.Warn("ignoring an assignment without task id or attempt number")
		return
	}
	// An assignment handled once the lease has lapsed (one the leader sent
	// before a freeze of this process, read after it) must not start: the
	// leader may have re-queued it, and its second attempt may run
	// elsewhere. It is reported STOPPED, which the leader retries if it is
	// still current. An attempt registered before a lapse is stopped by
	// it (lapsedLocked); one registered while the lease lapses is stopped
	// below, after its registration.
	// A refused attempt stays refused: the head sends it again (as
	// ASSIGNED, never received) when this worker reconnects before the head
	// has its STOPPED, and starting it then would run it beside the retry
	// that STOPPED causes.
	w.refusedMu.Lock()
	again := w.refused[key]
	w.refusedMu.Unlock()
	if again {
		log.Info("ignoring an assignment refused before (its lease had lapsed); its STOPPED is on its way to the head")
		return
	}
	if w.leaseLapsed() {
		log.Warn("refusing an assignment: this worker's lease has lapsed (the leader may have re-queued it); reporting it stopped")
		w.refusedMu.Lock()
		if w.refused == nil {
			w.refused = map[attempt.Key]bool{}
		}
		w.refused[key] = true
		w.refusedMu.Unlock()
		w.outbox.add(&wire.AttemptEvent{
			TaskId:    key.TaskID,
			Attempt:   key.Attempt,
			Kind:      wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STOPPED,
			Reason:    "worker " + w.cfg.NodeID + " refused the assignment: its lease had lapsed",
			UnixNanos: w.clock.Now().UnixNano(),
		}, func() {
			w.refusedMu.Lock()
			delete(w.refused, key)
			w.refusedMu.Unlock()
		})
		return
	}
	var started *handle
	defer func() {
		if started != nil && w.leaseLapsed() {
			started.stop("worker lease lapsed as the attempt was assigned")
		}
	}()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing {
		log.Debug("ignoring an assignment: shutting down")
		return
	}
	if _, ok := w.attempts[key]; ok {
		log.Debug("ignoring a duplicate assignment of an attempt already held")
		return
	}
	var preds []*handle
	for k, h := range w.attempts {
		if k.TaskID != key.TaskID {
			continue
		}
		if k.Attempt > key.Attempt {
			log.Warn("ignoring a stale assignment: a newer attempt of the task runs here", "newer", k.Attempt)
			return
		}
		preds = append(preds, h)
	}
	for _, p := range preds {
		log.Info("stopping an older attempt of the task first", "older", p.key.Attempt)
		p.stop(fmt.Sprintf("superseded by attempt %d", key.Attempt))
	}
	cfg := attempt.Config{Key: key, StopGrace: w.cfg.StopGrace}
	if s := a.GetSpec(); s != nil {
		cfg.Timeout = time.Duration(s.GetTimeoutSeconds()) * time.Second
		cfg.MemoryLimit = s.GetResources().GetMemoryBytes()
		cfg.Image = s.GetImage()
	}
	svc := serviceOf(a)
	cfg.Service = svc != nil
	// A persistent task's timeout starts with its exec: waiting for a warm
	// container, or for its session's (FIFO, pool.enqueue), does not count.
	cfg.TimeoutFromStart = w.persistent(a)
	log.Debug("attempt assigned", "image", a.GetSpec().GetImage())
	w.startDriverLocked(ctx, cfg, attempt.Begin{}, a, nil, preds, svc)
	started = w.attempts[key]
	if sb := a.GetSpec().GetSandbox(); sb != nil {
		started.setSandbox(time.Duration(sb.GetIdleTimeoutSeconds())*time.Second, false)
	}
}

// stopAttempt handles a StopAttempt from the leader; the stream goroutine
// calls it. An attempt not held here is answered with STOPPED at once, so
// that the head can close it.
func (w *Worker) stopAttempt(s *wire.StopAttempt) {
	key := attempt.Key{TaskID: s.GetTaskId(), Attempt: s.GetAttempt()}
	reason := s.GetReason()
	if reason == "" {
		reason = "stopped by the head"
	}
	w.mu.Lock()
	h, ok := w.attempts[key]
	w.mu.Unlock()
	if ok {
		w.log.Debug("stopping attempt", "task", key.TaskID, "attempt", key.Attempt, "reason", reason)
		h.stop(reason)
		return
	}
	w.log.Debug("stop for an attempt not held here; reporting it stopped", "task", key.TaskID, "attempt", key.Attempt)
	w.outbox.add(&wire.AttemptEvent{
		TaskId:    key.TaskID,
		Attempt:   key.Attempt,
		Kind:      wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STOPPED,
		Reason:    "attempt not held by worker " + w.cfg.NodeID + ": " + reason,
		UnixNanos: w.clock.Now().UnixNano(),
	}, nil)
}

// startDriverLocked registers a new attempt and starts its driver
// goroutine; first is its first event (Begin or Adopt), a its assignment
// (nil when adopted), preds the older attempts of its task it waits for,
// svc its service (nil for a batch task). w.mu is held.
func (w *Worker) startDriverLocked(ctx context.Context, cfg attempt.Config, first attempt.Event, a *wire.Assignment, adopted *found, preds []*handle, svc *serviceRun) {
	h := newHandle(cfg.Key)
	h.gpus = a.GetGpuUuids()
	w.attempts[cfg.Key] = h
	d := newDriver(ctx, w, h, attempt.New(cfg), a, adopted, preds)
	d.svc = svc
	// The first event is applied here, so that the handle shows the
	// attempt (an adopted container's id) before any Hello is built; the
	// driver goroutine owns the machine from its start on.
	d.apply(first)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		d.run()
	}()
}

// held returns the handles of the attempts the worker holds, in no order.
func (w *Worker) held() []*handle {
	w.mu.Lock()
	defer w.mu.Unlock()
	hs := make([]*handle, 0, len(w.attempts))
	for _, h := range w.attempts {
		hs = append(hs, h)
	}
	return hs
}

// forget drops h once its driver finished the attempt.
func (w *Worker) forget(h *handle) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.attempts[h.key] == h {
		delete(w.attempts, h.key)
	}
}

// handleOf returns the handle of attempt k, or nil.
func (w *Worker) handleOf(k attempt.Key) *handle {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.attempts[k]
}

// holds reports whether attempt k is held in memory.
func (w *Worker) holds(k attempt.Key) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.attempts[k]
	return ok
}
