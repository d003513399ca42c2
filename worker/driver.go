package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/megaflow/megaflow/internal/artifact"
	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker/attempt"
)

// handle is the worker's view of one attempt: its mailbox, and a snapshot
// of its machine for Hello and Attempts. The driver owns the machine.
type handle struct {
	key  attempt.Key
	mbox *mailbox
	gpus []string // the GPUs the assignment pinned (nil when adopted)
	// sbx is set for a sandbox's attempt (sandbox.go); guarded by mu once
	// the handle is registered.
	sbx *sandboxBox
	// stopped closes once the attempt's container no longer runs (its final
	// event is queued) or its driver ended: a newer attempt of the task may
	// start then.
	stopped chan struct{}

	mu          sync.Mutex
	state       attempt.State
	containerID string
	started     bool
	// execEnv and execDir are a warm-served sandbox's exec defaults
	// (warmbox.go); nil, "" otherwise.
	execEnv map[string]string
	execDir string

	// stopMu guards the stop request, apart from mu (which the driver
	// holds while it applies events), so that the stream goroutine hands a
	// stop over without waiting for the driver.
	stopMu      sync.Mutex
	stopReq     bool
	cancelStart context.CancelFunc // the start's context, while it is being started
}

// stop asks the attempt's driver to stop it for reason (it ends STOPPED
// unless it ended first) and cancels its start: the request first, so the
// driver sees the stop before the cancelled start.
func (h *handle) stop(reason string) {
	h.mbox.put(attempt.StopRequest{Reason: reason})
	h.requestStop()
}

// requestStop marks the attempt stopped by the head (or superseded) and
// cancels its start, synchronously: once it returns, no runtime Start (nor
// a persistent attempt's exec) of the attempt begins, whatever the driver
// goroutine is doing. The stream goroutine calls it right after it queued
// the StopRequest, so the driver sees the stop before the failed start.
func (h *handle) requestStop() {
	h.stopMu.Lock()
	defer h.stopMu.Unlock()
	h.stopReq = true
	if h.cancelStart != nil {
		h.cancelStart()
	}
}

// startContext returns the context of the attempt's start, derived from
// parent and cancelled by requestStop (at once if a stop was requested
// already) or by cancel.
func (h *handle) startContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	h.stopMu.Lock()
	defer h.stopMu.Unlock()
	if h.stopReq {
		cancel()
	}
	h.cancelStart = cancel
	return ctx, cancel
}

func newHandle(k attempt.Key) *handle {
	return &handle{key: k, mbox: newMailbox(), stopped: make(chan struct{})}
}

func (h *handle) status() AttemptStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return AttemptStatus{Key: h.key, State: h.state, ContainerID: h.containerID, Started: h.started}
}

// mailbox is an unbounded queue of events for one driver: putting never
// blocks, so the stream goroutine, acks and effect goroutines can always
// deliver.
type mailbox struct {
	mu    sync.Mutex
	q     []attempt.Event
	ready chan struct{}
}

func newMailbox() *mailbox { return &mailbox{ready: make(chan struct{}, 1)} }

func (m *mailbox) put(ev attempt.Event) {
	m.mu.Lock()
	m.q = append(m.q, ev)
	m.mu.Unlock()
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

func (m *mailbox) drain() []attempt.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.q
	m.q = nil
	return q
}

// driver runs one attempt: its goroutine feeds events to the machine and
// carries out the effects. Runtime calls run in goroutines the driver owns
// (and waits for), each with a deadline, and come back as events, so the
// driver's loop never blocks on the runtime.
type driver struct {
	w      *Worker
	h      *handle
	m      *attempt.Machine
	assign *wire.Assignment // nil for an adopted container
	// adopted is what an adopted container's labels say (nil otherwise).
	adopted *found
	preds   []*handle
	log     *slog.Logger

	ctx    context.Context // cancelled when the worker stops
	cancel context.CancelFunc
	ops    sync.WaitGroup

	startCancel   context.CancelFunc
	timer         clock.Timer
	persistent    bool     // runs as an exec in a warm container (see pool.go)
	execRun       *execRun // the exec, once StartContainer began (persistent)
	forgotten     bool
	removeIssued  bool // the RemoveContainer effect ran (its removal outlives d.ctx)
	stoppedClosed bool
	shipper       *artifact.LogShipper // the log's shipper, once the wait began (artifacts on)

	began       time.Time          // when the worker took the attempt (lease lapses after it stop it)
	svc         *serviceRun        // nil for a batch task (service.go)
	probeCancel context.CancelFunc // abandons the readiness probe in flight
}

