package worker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/lease"
	"github.com/megaflow/megaflow/internal/leaseinit"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker/attempt"
)

// The worker's lease (internal/lease). It renews it with every heartbeat
// (the Hello too) and counts each renewal from when it sent it, once the
// head acked it (LeaseAck, or the Welcome for the Hello). When no renewal
// sent in the last lease duration was acked, the lease has lapsed: the
// worker stops every attempt it holds (STOPPED, which the head retries),
// before the head may re-queue them (lease plus margin after it last heard
// from the worker). After each renewal it writes the lease's expiry plus
// half the margin to DataDir/lease/expiry, the file its tasks' init reads:
// when the worker process is gone or frozen, the inits kill the tasks.
//
// A worker whose stream is down or silent renews through gossip as well
// (lease.Renewal to the leader's gossip member, lease.Ack back), so that a
// worker cut off from the leader's gRPC port only keeps its attempts.

// leaseDir is where the lease file lives.
func (w *Worker) leaseDir() string { return filepath.Join(w.cfg.DataDir, "lease") }

// leaseSent records a renewal about to be sent (a heartbeat or the
// Hello) and returns its id: the clock's unix nanos, made to grow.
func (w *Worker) leaseSent() int64 {
	w.leaseMu.Lock()
	defer w.leaseMu.Unlock()
	now := w.clock.Now()
	id := max(now.UnixNano(), w.leaseLastID+1)
	w.leaseLastID = id
	w.lease.Sent(id, now)
	return id
}

// leaseAcked applies the head's ack of renewal id with the lease it runs
// (zero: a head without leases, ignored). When the lease had lapsed
// before the ack, every attempt held is stopped first. The stream
// goroutine and the gossip renewal loop call it.
func (w *Worker) leaseAcked(id int64, leaseMillis, marginMillis int64) {
	if leaseMillis <= 0 {
		return
	}
	cfg := lease.Config{Duration: time.Duration(leaseMillis) * time.Millisecond, Margin: time.Duration(marginMillis) * time.Millisecond}
	w.leaseMu.Lock()
	defer w.leaseMu.Unlock()
	now := w.clock.Now()
	if w.lease.Acked(id, cfg, now) {
		w.lapsedLocked(now)
	}
	if !w.lease.Expired(now) {
		w.leaseStopped = false
	}
	w.writeLeaseLocked()
}

// checkLease stops every attempt held when the lease has lapsed at the
// clock's now (once per lapse). The lease loop calls it every tick, and the
// stream goroutine before it handles anything, so that a worker resuming
// from a freeze stops its stale attempts before it does anything else.
func (w *Worker) checkLease() {
	w.leaseMu.Lock()
	defer w.leaseMu.Unlock()
	now := w.clock.Now()
	if w.lease.Expired(now) {
		w.lapsedLocked(now)
	}
}

// leaseLapsed reports whether the lease has lapsed at the clock's now
// (false while none was ever held). It takes leaseMu: call it without
// w.mu held.
func (w *Worker) leaseLapsed() bool {
	w.leaseMu.Lock()
	defer w.leaseMu.Unlock()
	return w.lease.Expired(w.clock.Now())
}

// lapsedLocked stops every attempt held, once per lapse. leaseMu is held.
func (w *Worker) lapsedLocked(now time.Time) {
	if w.leaseStopped {
		return
	}
	w.leaseStopped = true
	hs := w.held()
	cfg := w.lease.Config()
	w.log.Warn("worker lease lapsed: no heartbeat acked by the leader in time; stopping every attempt held (the leader re-queues them)",
		"lease", cfg.Duration, "renewed_at", w.lease.Renewed(), "now", now, "attempts", len(hs))
	w.metrics.leaseLapses.Inc()
	for _, h := range hs {
		h.mbox.put(attempt.StopRequest{Reason: "worker lease lapsed: no heartbeat acked by the leader for " + cfg.Duration.String()})
	}
}

// lapseEnd says why an attempt begun at began whose container exited at
// finished (zero: unknown) ended because the lease lapsed, or "" when it
// did not: the lease lapsed after began, and the exit came at or after
// that lapse's expiry; or, for an attempt adopted from an earlier run of
// this worker, the exit came while the worker was down, at or after the
// expiry that run last wrote for the inits (priorExpiry), so that its
// init stopped it (a `megaflow up` restarted after more than a lease: the
// head was down too, so no leader had re-queued the attempt, and its exit
// 143 was taken for the task's failure). Such an attempt ends STOPPED (the
// head retries it, or ends a started sandbox lost), never as the task's
// own success or failure; one that exited before the expiry keeps its own
// end. So does an exit at or after the expiry the lease file last held
// while the worker cannot renew that file (its data directory is full:
// the inits stop the tasks then, though the lease itself holds).
func (w *Worker) lapseEnd(began, finished time.Time) string {
	if !w.priorExpiry.IsZero() && !finished.IsZero() && finished.Before(began) && !finished.Before(w.priorExpiry) {
		return fmt.Sprintf("worker lease lapsed while the worker was down (expired %s): its init stopped the task",
			w.priorExpiry.UTC().Format(time.RFC3339))
	}
	w.leaseMu.Lock()
	defer w.leaseMu.Unlock()
	if lapsed, expiry := w.lease.LapsedSince(began, w.clock.Now()); lapsed && (finished.IsZero() || !finished.Before(expiry)) {
		return "worker lease lapsed"
	}
	// The lease held, but the file the inits read was not renewed (a full
	// disk): an exit at or after the expiry it held was its init's kill.
	if !finished.IsZero() && w.fileExpiredLocked(finished) {
		if !began.Before(w.leaseWritten) {
			return fmt.Sprintf("worker could not renew its lease file (%v), whose expiry had passed when the task was to start: its init refused to run it", w.leaseWriteErr)
		}
		return fmt.Sprintf("worker could not renew its lease file (%v): its init stopped the task at the expiry the file held", w.leaseWriteErr)
	}
	return ""
}

