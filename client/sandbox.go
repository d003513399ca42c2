package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// Sandboxes (docs/sandboxes.md): long-lived containers an agent creates
// from an image, runs commands in, reads and writes files in, and closes.

// SandboxInfo is a sandbox as the heads show it: id, state, reason, worker,
// times.
type SandboxInfo = wire.Sandbox

// SandboxState is a sandbox's state.
type SandboxState = wire.SandboxState

// The sandbox states.
const (
	SandboxPending  = wire.SandboxState_SANDBOX_STATE_PENDING
	SandboxStarting = wire.SandboxState_SANDBOX_STATE_STARTING
	SandboxReady    = wire.SandboxState_SANDBOX_STATE_READY
	SandboxClosed   = wire.SandboxState_SANDBOX_STATE_CLOSED
	SandboxExpired  = wire.SandboxState_SANDBOX_STATE_EXPIRED
	SandboxLost     = wire.SandboxState_SANDBOX_STATE_LOST
	SandboxFailed   = wire.SandboxState_SANDBOX_STATE_FAILED
	SandboxPaused   = wire.SandboxState_SANDBOX_STATE_PAUSED
)

// The reasons (errs.ReasonOf) of the errors of a sandbox's calls, for
// callers that branch on them; the messages say the same for people.
const (
	ReasonSandboxNotFound    = "SANDBOX_NOT_FOUND"   // errs.NotFound: no such sandbox
	ReasonSandboxNotReady    = "SANDBOX_NOT_READY"   // errs.FailedPrecondition: PENDING or STARTING; wait
	ReasonSandboxClosed      = "SANDBOX_CLOSED"      // errs.FailedPrecondition: closed by a client
	ReasonSandboxExpired     = "SANDBOX_EXPIRED"     // errs.FailedPrecondition: lifetime or idle timeout reached
	ReasonSandboxLost        = "SANDBOX_LOST"        // errs.FailedPrecondition: its worker or container was lost
	ReasonSandboxFailed      = "SANDBOX_FAILED"      // errs.FailedPrecondition: it could not start, or its container exited
	ReasonWorkerUnreachable  = "WORKER_UNREACHABLE"  // errs.Unavailable: the call may or may not have run
	ReasonFileNotFound       = "FILE_NOT_FOUND"      // errs.NotFound: ReadFile of a missing path
	ReasonFileTooLarge       = "FILE_TOO_LARGE"      // errs.FailedPrecondition: over 64 MiB, or not a regular file
	ReasonRuntimeUnavailable = "RUNTIME_UNAVAILABLE" // errs.Unavailable: the worker's container runtime did not answer
	ReasonSandboxPaused      = "SANDBOX_PAUSED"      // errs.FailedPrecondition: PAUSED (Pause); Resume it first
	ReasonSandboxBusy        = "SANDBOX_BUSY"        // errs.FailedPrecondition: a Pause while execs or file calls run
)

// SandboxSpec is what CreateSandbox asks for. Only Image (or
// FromSnapshot) is required.
type SandboxSpec struct {
	// ID makes CreateSandbox idempotent: "sbx-" then [a-z0-9]; empty: one
	// is chosen here, before the first try.
	ID string
	// Tenant owns the sandbox; empty: "default".
	Tenant string
	// Image is the container image. Required.
	Image string
	// CPUMillis (1000 = one core) and MemoryBytes are reserved and
	// limited; 0: the cluster's task defaults.
	CPUMillis   int64
	MemoryBytes int64
	// Env and WorkingDir apply to every exec (an exec's own override).
	Env        map[string]string
	WorkingDir string
	// Network is the container network mode; empty: "none".
	Network string
	// Labels are the sandbox graph's labels.
	Labels map[string]string
	// Lifetime ends the sandbox (EXPIRED) this long after creation, in
	// whole seconds; 0: one hour. At most 7 days.
	Lifetime time.Duration
	// IdleTimeout ends it (EXPIRED) after this long without an exec, in
	// whole seconds; 0: never for idleness.
	IdleTimeout time.Duration
	// WaitReady makes CreateSandbox wait up to this long (at most 10
	// minutes) for the sandbox to be READY; 0: return once accepted.
	WaitReady time.Duration
	// FromSnapshot creates the sandbox from a snapshot (Snapshot.Id;
	// (*Sandbox).Snapshot) instead of Image, which must then be empty: it
	// starts with the snapshotted sandbox's files, on the worker holding
	// the snapshot.
	FromSnapshot string
}