func newDriver(ctx context.Context, w *Worker, h *handle, m *attempt.Machine, a *wire.Assignment, adopted *found, preds []*handle) *driver {
	ctx, cancel := context.WithCancel(ctx)
	return &driver{
		w: w, h: h, m: m, assign: a, adopted: adopted, preds: preds,
		log: w.log.With("task", h.key.TaskID, "attempt", h.key.Attempt),
		ctx: ctx, cancel: cancel,
		persistent: a != nil && w.persistent(a),
		began:      w.clock.Now(),
	}
}

// run is the driver goroutine, started after the first event was applied.
// It returns when the attempt is over (Forget) or the worker stops; in the
// latter case the container is left as it is, unless the head acked its
// final event already (Removing): its removal, under way or still to come
// after a stop in flight, is finished first, within CallTimeout, so that a
// worker that stops does not leave an exited container nobody will report.
func (d *driver) run() {
	defer func() {
		d.cancel()
		d.ops.Wait()
		if !d.forgotten && !d.removeIssued && !d.persistent &&
			d.m.State() == attempt.Removing && d.m.ContainerID() != "" {
			d.removeNow(d.ctx, d.m.ContainerID())
		}
		if d.timer != nil {
			d.timer.Stop()
		}
		d.closeStopped()
		if d.forgotten {
			if d.svc != nil && d.svc.hostPort != 0 {
				d.w.ports.release(d.svc.hostPort) // its container is gone
			}
			d.w.forget(d.h)
		}
	}()
	for !d.forgotten {
		var tc <-chan time.Time
		if d.timer != nil {
			tc = d.timer.C()
		}
		select {
		case <-d.ctx.Done():
			return
		case <-d.h.mbox.ready:
			for _, ev := range d.h.mbox.drain() {
				if d.forgotten {
					break
				}
				d.apply(ev)
			}
		case <-tc:
			d.timer = nil
			d.apply(attempt.Tick{})
		}
	}
}

func (d *driver) apply(ev attempt.Event) {
	if wd, ok := ev.(attempt.WaitDone); ok {
		if why := d.w.lapseEnd(d.began, wd.Exit.FinishedAt); why != "" {
			// The lease lapsed while it ran: its init killed it, or the
			// worker is stopping it. It ends STOPPED (the head retries
			// it), whatever the runtime says of a stop.
			d.apply(attempt.StopRequest{Reason: why})
			wd.Exit.ExitedFirst = false
			ev = wd
		} else if wd.Exit.Lost {
			// The runtime lost it (the process runtime's spawner died):
			// not the task's failure, as a dead worker's attempts are not.
			d.apply(attempt.StopRequest{Reason: wd.Exit.Reason})
			wd.Exit.ExitedFirst = false
			ev = wd
		}
	}
	now := d.w.clock.Now()
	effects := d.m.Step(ev, now)
	d.h.mu.Lock()
	d.h.state, d.h.containerID, d.h.started = d.m.State(), d.m.ContainerID(), d.m.Started()
	d.h.mu.Unlock()
	if d.m.State() >= attempt.Reported {
		d.closeStopped()
	}
	if d.probeCancel != nil && d.m.State() != attempt.Running {
		d.probeCancel()
		d.probeCancel = nil
	}
	for _, e := range effects {
		d.exec(e, now)
	}
}

func (d *driver) closeStopped() {
	if !d.stoppedClosed {
		d.stoppedClosed = true
		close(d.h.stopped)
	}
}