// writeLeaseLocked writes the inits' expiry when it changed. The clock's
// time is written as wall time: with the real clock, the inits compare it
// with the same host's clock. leaseMu is held.
func (w *Worker) writeLeaseLocked() {
	e := w.lease.InitExpiry()
	if e.IsZero() || e.Equal(w.leaseWritten) {
		return
	}
	if err := leaseinit.WriteExpiry(w.leaseDir(), e); err != nil {
		w.log.Warn("cannot renew the lease file; the tasks' inits will stop them when the lease in it runs out", "err", err)
		w.leaseWriteErr = err
		return
	}
	w.leaseWritten, w.leaseWriteErr = e, nil
}

// leaseFileStale says why the worker cannot run tasks, or "": it cannot
// renew the lease file (its data directory is full, say) and the expiry
// the file holds has passed, so that its tasks' inits stop or refuse every
// task. The stream goroutine then leaves the leader, and does not come back
// until leaseFileBlocked says the file can be written again.
func (w *Worker) leaseFileStale() string {
	w.leaseMu.Lock()
	defer w.leaseMu.Unlock()
	if !w.fileExpiredLocked(w.clock.Now()) {
		return ""
	}
	return fmt.Sprintf("worker %s cannot renew its lease file (%v), whose expiry has passed: its tasks' inits would stop or refuse every task",
		w.cfg.NodeID, w.leaseWriteErr)
}

// fileExpiredLocked reports whether, at t, the lease file cannot be
// renewed and the expiry it holds has passed: its tasks' inits stop or
// refuse every task then. leaseMu is held.
func (w *Worker) fileExpiredLocked(t time.Time) bool {
	return w.leaseWriteErr != nil && !w.leaseWritten.IsZero() && !t.Before(w.leaseWritten)
}

// leaseFileBlocked says why the worker must not connect, or "": the lease
// file could not be written last time, and writing it again (the expiry it
// last held, which grants nothing new) still fails. A write that succeeds
// clears the error.
func (w *Worker) leaseFileBlocked() string {
	w.leaseMu.Lock()
	defer w.leaseMu.Unlock()
	if w.leaseWriteErr == nil || w.leaseWritten.IsZero() {
		return ""
	}
	if err := leaseinit.WriteExpiry(w.leaseDir(), w.leaseWritten); err != nil {
		w.leaseWriteErr = err
		return fmt.Sprintf("cannot write the lease file: %v", err)
	}
	w.leaseWriteErr = nil
	w.log.Info("the lease file can be written again; connecting to the leader")
	return ""
}

// LeaseExpiresAt returns when the worker's view of its lease expires (zero
// while it holds none). Any goroutine may call it.
func (w *Worker) LeaseExpiresAt() time.Time {
	w.leaseMu.Lock()
	defer w.leaseMu.Unlock()
	return w.lease.ExpiresAt()
}

// initSpec is the init of every container this worker starts (nil
// without Config.InitPath). Its SIGKILL comes a quarter of the lease
// margin after its SIGTERM (lease.InitGrace), a second when no lease was
// given yet.
func (w *Worker) initSpec() *contract.Init {
	if w.cfg.InitPath == "" {
		return nil
	}
	w.leaseMu.Lock()
	margin := w.lease.Config().Margin
	w.leaseMu.Unlock()
	grace := lease.InitGrace(margin)
	if grace <= 0 {
		grace = time.Second
	}
	return &contract.Init{Path: w.cfg.InitPath, LeaseDir: w.leaseDir(), Grace: grace}
}

// leaseTick is how often the lease loop checks the lease.
const leaseTick = 200 * time.Millisecond