// Sandbox is a handle on one sandbox. Its methods are safe for concurrent
// use.
type Sandbox struct {
	c  *Client
	id string

	mu   sync.Mutex
	info *SandboxInfo
}

// ID returns the sandbox's id.
func (s *Sandbox) ID() string { return s.id }

// Info returns the sandbox as last seen by this handle.
func (s *Sandbox) Info() *SandboxInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info
}

func (s *Sandbox) set(info *SandboxInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.info == nil || info.GetIndex() >= s.info.GetIndex() {
		s.info = info
	}
}

// index is the table index the handle has seen: requests ask heads to be
// at least that fresh.
func (s *Sandbox) index() uint64 { return s.Info().GetIndex() }

// CreateSandbox creates a sandbox and, with WaitReady, waits for it to be
// READY. It is retried through leader changes like Submit (idempotent by
// ID). When WaitReady is set and the sandbox ended instead (it could not
// start), it returns the sandbox and an errs.FailedPrecondition error
// saying why. Errors: errs.InvalidArgument (a field out of bounds, named),
// errs.ResourceExhausted (rate limit, quota), ctx's error.
func (c *Client) CreateSandbox(ctx context.Context, sp SandboxSpec) (*Sandbox, error) {
	if sp.ID == "" {
		sp.ID = spec.NewSandboxID(rand.Reader)
	}
	ws := &wire.SandboxCreateSpec{Id: sp.ID, Tenant: sp.Tenant, Image: sp.Image, CpuMillis: sp.CPUMillis, MemoryBytes: sp.MemoryBytes,
		Env: sp.Env, WorkingDir: sp.WorkingDir, Network: sp.Network, Labels: sp.Labels,
		LifetimeSeconds: int64(sp.Lifetime / time.Second), IdleTimeoutSeconds: int64(sp.IdleTimeout / time.Second),
		FromSnapshot: sp.FromSnapshot}
	if _, err := spec.SandboxGraph(ws); err != nil {
		return nil, err
	}
	var res *wire.CreateSandboxResponse
	err := c.callConn(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) (err error) {
		res, err = wire.NewSandboxServiceClient(cc).CreateSandbox(ctx, &wire.CreateSandboxRequest{Spec: ws, WaitReadyMillis: sp.WaitReady.Milliseconds(),
			MinIndex: c.sessionIndex()})
		return err
	})
	if err != nil {
		return nil, err
	}
	c.observe(res.GetSandbox().GetIndex())
	s := &Sandbox{c: c, id: sp.ID}
	s.set(res.GetSandbox())
	if st := res.GetSandbox().GetState(); sp.WaitReady > 0 && !spec.SandboxLive(st) {
		e := errs.New(errs.FailedPrecondition, "sandbox %s is %s (%s: %s)", sp.ID, st, res.GetSandbox().GetReasonCode(), res.GetSandbox().GetReason())
		e.Reason = "SANDBOX_" + strings.TrimPrefix(st.String(), "SANDBOX_STATE_")
		return s, e
	}
	return s, nil
}