func (d *driver) exec(e attempt.Effect, now time.Time) {
	switch e := e.(type) {
	case attempt.StartContainer:
		d.start(e.Deadline)
	case attempt.CancelStart:
		if d.startCancel != nil {
			d.startCancel()
		}
	case attempt.WaitContainer:
		if d.persistent {
			d.waitExec()
		} else {
			d.wait(e.ContainerID)
		}
	case attempt.StopContainer:
		if d.persistent {
			d.stopExec()
		} else {
			d.stop(e.ContainerID, e.Grace)
		}
	case attempt.RemoveContainer:
		if d.persistent {
			// The exec gave its container back to the pool when it ended.
			d.goOp(func(context.Context) attempt.Event { return attempt.RemoveDone{} })
		} else {
			d.removeIssued = true
			d.remove(e.ContainerID)
		}
	case attempt.Report:
		d.report(e)
	case attempt.SetTimer:
		if d.timer != nil {
			d.timer.Stop()
			d.timer = nil
		}
		if !e.At.IsZero() {
			d.timer = d.w.clock.NewTimer(e.At.Sub(now))
		}
	case attempt.ProbeReadiness:
		d.probe()
	case attempt.WatchLiveness:
		d.watchLiveness()
	case attempt.Forget:
		d.forgotten = true
	default:
		panic(fmt.Sprintf("worker: unknown effect %T", e))
	}
}

// goOp runs f in a goroutine the driver owns and posts its event, if f
// returns one (nil: nothing to say, e.g. a watch abandoned).
func (d *driver) goOp(f func(ctx context.Context) attempt.Event) {
	d.ops.Add(1)
	go func() {
		defer d.ops.Done()
		ev := f(d.ctx)
		if ev != nil && d.ctx.Err() == nil {
			d.h.mbox.put(ev)
		}
	}()
}

func (d *driver) start(deadline time.Time) {
	sctx, cancel := d.h.startContext(d.ctx)
	d.startCancel = cancel
	if d.svc != nil && d.svc.hostPort == 0 {
		want := 0
		if !d.w.publishesPorts(d.assign.GetSpec().GetNetwork()) {
			want = d.svc.wantPort // the process listens on the host
		}
		port, err := d.w.ports.take(want)
		if err != nil {
			d.goOp(func(context.Context) attempt.Event {
				cancel()
				return attempt.StartDone{Err: err}
			})
			return
		}
		d.svc.hostPort = port
	}
	spec, specErr := d.w.containerSpec(d.assign, d.h.key, deadline, d.svc)
	if d.persistent {
		d.startExec(spec, specErr, sctx, cancel)
		return
	}
	preds := d.preds
	d.goOp(func(context.Context) attempt.Event {
		defer cancel()
		if specErr != nil {
			return attempt.StartDone{Err: specErr}
		}
		for _, p := range preds {
			select {
			case <-p.stopped:
			case <-sctx.Done():
				return attempt.StartDone{Err: fmt.Errorf("waiting for attempt %d to stop: %w", p.key.Attempt, sctx.Err())}
			}
		}
		if d.w.warmServes(d.assign) && sctx.Err() == nil {
			if id, ok := d.w.claimWarm(sctx, d.assign, d.h, spec, d.log); ok {
				return attempt.StartDone{ContainerID: id}
			}
		}
		if dir := d.filesDir(); dir != "" {
			if err := d.w.setupFiles(sctx, &spec, d.assign, dir, ""); err != nil {
				return attempt.StartDone{Err: err}
			}
		}
		slotWait := time.Now()
		if err := d.w.sem.acquire(sctx); err != nil {
			return attempt.StartDone{Err: fmt.Errorf("waiting for a start slot: %w", err)}
		}
		defer d.w.sem.release()
		d.w.metrics.startSlotWait.Observe(time.Since(slotWait).Seconds())
		if err := d.w.checkGPUs(spec.GPUUUIDs); err != nil {
			d.w.metrics.startFailures.WithLabelValues("gpu").Inc()
			return attempt.StartDone{Err: err}
		}
		// The last check before the runtime: a stop handed over while this
		// start waited (for its slot, its files) cancelled sctx.
		if err := sctx.Err(); err != nil {
			return attempt.StartDone{Err: fmt.Errorf("stopped before its container started: %w", err)}
		}
		cctx, ccancel := context.WithTimeout(sctx, d.w.cfg.StartTimeout)
		defer ccancel()
		d.log.Debug("starting container", "name", spec.Name, "image", spec.Image)
		began := time.Now()
		id, err := d.w.rt.Start(cctx, spec)
		if errors.Is(err, contract.ErrConflict) && cctx.Err() == nil {
			id, err = d.w.startAfterConflict(cctx, spec, d.log)
		}
		result := "ok"
		if err != nil && sctx.Err() == nil { // not a start cancelled by a stop
			result = "error"
			d.w.metrics.startFailures.WithLabelValues(startFailureClass(err)).Inc()
		}
		d.w.metrics.startSeconds.WithLabelValues(result).Observe(time.Since(began).Seconds())
		if err == nil {
			d.w.imageStarted(spec.Image)
			if isSandbox(d.assign) {
				d.w.metrics.sandboxCreates.WithLabelValues("fresh").Inc()
			}
		}
		return attempt.StartDone{ContainerID: id, Err: err}
	})
}