// leaseLoop checks the lease every leaseTick until ctx ends, noticing a
// freeze (the monotonic clock jumped) first thing after it, and renews the
// lease through gossip when the last acked renewal is older than two
// heartbeats (the stream is down or silent). Run owns it.
func (w *Worker) leaseLoop(ctx context.Context) {
	prev := w.clock.Now()
	var lastGossip time.Time
	// renewing is closed when the gossip renewal in flight returns (nil:
	// none in flight). A renewal to a head whose host is cut off blocks for
	// gossip's TCP timeout (10 s); it runs beside the loop, which keeps
	// checking the lease meanwhile, and the loop waits for it on its way
	// out.
	var renewing chan struct{}
	// renewErr is the result of the renewal that closed renewing, written
	// before the close; failing whether the last one failed, so that a run
	// of failures is logged once, and the recovery too.
	var renewErr error
	failing := false
	defer func() {
		if renewing != nil {
			<-renewing
		}
	}()
	for {
		if !clock.Sleep(w.clock, leaseTick, ctx.Done()) {
			return
		}
		now := w.clock.Now()
		if lease.Frozen(prev, now, leaseTick) {
			w.log.Warn("worker resumed after a freeze; checking its lease first", "frozen_for", now.Sub(prev).Round(time.Millisecond))
		}
		prev = now
		w.checkLease()
		w.leaseMu.Lock()
		held, renewed := w.lease.Held(), w.lease.Renewed()
		w.leaseMu.Unlock()
		if renewing != nil {
			select {
			case <-renewing:
				renewing = nil
				failing = w.noteGossipRenewal(renewErr, failing)
			default:
			}
		}
		if held && renewing == nil && now.Sub(renewed) > 2*w.cfg.HeartbeatInterval && now.Sub(lastGossip) >= w.cfg.HeartbeatInterval {
			lastGossip = now
			renewing = make(chan struct{})
			go func(done chan struct{}) { // owned by leaseLoop, which waits for it
				defer close(done)
				renewErr = w.renewThroughGossip()
			}(renewing)
		}
		for {
			select {
			case b := <-w.leaseMsgs:
				if _, a, err := lease.Decode(b); err == nil && a != nil && a.Worker == w.cfg.NodeID {
					w.leaseAcked(a.ID, a.LeaseMillis, a.MarginMillis)
				}
				continue
			default:
			}
			break
		}
	}
}

// renewThroughGossip sends a lease renewal to the gossip member of the
// last leader that welcomed this worker (heads' gossip names are their
// node ids) and returns the send's error (nil when no leader welcomed
// this worker yet). It may block for gossip's TCP timeout; the lease loop
// runs it beside itself, one at a time.
func (w *Worker) renewThroughGossip() error {
	w.mu.Lock()
	name := w.leaderID
	w.mu.Unlock()
	if name == "" {
		return nil
	}
	id := w.leaseSent()
	if err := w.gossip.SendTo(name, lease.EncodeRenewal(lease.Renewal{Worker: w.cfg.NodeID, From: w.cfg.NodeID, ID: id})); err != nil {
		return fmt.Errorf("lease renewal through gossip to head %s: %w", name, err)
	}
	return nil
}

// noteGossipRenewal logs a gossip renewal's outcome when it changes: the
// first failure after a success as a warning (the worker's stream to the
// leader is already down or silent, so its lease is at risk), the first
// success after failures at info; every failure at debug. It returns
// whether this renewal failed. The lease loop calls it.
func (w *Worker) noteGossipRenewal(err error, wasFailing bool) (failing bool) {
	switch {
	case err != nil && !wasFailing:
		w.log.Warn("lease renewals through gossip are failing while the stream to the leader is down or silent; "+
			"the lease lapses, stopping every attempt held, unless one gets through",
			"err", err, "lease_expires_at", w.LeaseExpiresAt())
	case err != nil:
		w.log.Debug("lease renewal through gossip failed", "err", err)
	case wasFailing:
		w.log.Info("lease renewals through gossip get through again")
	}
	return err != nil
}

// onGossipMessage is the worker's gossip Config.OnMessage: lease acks
// are queued for the lease loop (dropped when the queue is full: the next
// renewal is a heartbeat away).
func (w *Worker) onGossipMessage(b []byte) {
	select {
	case w.leaseMsgs <- b:
	default:
	}
}

// InitBinary is the file name of megaflow-init.
const InitBinary = "megaflow-init"

// FindInit returns the absolute path of the megaflow-init binary: path
// when given (it must exist and be executable), else the one next to this
// process's executable (where `make build` puts it), else the first in
// $PATH. Errors say where it looked and how to get one; the caller decides
// whether running without it is acceptable (cmd/megaflow-worker refuses
// for the docker runtime).
func FindInit(path string) (string, error) {
	check := func(p string) error {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s is not an executable file", p)
		}
		return nil
	}
	if path != "" {
		abs, err := filepath.Abs(path)
		if err == nil {
			err = check(abs)
		}
		if err != nil {
			return "", fmt.Errorf("--init-path %q: %w: build it with `make build` (bin/%s) or `CGO_ENABLED=0 go build ./cmd/%s`", path, err, InitBinary, InitBinary)
		}
		return abs, nil
	}
	var tried []string
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), InitBinary)
		if check(p) == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	if p, err := exec.LookPath(InitBinary); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs, nil
		}
	}
	tried = append(tried, "$PATH")
	return "", fmt.Errorf("%s not found (looked in %s): build it with `make build`, which puts it next to the other binaries, or pass --init-path; "+
		"without it a task would outlive a crashed or frozen worker", InitBinary, strings.Join(tried, " and "))
}
