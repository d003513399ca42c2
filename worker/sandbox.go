package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/errs"
	mfspec "github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker/attempt"
)

// Sandboxes on the worker (docs/sandboxes.md): the gRPC listener the heads
// relay a sandbox's execs and file copies to (SandboxWorkerService on
// Config.SandboxAddr), and each sandbox's idle timer. None of it goes
// through the head's log: the worker checks the sandbox is one of its
// RUNNING attempts, then talks to the runtime.

// sandboxBox is the worker's view of one sandbox attempt: its execs in
// flight and its last activity, for the idle timer, and whether its
// container is paused (SetPaused).
type sandboxBox struct {
	idle time.Duration // 0: no idle timeout

	mu       sync.Mutex
	inflight int
	last     time.Time // the last exec's start or end (or file copy), or the last resume; zero: none yet
	expired  bool      // the idle timer fired
	// paused: the container is paused, or being paused or unpaused
	// (SetPaused): calls are refused, and the idle timer does not count.
	paused bool
}

// begin marks an exec (or a file copy) of sandbox id started at now.
// Errors, the box unchanged: FailedPrecondition when the sandbox expired,
// or is paused (spec.SandboxPausedError).
func (b *sandboxBox) begin(id string, now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.expired:
		return errs.New(errs.FailedPrecondition, "sandbox %s expired: it was idle past its idle timeout and is stopping", id)
	case b.paused:
		return mfspec.SandboxPausedError(id)
	}
	b.inflight++
	b.last = now
	return nil
}

// end marks an exec ended at now.
func (b *sandboxBox) end(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inflight--
	b.last = now
}

// markPaused marks sandbox id's box paused before its container is
// paused, so that no call begins meanwhile. Errors, the box unchanged:
// FailedPrecondition when it expired, or has calls in flight
// (spec.SandboxBusyError).
func (b *sandboxBox) markPaused(id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.expired:
		return errs.New(errs.FailedPrecondition, "sandbox %s expired: it was idle past its idle timeout and is stopping", id)
	case b.inflight > 0:
		return mfspec.SandboxBusyError(id, b.inflight)
	}
	b.paused = true
	return nil
}

// unmarkPaused clears the mark once the container runs again, at now:
// the idle timer counts afresh from now.
func (b *sandboxBox) unmarkPaused(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.paused {
		b.paused = false
		b.last = now
	}
}

// isPaused reports the mark.
func (b *sandboxBox) isPaused() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.paused
}

// idleFor reports whether the box ran no exec for its idle timeout as of
// now; the first call seeing it running starts the count. It marks the
// box expired when so. A paused box is never idle.
func (b *sandboxBox) idleFor(now time.Time) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.idle <= 0 || b.expired || b.inflight > 0 || b.paused {
		return 0, false
	}
	if b.last.IsZero() {
		b.last = now
		return 0, false
	}
	if d := now.Sub(b.last); d >= b.idle {
		b.expired = true
		return d, true
	}
	return 0, false
}

// setSandbox marks h a sandbox's attempt with idle timeout idle (0: none),
// its container paused or not (an adopted container keeps its state).
func (h *handle) setSandbox(idle time.Duration, paused bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sbx = &sandboxBox{idle: idle, paused: paused}
}

// listenSandbox binds Config.SandboxAddr and sets WorkerInfo.addr to the
// address heads reach it at. New calls it.
func (w *Worker) listenSandbox() error {
	if w.cfg.SandboxAddr == "" {
		return nil
	}
	lis, err := net.Listen("tcp", w.cfg.SandboxAddr)
	if err != nil {
		return fmt.Errorf("SandboxAddr %s: %w (--sandbox-addr)", w.cfg.SandboxAddr, err)
	}
	host, port, _ := net.SplitHostPort(lis.Addr().String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = w.advertiseHost
	}
	w.sandboxLis = lis
	w.info.Addr = net.JoinHostPort(host, port)
	return nil
}

// SandboxAddr returns the address the worker serves sandboxes at (as
// advertised in WorkerInfo.addr), or "" without Config.SandboxAddr.
func (w *Worker) SandboxAddr() string { return w.info.GetAddr() }