func (d *driver) wait(id string) {
	path := logPath(d.w.cfg.DataDir, d.h.key)
	d.goOp(func(ctx context.Context) attempt.Event {
		stopShipping := d.startShipping(ctx)
		exit, err := d.w.rt.Wait(ctx, id)
		stopShipping()
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("waiting for container failed", "container", id, "err", err)
			}
			return attempt.WaitDone{Err: err}
		}
		ev := attempt.WaitDone{Exit: exit}
		if exit.Code == 0 && !exit.OOMKilled {
			ev.Result, ev.ResultNote = readResult(path, d.w.maxResultBytes())
		}
		d.storeArtifacts(ctx, &ev, d.filesDir())
		return ev
	})
}

func (d *driver) stop(id string, grace time.Duration) {
	d.goOp(func(ctx context.Context) attempt.Event {
		ctx, cancel := context.WithTimeout(ctx, grace+d.w.cfg.CallTimeout)
		defer cancel()
		err := d.w.rt.Stop(ctx, id, grace)
		if err != nil && !errors.Is(err, contract.ErrNotFound) {
			d.log.Warn("stopping container failed; will retry", "container", id, "err", err)
		}
		return attempt.StopDone{Err: err}
	})
}

func (d *driver) remove(id string) {
	d.goOp(func(ctx context.Context) attempt.Event {
		return attempt.RemoveDone{Err: d.removeNow(ctx, id)}
	})
}

// removeNow removes container id within CallTimeout. The deadline is its
// own, detached from ctx's cancellation: a worker that stops meanwhile
// (Run waits for the driver, and the driver for it) lets the removal end
// rather than cut it short and leave the exited container behind.
func (d *driver) removeNow(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.w.cfg.CallTimeout)
	defer cancel()
	err := d.w.rt.Remove(ctx, id)
	if err != nil {
		d.log.Warn("removing container failed; reconciliation will retry", "container", id, "err", err)
		return err
	}
	d.w.dropClaim(id)
	return nil
}

func (d *driver) report(r attempt.Report) {
	ev := r.Event
	var onAck func()
	if r.Final {
		mbox := d.h.mbox
		onAck = func() { mbox.put(attempt.Acked{}) }
		// Per-attempt lines are DEBUG: at thousands of tasks a minute an
		// INFO line each would drown the log. Metrics count them
		// (megaflow_attempts_ended_total on the heads).
		d.log.Debug("attempt finished", "event", eventName(ev.GetKind()), "exit_code", ev.GetExitCode(),
			"reason", ev.GetReason(), "container", ev.GetContainerId())
	} else {
		d.log.Debug("attempt "+eventName(ev.GetKind()), "container", ev.GetContainerId())
	}
	d.w.outbox.add(ev, onAck)
	if a, ok := d.artifactAttempt(); r.Final && ev.GetArtifactsPending() && ok {
		d.w.watchLanded(d.h.key, a.ManifestKey())
	}
}