// GetSandbox returns a handle on sandbox id with its current state.
// Errors: errs.NotFound.
func (c *Client) GetSandbox(ctx context.Context, id string) (*Sandbox, error) {
	s := &Sandbox{c: c, id: id}
	if _, err := s.Refresh(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Refresh reads the sandbox's state again and returns it. Errors:
// errs.NotFound.
func (s *Sandbox) Refresh(ctx context.Context) (*SandboxInfo, error) {
	var res *wire.GetSandboxResponse
	err := s.c.callConn(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) (err error) {
		res, err = wire.NewSandboxServiceClient(cc).GetSandbox(ctx, &wire.GetSandboxRequest{Id: s.id, MinIndex: max(s.index(), s.c.sessionIndex())})
		return err
	})
	if err != nil {
		return nil, err
	}
	s.c.observe(res.GetSandbox().GetIndex())
	s.set(res.GetSandbox())
	return res.GetSandbox(), nil
}

// ListSandboxes returns a tenant's sandboxes (every tenant's for ""),
// oldest first: live ones, or all with all. It reads every page
// (ListSandboxesPage) and is retried like other reads.
func (c *Client) ListSandboxes(ctx context.Context, tenant string, all bool) ([]*SandboxInfo, error) {
	var out []*SandboxInfo
	f := SandboxFilter{Tenant: tenant, All: all, PageSize: spec.SandboxMaxPageSize}
	for {
		page, next, err := c.ListSandboxesPage(ctx, f)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if next == "" {
			return out, nil
		}
		f.PageToken = next
	}
}

// SandboxFilter selects the sandboxes of ListSandboxesPage.
type SandboxFilter struct {
	// Tenant: only this tenant's; "": every tenant's.
	Tenant string
	// All: ended sandboxes too; else live ones only.
	All bool
	// PageSize: at most this many (1 to 1000; 0: 100).
	PageSize int32
	// PageToken continues a previous listing (its next page token).
	PageToken string
}

// ListSandboxesPage returns one page of sandboxes, oldest first, and the
// token of the next page ("" at the end). Errors: errs.InvalidArgument (a
// page size out of range, a token no answer gave).
func (c *Client) ListSandboxesPage(ctx context.Context, f SandboxFilter) ([]*SandboxInfo, string, error) {
	var res *wire.ListSandboxesResponse
	err := c.callConn(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) (err error) {
		res, err = wire.NewSandboxServiceClient(cc).ListSandboxes(ctx, &wire.ListSandboxesRequest{Tenant: f.Tenant, All: f.All,
			PageSize: f.PageSize, PageToken: f.PageToken, MinIndex: c.sessionIndex()})
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return res.GetSandboxes(), res.GetNextPageToken(), nil
}

// Close closes the sandbox: its container is stopped and removed. Closing
// a sandbox that is closed or ended is no error. Retried like other calls.
// Errors: errs.NotFound.
func (s *Sandbox) Close(ctx context.Context) error {
	return updateSandbox(ctx, s, func(ctx context.Context, sc wire.SandboxServiceClient) (*wire.CloseSandboxResponse, error) {
		return sc.CloseSandbox(ctx, &wire.CloseSandboxRequest{Id: s.id, MinIndex: s.index()})
	})
}

// updateSandbox runs call, one of the sandbox service's calls that answer
// with the sandbox as it is afterwards (close, pause, resume, set
// timeout), retried like other calls (Client.callConn), and makes that
// answer s's Info. Errors: call's, as callConn returns them.
func updateSandbox[R interface{ GetSandbox() *wire.Sandbox }](ctx context.Context, s *Sandbox,
	call func(context.Context, wire.SandboxServiceClient) (R, error)) error {
	var res R
	err := s.c.callConn(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) (err error) {
		res, err = call(ctx, wire.NewSandboxServiceClient(cc))
		return err
	})
	if err != nil {
		return err
	}
	s.c.observe(res.GetSandbox().GetIndex())
	s.set(res.GetSandbox())
	return nil
}

// ExecOptions tunes one exec.
type ExecOptions struct {
	// Env is added to the sandbox's environment.
	Env map[string]string
	// Cwd is the working directory; "": the sandbox's.
	Cwd string
	// Stdin is the command's standard input (at most 16 MiB), then EOF.
	Stdin []byte
	// Timeout kills the command and its process group; 0: 10 minutes.
	// Whole milliseconds, at most 24 hours.
	Timeout time.Duration
}

// ExecResult is how an exec ended.
type ExecResult struct {
	// ExitCode is the command's status; 128+N when killed by signal N.
	ExitCode int
	// Stdout and Stderr are its output (Exec only; ExecStream writes them
	// out instead), each at most 16 MiB.
	Stdout, Stderr []byte
	// TimedOut: killed at ExecOptions.Timeout.
	TimedOut bool
	// Truncated: output beyond 16 MiB per stream was dropped.
	Truncated bool
	// Reason is what the worker knows beyond the code ("" if nothing).
	Reason string
}

// Exec runs argv in the sandbox and returns its output and exit. It is not
// retried once sent (the command may have run): a failure to reach the head
// or the worker is an errs.Unavailable error, which the caller may retry
// if the command is safe to run twice. Errors: errs.InvalidArgument,
// errs.NotFound, errs.FailedPrecondition (not READY yet, or ended: the
// message says how and why), errs.Unavailable, ctx's error.
func (s *Sandbox) Exec(ctx context.Context, argv []string, o ExecOptions) (*ExecResult, error) {
	var out, errb bytes.Buffer
	res, err := s.ExecStream(ctx, argv, o, &out, &errb)
	if res != nil {
		res.Stdout, res.Stderr = out.Bytes(), errb.Bytes()
	}
	return res, err
}

// ExecStream is Exec writing the command's output to stdout and stderr
// (nil: dropped) as it comes; the result's Stdout and Stderr stay nil. An
// error writing to stdout or stderr cancels the exec and is returned.
func (s *Sandbox) ExecStream(ctx context.Context, argv []string, o ExecOptions, stdout, stderr io.Writer) (*ExecResult, error) {
	req := &wire.SandboxExecRequest{SandboxId: s.id, Argv: argv, Env: o.Env, Cwd: o.Cwd, Stdin: o.Stdin,
		TimeoutMillis: o.Timeout.Milliseconds(), MinIndex: s.index()}
	if err := spec.CheckSandboxExec(req); err != nil {
		return nil, err
	}
	addr, cc, err := s.c.pick()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := wire.NewSandboxServiceClient(cc).Exec(ctx, req)
	if err != nil {
		return nil, s.execErr(ctx, addr, err)
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil, errs.New(errs.Unavailable, "exec in sandbox %s: the stream ended without an exit (head %s); the command may or may not have run", s.id, addr)
		}
		if err != nil {
			return nil, s.execErr(ctx, addr, err)
		}
		if b := m.GetStdout(); len(b) > 0 {
			if _, err := stdout.Write(b); err != nil {
				return nil, fmt.Errorf("exec in sandbox %s: writing its stdout: %w", s.id, err)
			}
		}
		if b := m.GetStderr(); len(b) > 0 {
			if _, err := stderr.Write(b); err != nil {
				return nil, fmt.Errorf("exec in sandbox %s: writing its stderr: %w", s.id, err)
			}
		}
		if x := m.GetExit(); x != nil {
			return &ExecResult{ExitCode: int(x.GetExitCode()), TimedOut: x.GetTimedOut(), Truncated: x.GetTruncated(), Reason: x.GetReason()}, nil
		}
	}
}