// serveSandboxes serves SandboxWorkerService until ctx ends, and runs the
// idle timers. Run calls it on a goroutine of its own.
func (w *Worker) serveSandboxes(ctx context.Context) {
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(mfspec.SandboxMaxFile + 1<<20),
		// The heads ping their connections here every 10 s (head/sandbox.go),
		// so that a worker cut off mid-exec is noticed in seconds.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true})}
	if w.cfg.TLS != nil {
		// Only heads relay sandbox calls: a head certificate is required
		// at the handshake, and checked again per method.
		opts = append(opts, grpc.Creds(w.cfg.TLS.ServerCredentials(
			tlsconfig.RefusalLogger(w.log, "sandbox "+w.SandboxAddr(), w.clock.Now, 10*time.Second), tlsconfig.RoleHead)),
			grpc.ChainUnaryInterceptor(tlsconfig.UnaryAuthorizer()), grpc.ChainStreamInterceptor(tlsconfig.StreamAuthorizer()))
	}
	// With ACLs, only heads (which hold the cluster's relay key) relay
	// sandbox calls, with or without TLS (relaykey.go).
	opts = append(opts, grpc.ChainUnaryInterceptor(w.relayKeyUnary), grpc.ChainStreamInterceptor(w.relayKeyStream))
	srv := grpc.NewServer(opts...)
	wire.RegisterSandboxWorkerServiceServer(srv, &sandboxServer{w: w})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(w.sandboxLis); err != nil {
			w.log.Warn("sandbox server stopped", "addr", w.cfg.SandboxAddr, "err", err)
		}
	}()
	w.sandboxIdleLoop(ctx)
	srv.Stop() // execs in flight are cancelled: their contexts end and kill them
	<-done
}

// sandboxIdleTick is how often the idle timers are checked.
const sandboxIdleTick = 250 * time.Millisecond

// sandboxIdleLoop stops each running sandbox that ran no exec for its idle
// timeout (attempt.Expire: FAILED with SANDBOX_IDLE), until ctx ends.
func (w *Worker) sandboxIdleLoop(ctx context.Context) {
	for clock.Sleep(w.clock, sandboxIdleTick, ctx.Done()) {
		w.mu.Lock()
		hs := make([]*handle, 0, len(w.attempts))
		for _, h := range w.attempts {
			hs = append(hs, h)
		}
		w.mu.Unlock()
		now := w.clock.Now()
		for _, h := range hs {
			h.mu.Lock()
			box, running := h.sbx, h.state == attempt.Running
			h.mu.Unlock()
			if box == nil || box.idle <= 0 || !running {
				continue
			}
			if d, idle := box.idleFor(now); idle {
				reason := fmt.Sprintf("sandbox idle for %v (idle_timeout_seconds %d): no exec ran", d.Round(time.Second), int64(box.idle/time.Second))
				w.log.Info("stopping an idle sandbox", "task", h.key.TaskID, "attempt", h.key.Attempt, "idle", d)
				h.mbox.put(attempt.Expire{Reason: reason, Code: wire.ReasonCode_REASON_CODE_SANDBOX_IDLE})
			}
		}
	}
}

// sandboxTarget returns the container and box of sandbox id's attempt n
// if this worker runs it. Errors: NotFound (not held here),
// FailedPrecondition (not running, or not a sandbox).
func (w *Worker) sandboxTarget(id string, n uint32) (string, *sandboxBox, error) {
	if err := mfspec.CheckSandboxID("sandbox_id", id); err != nil {
		return "", nil, err
	}
	key := attempt.Key{TaskID: mfspec.SandboxTaskID(id), Attempt: n}
	h := w.handleOf(key)
	if h == nil {
		return "", nil, errs.New(errs.NotFound, "sandbox %s (attempt %d) does not run on worker %s: it ended or was never placed here; get the sandbox again", id, n, w.cfg.NodeID)
	}
	st := h.status()
	if st.State != attempt.Running || st.ContainerID == "" {
		return "", nil, errs.New(errs.FailedPrecondition, "sandbox %s is %s on worker %s, not running: wait until it is READY, or create another if it ended", id, st.State, w.cfg.NodeID)
	}
	h.mu.Lock()
	if h.sbx == nil {
		// Adopted from a container without LabelSandboxIdle: no idle
		// timeout known; the id's shape says it is a sandbox.
		h.sbx = &sandboxBox{}
	}
	box := h.sbx
	h.mu.Unlock()
	return st.ContainerID, box, nil
}

// sandboxServer implements wire.SandboxWorkerServiceServer.
type sandboxServer struct {
	wire.UnimplementedSandboxWorkerServiceServer
	w *Worker
}