// containerSpec builds the container of attempt k from its assignment;
// svc, for a service task, holds its host port (service.go).
func (w *Worker) containerSpec(a *wire.Assignment, k attempt.Key, deadline time.Time, svc *serviceRun) (contract.Spec, error) {
	s := a.GetSpec()
	if s == nil {
		return contract.Spec{}, errors.New("the assignment carries no task spec")
	}
	env := make(map[string]string, len(s.GetEnv())+len(a.GetEnv())+4)
	maps.Copy(env, s.GetEnv())
	maps.Copy(env, a.GetEnv())
	env["MEGAFLOW_TASK_ID"] = k.TaskID
	env["MEGAFLOW_ATTEMPT"] = strconv.FormatUint(uint64(k.Attempt), 10)
	env["MEGAFLOW_GRAPH_ID"] = a.GetGraphId()
	env["MEGAFLOW_WORKER_ID"] = w.cfg.NodeID
	labels := w.clusterLabels(map[string]string{
		LabelTask:    k.TaskID,
		LabelAttempt: strconv.FormatUint(uint64(k.Attempt), 10),
		LabelGraph:   a.GetGraphId(),
		LabelTerm:    strconv.FormatUint(a.GetLeaderTerm(), 10),
		LabelTenant:  a.GetTenant(),
	})
	if outs := s.GetOutputPaths(); len(outs) > 0 {
		if b, err := json.Marshal(outs); err == nil {
			labels[LabelOutputs] = string(b)
		}
	}
	if !deadline.IsZero() {
		labels[LabelDeadline] = strconv.FormatInt(deadline.UnixMilli(), 10)
		labels[LabelTimeout] = strconv.FormatInt(s.GetTimeoutSeconds(), 10)
	}
	if m := s.GetResources().GetMemoryBytes(); m > 0 {
		labels[LabelMemory] = strconv.FormatInt(m, 10)
	}
	if sb := s.GetSandbox(); sb != nil {
		labels[LabelSandboxIdle] = strconv.FormatInt(sb.GetIdleTimeoutSeconds(), 10)
	}
	network := s.GetNetwork()
	var ports []contract.PortBinding
	if svc != nil {
		cport := svc.hostPort
		if w.publishesPorts(network) && svc.wantPort != 0 {
			cport = svc.wantPort
		}
		env["PORT"] = strconv.Itoa(cport)
		env["MEGAFLOW_SERVICE_PORT"] = strconv.Itoa(cport)
		env["MEGAFLOW_SERVICE_ENDPOINT"] = w.endpoint(svc.hostPort)
		labels[LabelServicePort] = strconv.Itoa(svc.hostPort)
		labels[LabelServiceProbe] = svc.probeLabel()
		ports = []contract.PortBinding{{ContainerPort: cport, HostPort: svc.hostPort}}
		if network == "" {
			network = "bridge" // "none" cannot be published
		}
	}
	if network == "" && len(s.GetUsesServices()) > 0 {
		network = "bridge" // it must reach the services' endpoints
	}
	if network == "" {
		network = "none"
	}
	pol := w.applied(a)
	if err := w.admit(a, pol); err != nil {
		return contract.Spec{}, err
	}
	return contract.Spec{
		User:           pol.GetRunAsUser(),
		ReadOnlyRootfs: pol.GetReadOnlyRootFs(),
		PidsLimit:      pol.GetMaxPids(),
		Init:           w.initSpec(),
		Ports:          ports,
		Name:           ContainerName(w.nameScope(), k),
		Image:          s.GetImage(),
		Command:        s.GetCommand(),
		Env:            env,
		WorkingDir:     s.GetWorkingDir(),
		CPUMillis:      s.GetResources().GetCpuMillis(),
		MemoryBytes:    s.GetResources().GetMemoryBytes(),
		Network:        network,
		Capabilities:   s.GetCapabilities(),
		Labels:         labels,
		GPUUUIDs:       a.GetGpuUuids(),
		LogPath:        logPath(w.cfg.DataDir, k),
	}, nil
}

// checkGPUs runs the configured GPU check on an attempt's devices before it
// starts; the error, if any, is the attempt's failure reason.
func (w *Worker) checkGPUs(uuids []string) error {
	if len(uuids) == 0 || w.cfg.GPUCheck == nil {
		return nil
	}
	if err := w.cfg.GPUCheck(uuids); err != nil {
		return fmt.Errorf("GPU check refused the start (%w): %w", attempt.ErrNotRetryable, err)
	}
	return nil
}

// eventName is the lower-case name of an attempt event kind ("started").
func eventName(k wire.AttemptEventKind) string {
	return strings.ToLower(strings.TrimPrefix(k.String(), "ATTEMPT_EVENT_KIND_"))
}
