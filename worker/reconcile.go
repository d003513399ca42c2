package worker

import (
	"context"
	"errors"
	"maps"
	"os"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker/attempt"
)

// adoptExisting lists the containers this worker left behind (a restart)
// and holds each as an attempt, so that the first Hello announces them: a
// running one waits in Adopting for the head's StopAttempt or for Confirm;
// an exited one reports its exit at once and is removed once that is acked.
// A container without attempt labels is removed. It retries the listing
// until it succeeds, because announcing an incomplete set would make the
// head give up attempts that still run; it returns false when ctx ended
// first.
func (w *Worker) adoptExisting(ctx context.Context) bool {
	backoff := w.cfg.ReconnectMin
	var cs []contract.Container
	for {
		var err error
		cs, err = w.listOwn(ctx)
		if err == nil {
			break
		}
		w.log.Warn("cannot list this worker's containers; retrying before connecting", "err", err, "retry_in", backoff)
		if !clock.Sleep(w.clock, jitter(backoff), ctx.Done()) {
			return false
		}
		backoff = min(2*backoff, w.cfg.ReconnectMax)
	}
	// The warm containers sandboxes claimed (warmbox.go) are theirs:
	// adopted as their attempts' containers. A claim whose container is
	// gone is dropped.
	claims, bad := loadClaims(w.cfg.DataDir)
	for _, b := range bad {
		w.log.Warn("removing an unreadable warm container claim", "claim", b)
	}
	listed := map[string]bool{}
	for _, c := range cs {
		listed[c.ID] = true
	}
	for id := range claims {
		if !listed[id] {
			w.log.Info("dropping the claim of a warm container that is gone", "container", id)
			_ = os.Remove(claimPath(w.cfg.DataDir, id))
			delete(claims, id)
		}
	}
	w.claimsMu.Lock()
	maps.Copy(w.claims, claims)
	w.claimsMu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range cs {
		cl := claims[c.ID]
		if cl == nil && isWarm(c.Labels) {
			w.log.Info("removing a warm container of this worker's previous run", "container", c.ID, "name", c.Name)
			w.removeLeakAsync(ctx, c)
			continue
		}
		if c.NeverStarted && cl == nil {
			// Its command never ran (the worker died between the engine's
			// create and start), so its attempt never reported STARTED:
			// not adopted, the head re-queues the attempt as lost. Adopted,
			// the engine's exit code 0 for it read as a success.
			w.log.Info("removing a container of this worker's previous run that was created but never started; the head re-queues its attempt",
				"container", c.ID, "name", c.Name)
			w.removeLeakAsync(ctx, c)
			continue
		}
		labels := c.Labels
		if cl != nil {
			labels = cl.Labels
			w.log.Info("found a warm container a sandbox claimed", "container", c.ID, "task", cl.Task, "attempt", cl.Attempt)
		}
		f, ok := parseLabels(labels)
		if !ok {
			w.log.Warn("removing a container of this worker without attempt labels", "container", c.ID, "name", c.Name)
			w.removeLeakAsync(ctx, c)
			continue
		}
		if _, dup := w.attempts[f.key]; dup {
			w.log.Warn("removing a second container of one attempt", "task", f.key.TaskID, "attempt", f.key.Attempt, "container", c.ID)
			w.removeLeakAsync(ctx, c)
			continue
		}
		ev := attempt.Adopt{ContainerID: c.ID, Running: c.Running, Deadline: f.deadline}
		w.log.Info("found a container of this worker", "task", f.key.TaskID, "attempt", f.key.Attempt,
			"container", c.ID, "running", c.Running, "paused", c.Paused)
		if ad, ok := w.rt.(contract.Adopter); ok {
			// Its output since the old process died is read from the
			// engine; the wait reads the result once the log is whole.
			if err := ad.Adopt(ctx, c.ID, logPath(w.cfg.DataDir, f.key)); err != nil {
				w.log.Warn("cannot resume the copy of an adopted container's output", "task", f.key.TaskID, "container", c.ID, "err", err)
			}
		}
		cfg := attempt.Config{Key: f.key, Timeout: f.timeout, MemoryLimit: f.memory, StopGrace: w.cfg.StopGrace}
		svc := serviceFromLabels(labels)
		if svc != nil {
			cfg.Service = true
			w.ports.claim(svc.hostPort)
		}
		w.startDriverLocked(ctx, cfg, ev, nil, &f, nil, svc)
		if f.sandbox {
			// A paused container stays paused, and so does its mark: the
			// table's PAUSED needs a resume to end it.
			w.attempts[f.key].setSandbox(f.sandboxIdle, c.Paused)
		}
		if cl != nil {
			w.attempts[f.key].setExecDefaults(cl.Env, cl.WorkingDir)
		}
	}
	return true
}