// Exec runs one command in the sandbox's container and streams its output
// and exit.
func (s *sandboxServer) Exec(req *wire.SandboxExecRequest, stream grpc.ServerStreamingServer[wire.SandboxExecResponse]) error {
	if err := mfspec.CheckSandboxExec(req); err != nil {
		return errs.ToStatus(err)
	}
	se, ok := s.w.rt.(contract.StreamExecer)
	if !ok {
		return errs.ToStatus(errs.New(errs.FailedPrecondition, "worker %s's %s runtime cannot exec in sandboxes", s.w.cfg.NodeID, s.w.rt.Name()))
	}
	cid, box, err := s.w.sandboxTarget(req.GetSandboxId(), req.GetAttempt())
	if err != nil {
		return errs.ToStatus(err)
	}
	if err := box.begin(req.GetSandboxId(), s.w.clock.Now()); err != nil {
		return errs.ToStatus(err)
	}
	defer func() { box.end(s.w.clock.Now()) }()
	timeout := time.Duration(req.GetTimeoutMillis()) * time.Millisecond
	if timeout == 0 {
		timeout = mfspec.SandboxDefaultExecTimeoutMillis * time.Millisecond
	}
	// A deadline of the call's context: the system clock, as every
	// context deadline (docs/leader.md, "internal/clock").
	ctx, cancel := context.WithTimeout(stream.Context(), timeout)
	defer cancel()
	out := &execOut{send: stream.Send, limit: mfspec.SandboxMaxOutput}
	env, cwd := req.GetEnv(), req.GetCwd()
	if h := s.w.handleOf(attempt.Key{TaskID: mfspec.SandboxTaskID(req.GetSandboxId()), Attempt: req.GetAttempt()}); h != nil {
		// A warm-served sandbox: its environment and working directory
		// are each exec's defaults (warmbox.go).
		if denv, dcwd := h.execDefaults(); denv != nil || dcwd != "" {
			merged := maps.Clone(denv)
			if merged == nil {
				merged = map[string]string{}
			}
			maps.Copy(merged, env)
			env = merged
			if cwd == "" {
				cwd = dcwd
			}
		}
	}
	exit, err := se.ExecStream(ctx, cid, contract.ExecRequest{
		Command:    req.GetArgv(),
		Env:        env,
		WorkingDir: cwd,
		Stdin:      req.GetStdin(),
		Stdout:     out.writer(false),
		Stderr:     out.writer(true),
	})
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded) && stream.Context().Err() == nil
	if err != nil && !timedOut {
		return errs.ToStatus(runtimeErr(req.GetSandboxId(), err))
	}
	if err := out.err(); err != nil {
		return err
	}
	return stream.Send(&wire.SandboxExecResponse{Exit: &wire.SandboxExecExit{
		ExitCode: int32(exit.Code), TimedOut: timedOut, Truncated: out.truncated(), Reason: exit.Reason}})
}

// WriteFile writes one file into the sandbox's container.
func (s *sandboxServer) WriteFile(ctx context.Context, req *wire.SandboxWriteFileRequest) (*wire.SandboxWriteFileResponse, error) {
	if err := mfspec.CheckSandboxPath(req.GetSandboxId(), req.GetPath()); err != nil {
		return nil, errs.ToStatus(err)
	}
	if n := len(req.GetData()); n > mfspec.SandboxMaxFile {
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument, "sandbox %s: a file of %d bytes; the limit is %d", req.GetSandboxId(), n, mfspec.SandboxMaxFile))
	}
	fc, box, cid, err := s.files(req.GetSandboxId(), req.GetAttempt())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	defer func() { box.end(s.w.clock.Now()) }()
	if err := fc.WriteFile(ctx, cid, req.GetPath(), req.GetData(), req.GetMode()&0o7777); err != nil {
		return nil, errs.ToStatus(runtimeErr(req.GetSandboxId(), err))
	}
	return &wire.SandboxWriteFileResponse{}, nil
}

// readChunk is the most bytes of a file one ReadFile message carries.
const readChunk = 1 << 20