// execErr classifies an exec's (or a file call's) failure; a head that
// did not answer is left for the next call, which goes to another.
func (s *Sandbox) execErr(ctx context.Context, addr string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("sandbox %s: %w", s.id, ctx.Err())
	}
	err = errs.FromStatus(err)
	var e *errs.Error
	if !errors.As(err, &e) {
		return errs.New(errs.Unavailable, "sandbox %s: head %s: %v; the call may or may not have run: retry it only if that is safe", s.id, addr, err)
	}
	if e.Class == errs.Unavailable || e.Class == errs.Unknown {
		s.c.rotate(addr)
	}
	return err
}

// WriteFile creates or replaces the file at absolute path in the sandbox
// with data (at most 64 MiB) and permission bits mode (0: 0644); missing
// parent directories are created. Not retried (see Exec). Errors as Exec.
func (s *Sandbox) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	if err := spec.CheckSandboxPath(s.id, path); err != nil {
		return err
	}
	addr, cc, err := s.c.pick()
	if err != nil {
		return err
	}
	_, err = wire.NewSandboxServiceClient(cc).WriteFile(ctx, &wire.SandboxWriteFileRequest{SandboxId: s.id, Path: path, Data: data,
		Mode: uint32(mode.Perm()), MinIndex: s.index()})
	if err != nil {
		return s.execErr(ctx, addr, err)
	}
	return nil
}

// ReadFile returns the regular file at absolute path in the sandbox (at
// most 64 MiB). Errors as Exec; errs.NotFound also for a missing file,
// errs.FailedPrecondition for a larger one or a directory.
func (s *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	if err := spec.CheckSandboxPath(s.id, path); err != nil {
		return nil, err
	}
	addr, cc, err := s.c.pick()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := wire.NewSandboxServiceClient(cc).ReadFile(ctx, &wire.SandboxReadFileRequest{SandboxId: s.id, Path: path, MinIndex: s.index()},
		grpc.MaxCallRecvMsgSize(4<<20))
	if err != nil {
		return nil, s.execErr(ctx, addr, err)
	}
	var data []byte
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return data, nil
		}
		if err != nil {
			return nil, s.execErr(ctx, addr, err)
		}
		if data == nil {
			data = make([]byte, 0, min(m.GetSize(), spec.SandboxMaxFile))
		}
		data = append(data, m.GetData()...)
	}
}