// reconcileLoop runs reconcile every ReconcileInterval until ctx ends.
func (w *Worker) reconcileLoop(ctx context.Context) {
	for clock.Sleep(w.clock, w.cfg.ReconcileInterval, ctx.Done()) {
		w.reconcile(ctx)
	}
}

// reconcile is one round: it confirms the adopted containers the head did
// not stop within a round after its Welcome, and stops and removes the
// containers with this worker's labels whose attempt it does not hold (a
// start that timed out on the worker's side but created its container, a
// remove that failed) and the warm containers its pool does not own; the
// pool drops its idle warm containers that no longer run; and it removes
// the snapshot images that no snapshot of the table names
// (reconcileSnapshots).
func (w *Worker) reconcile(ctx context.Context) {
	now := w.clock.Now()
	w.mu.Lock()
	confirm := w.connected && now.Sub(w.welcomedAt) >= w.cfg.ReconcileInterval
	var adopting []*handle
	if confirm {
		for _, h := range w.attempts {
			if h.status().State == attempt.Adopting {
				adopting = append(adopting, h)
			}
		}
	}
	w.mu.Unlock()
	w.confirm(adopting)

	cs, err := w.listOwn(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("reconcile: cannot list containers", "err", err)
		}
		return
	}
	for _, c := range cs {
		if isWarm(c.Labels) && w.pool != nil && w.pool.owns(c) {
			if !c.Running {
				w.pool.unhealthy(c.ID) // the health check: replaced by the next task
			}
			continue
		}
		if f, ok := parseLabels(w.labelsOf(c)); ok && w.holds(f.key) {
			continue
		}
		w.log.Warn("removing a container whose attempt this worker does not hold", "container", c.ID, "name", c.Name,
			"task", c.Labels[LabelTask], "attempt", c.Labels[LabelAttempt])
		w.removeLeak(ctx, c)
	}
	w.reconcileSnapshots(ctx)
}

// confirmAdopted takes over every adopted container at once: the leader's
// Welcome listed the attempts to stop, so the others are current.
func (w *Worker) confirmAdopted() {
	w.mu.Lock()
	var adopting []*handle
	for _, h := range w.attempts {
		if h.status().State == attempt.Adopting {
			adopting = append(adopting, h)
		}
	}
	w.mu.Unlock()
	w.confirm(adopting)
}

func (w *Worker) confirm(adopting []*handle) {
	for _, h := range adopting {
		w.log.Info("taking over an adopted container: the head did not stop it", "task", h.key.TaskID, "attempt", h.key.Attempt)
		h.mbox.put(attempt.Confirm{})
	}
}

// listOwn lists the containers carrying this worker's labels, its cluster
// id's included (clusterid.go).
func (w *Worker) listOwn(ctx context.Context) ([]contract.Container, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	cs, err := w.rt.List(ctx, w.ownLabels())
	if err != nil {
		return nil, err
	}
	return w.filterOwn(cs), nil
}

// removeLeak stops (if running) and removes container c.
func (w *Worker) removeLeak(ctx context.Context, c contract.Container) {
	if c.Running {
		sctx, cancel := context.WithTimeout(ctx, w.cfg.StopGrace+w.cfg.CallTimeout)
		err := w.rt.Stop(sctx, c.ID, w.cfg.StopGrace)
		cancel()
		if err != nil && !errors.Is(err, contract.ErrNotFound) {
			w.log.Warn("stopping a leaked container failed", "container", c.ID, "err", err)
			return
		}
	}
	rctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	if err := w.rt.Remove(rctx, c.ID); err != nil {
		w.log.Warn("removing a leaked container failed", "container", c.ID, "err", err)
		return
	}
	w.dropClaim(c.ID)
	w.metrics.orphans.Inc()
}

// removeLeakAsync runs removeLeak in a goroutine the worker owns.
func (w *Worker) removeLeakAsync(ctx context.Context, c contract.Container) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.removeLeak(ctx, c)
	}()
}