// ReadFile streams one file of the sandbox's container.
func (s *sandboxServer) ReadFile(req *wire.SandboxReadFileRequest, stream grpc.ServerStreamingServer[wire.SandboxReadFileResponse]) error {
	if err := mfspec.CheckSandboxPath(req.GetSandboxId(), req.GetPath()); err != nil {
		return errs.ToStatus(err)
	}
	limit := req.GetMaxBytes()
	if limit <= 0 || limit > mfspec.SandboxMaxFile {
		limit = mfspec.SandboxMaxFile
	}
	fc, box, cid, err := s.files(req.GetSandboxId(), req.GetAttempt())
	if err != nil {
		return errs.ToStatus(err)
	}
	data, mode, err := fc.ReadFile(stream.Context(), cid, req.GetPath(), limit)
	box.end(s.w.clock.Now())
	if err != nil {
		return errs.ToStatus(runtimeErr(req.GetSandboxId(), err))
	}
	first := &wire.SandboxReadFileResponse{Size: int64(len(data)), Mode: mode}
	for {
		n := min(len(data), readChunk)
		msg := &wire.SandboxReadFileResponse{Data: data[:n]}
		if first != nil {
			first.Data, msg, first = data[:n], first, nil
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
		data = data[n:]
		if len(data) == 0 {
			return nil
		}
	}
}

// files resolves a file request's target; the caller ends the box's
// activity.
func (s *sandboxServer) files(id string, n uint32) (contract.FileCopier, *sandboxBox, string, error) {
	fc, ok := s.w.rt.(contract.FileCopier)
	if !ok {
		return nil, nil, "", errs.New(errs.FailedPrecondition, "worker %s's %s runtime cannot copy files of sandboxes", s.w.cfg.NodeID, s.w.rt.Name())
	}
	cid, box, err := s.w.sandboxTarget(id, n)
	if err != nil {
		return nil, nil, "", err
	}
	if err := box.begin(id, s.w.clock.Now()); err != nil {
		return nil, nil, "", err
	}
	return fc, box, cid, nil
}

// The errs.Error reasons of the worker's file calls (errs.ReasonOf).
const (
	// ReasonFileNotFound: the path names nothing in the sandbox (NotFound).
	ReasonFileNotFound = "FILE_NOT_FOUND"
	// ReasonFileTooLarge: the file is over the read limit, or not a
	// regular file (FailedPrecondition).
	ReasonFileTooLarge = "FILE_TOO_LARGE"
	// ReasonRuntimeUnavailable: the worker's container runtime did not
	// answer, or failed the call on its side (an engine's HTTP 500 under
	// load: Unavailable); the call may or may not have run.
	ReasonRuntimeUnavailable = "RUNTIME_UNAVAILABLE"
)

// runtimeErr classifies a runtime's error for the wire.
func runtimeErr(id string, err error) error {
	switch {
	case errors.Is(err, contract.ErrNoSuchFile):
		e := errs.New(errs.NotFound, "sandbox %s: %v", id, err)
		e.Reason = ReasonFileNotFound
		return e
	case errors.Is(err, contract.ErrFileTooLarge):
		e := errs.New(errs.FailedPrecondition, "sandbox %s: %v", id, err)
		e.Reason = ReasonFileTooLarge
		return e
	case errors.Is(err, contract.ErrNotFound):
		return errs.New(errs.FailedPrecondition, "sandbox %s: its container is gone (%v): the sandbox is ending; get it to see why", id, err)
	case errors.Is(err, contract.ErrUnavailable):
		e := errs.New(errs.Unavailable, "sandbox %s: the worker's container runtime does not answer: %v", id, err)
		e.Reason = ReasonRuntimeUnavailable
		return e
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	msg := err.Error()
	if strings.Contains(msg, "not running") {
		return errs.New(errs.FailedPrecondition, "sandbox %s: %v", id, err)
	}
	if strings.Contains(msg, "marked read-only") {
		// The engine copies into the container's root filesystem only, and
		// a tenant's admission policy made it read-only (its /tmp is a
		// tmpfs the engine's copy does not see either).
		return errs.New(errs.FailedPrecondition, "sandbox %s: its root filesystem is read-only (its tenant's admission policy forces it), and file copies write "+
			"the root filesystem, so they cannot work here: move files with execs instead (e.g. `megaflow sandbox exec %s -- sh -c 'cat > /tmp/f' < f`): %v", id, id, err)
	}
	// Anything else is the engine's own failure, not the caller's request
	// (Docker answers 500 to an exec attach now and then on a loaded
	// host): retryable, like an engine that does not answer.
	e := errs.New(errs.Unavailable, "sandbox %s: the container runtime failed the call: %v; it may or may not have run: retry it if that is safe", id, err)
	e.Reason = ReasonRuntimeUnavailable
	return e
}

// execOut turns an exec's stdout and stderr writes into stream messages,
// keeping the first limit bytes of each.
type execOut struct {
	send  func(*wire.SandboxExecResponse) error
	limit int

	mu      sync.Mutex
	n       [2]int
	trunc   bool
	sendErr error
}

// execChunk bounds one message's output.
const execChunk = 256 << 10

func (o *execOut) writer(stderr bool) *execWriter { return &execWriter{o: o, stderr: stderr} }

func (o *execOut) truncated() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.trunc
}

func (o *execOut) err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sendErr
}

type execWriter struct {
	o      *execOut
	stderr bool
}

// Write sends p (what fits under the limit), in chunks; it never fails, so
// that the exec's output keeps draining.
func (w *execWriter) Write(p []byte) (int, error) {
	o := w.o
	o.mu.Lock()
	defer o.mu.Unlock()
	i := 0
	if w.stderr {
		i = 1
	}
	keep := min(len(p), o.limit-o.n[i])
	if keep < len(p) {
		o.trunc = true
	}
	o.n[i] += keep
	for b := p[:keep]; len(b) > 0 && o.sendErr == nil; {
		n := min(len(b), execChunk)
		c := append([]byte(nil), b[:n]...)
		msg := &wire.SandboxExecResponse{Stdout: c}
		if w.stderr {
			msg = &wire.SandboxExecResponse{Stderr: c}
		}
		o.sendErr = o.send(msg)
		b = b[n:]
	}
	return len(p), nil
}
