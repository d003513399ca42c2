package worker

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sync"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker/attempt"
)

// execRun is one persistent attempt's exec in its warm container. The
// driver creates it at StartContainer; the op goroutine that leases the
// container runs the exec and fills in the outcome before closing done.
type execRun struct {
	done   chan struct{}
	cancel context.CancelFunc // kills the exec (StopContainer)

	mu      sync.Mutex
	stopped bool // the worker killed it (timeout, stop)

	// Set before done closes.
	exit   contract.Exit
	failed string // why the exec could not run or broke off
	result []byte
	note   string
	// filesDir is the exec's files directory on the host (its out/ and
	// in/ inside its warm container's), "" when it has none; set before
	// StartDone, with warm, the container it ran in.
	filesDir string
	warm     *warm
}

func (r *execRun) stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.cancel()
}

func (r *execRun) wasStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

// persistent reports whether assignment a runs in a warm container.
func (w *Worker) persistent(a *wire.Assignment) bool {
	return w.pool != nil && a.GetSpec().GetMode() == wire.ExecutionMode_EXECUTION_MODE_PERSISTENT
}

// sessionOf is the pool's key for a's session, "" for none.
func sessionOf(a *wire.Assignment) string {
	if s := a.GetSpec().GetSession(); s != "" {
		return a.GetGraphId() + "\x00" + s
	}
	return ""
}

// startExec carries out StartContainer for a persistent attempt: in an op
// goroutine it waits for older attempts of the task, leases a warm
// container, posts StartDone with its id, runs the exec until it ends or
// is killed, releases the container and closes run.done. The exec runs on
// the driver's context, not the start's: CancelStart abandons only the
// lease.
func (d *driver) startExec(spec contract.Spec, specErr error, sctx context.Context, cancelStart context.CancelFunc) {
	w := d.w
	ectx, ecancel := context.WithCancel(d.ctx)
	run := &execRun{done: make(chan struct{}), cancel: ecancel}
	d.execRun = run
	preds := d.preds
	key := keyOf(d.assign.GetTenant(), spec)
	session := sessionOf(d.assign)
	var ticket uint64
	if session != "" {
		ticket = w.pool.enqueue(session) // in assignment order: see pool.enqueue
	}
	d.ops.Add(1)
	go func() {
		defer d.ops.Done()
		defer close(run.done)
		defer ecancel()
		if session != "" {
			defer w.pool.leave(session, ticket) // failed before acquire
		}
		fail := func(err error) {
			cancelStart()
			if d.ctx.Err() == nil {
				d.h.mbox.put(attempt.StartDone{Err: err})
			}
		}
		if specErr != nil {
			fail(specErr)
			return
		}
		if len(spec.Command) == 0 {
			fail(errNoCommand)
			return
		}
		for _, p := range preds {
			select {
			case <-p.stopped:
			case <-sctx.Done():
				fail(fmt.Errorf("waiting for attempt %d to stop: %w", p.key.Attempt, sctx.Err()))
				return
			}
		}
		if err := w.checkGPUs(spec.GPUUUIDs); err != nil {
			fail(err)
			return
		}
		c, err := w.pool.acquire(sctx, key, spec, session, ticket)
		if err != nil {
			fail(err)
			return
		}
		if err := sctx.Err(); err != nil {
			w.pool.release(c, true, "")
			fail(fmt.Errorf("abandoned before its exec: %w", err))
			return
		}
		if d.w.artifactsOn() && needsFiles(d.assign) {
			name := execDirName(w.cfg.DataDir, d.h.key)
			dir, inContainer := filepath.Join(poolFilesDir(w.cfg.DataDir, c.name), name), ""
			if contract.Isolated(w.rt) {
				inContainer = path.Join(ContainerAttemptsDir, name)
			}
			if err := w.setupFiles(sctx, &spec, d.assign, dir, inContainer); err != nil {
				_ = os.RemoveAll(dir)
				w.pool.release(c, true, "")
				fail(err)
				return
			}
			run.filesDir, run.warm = dir, c
		}
		// The last check before the exec: a stop handed over meanwhile
		// (requestStop) cancelled sctx; nothing ran in the container.
		if err := sctx.Err(); err != nil {
			if run.filesDir != "" {
				_ = os.RemoveAll(run.filesDir)
				run.filesDir, run.warm = "", nil
			}
			w.pool.release(c, true, "")
			fail(fmt.Errorf("stopped before its exec: %w", err))
			return
		}
		cancelStart()
		d.h.mbox.put(attempt.StartDone{ContainerID: c.id})
		d.log.Debug("exec in warm container", "container", c.id)
		exit, err := w.pool.ex.Exec(ectx, c.id, spec)
		run.exit = exit
		healthy, why := true, ""
		switch {
		case run.wasStopped():
			healthy, why = false, "its exec was killed"
		case err != nil:
			healthy, why = false, "exec failed: "+err.Error()
			if d.ctx.Err() == nil {
				run.failed = fmt.Sprintf("exec in warm container %s: %v", c.id, err)
			}
		case exit.OOMKilled:
			healthy, why = false, "OOM kill"
		case exit.Code >= 128 || exit.Code < 0:
			healthy, why = false, fmt.Sprintf("its exec ended with code %d (killed by a signal?)", exit.Code)
		}
		if err == nil && exit.Code == 0 && !exit.OOMKilled {
			run.result, run.note = readResult(spec.LogPath, d.w.maxResultBytes())
		}
		if healthy && session != "" && d.assign.GetSessionEnds() {
			// The session's last task: its container holds the session's
			// state and goes, freeing the pool's room for other sessions.
			healthy, why = false, "its session ended"
		}
		w.pool.release(c, healthy, why)
	}()
}

// waitExec carries out WaitContainer for a persistent attempt: WaitDone
// once its exec ended.
func (d *driver) waitExec() {
	run := d.execRun
	d.goOp(func(ctx context.Context) attempt.Event {
		select {
		case <-run.done:
		case <-ctx.Done():
			return attempt.WaitDone{Err: ctx.Err()}
		}
		if run.failed != "" {
			return attempt.WaitDone{Failed: run.failed}
		}
		ev := attempt.WaitDone{Exit: run.exit, Result: run.result, ResultNote: run.note}
		d.storeArtifacts(ctx, &ev, run.filesDir)
		if run.filesDir != "" && !d.w.pool.live(run.warm) {
			// The container went (its session ended, the exec broke it):
			// its files directory goes with this exec's, unless its
			// removal is still under way (that removes it then).
			_ = os.Remove(filepath.Dir(run.filesDir))
		}
		return ev
	})
}

// stopExec carries out StopContainer for a persistent attempt: it kills
// the exec (no SIGTERM grace; the container is replaced afterwards).
func (d *driver) stopExec() {
	run := d.execRun
	run.stop()
	d.goOp(func(context.Context) attempt.Event { return attempt.StopDone{} })
}
