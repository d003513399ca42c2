package client

import (
	"context"

	"github.com/megaflow/megaflow/internal/wire"
)

// Pause freezes the sandbox's processes (docker pause: its CPU is
// released, its memory and processes kept) and leaves it PAUSED on every
// head (docs/sandboxes.md, "Pause and resume"): until Resume its execs,
// file calls and snapshots are refused (errs.FailedPrecondition, reason
// ReasonSandboxPaused) and its idle timeout does not count; its lifetime
// does. Pausing a PAUSED sandbox changes nothing. It is retried through
// leader changes and Unavailable errors like Close (both are idempotent),
// so ctx bounds it. The handle's Info is the sandbox afterwards. Errors:
// errs.NotFound; errs.FailedPrecondition (not READY yet, ended, or execs
// or file calls in flight: ReasonSandboxBusy); ctx's error.
func (s *Sandbox) Pause(ctx context.Context) error {
	return updateSandbox(ctx, s, func(ctx context.Context, sc wire.SandboxServiceClient) (*wire.PauseSandboxResponse, error) {
		return sc.PauseSandbox(ctx, &wire.PauseSandboxRequest{Id: s.id, MinIndex: max(s.index(), s.c.sessionIndex())})
	})
}

// Resume thaws a PAUSED sandbox: it is READY again, and its idle timeout
// counts afresh from now. Resuming a READY sandbox changes nothing (its
// worker is asked to unpause all the same, which completes a pause or
// resume cut short by a failure). Retried like Pause. Errors:
// errs.NotFound; errs.FailedPrecondition (not READY yet, or ended); ctx's
// error.
func (s *Sandbox) Resume(ctx context.Context) error {
	return updateSandbox(ctx, s, func(ctx context.Context, sc wire.SandboxServiceClient) (*wire.ResumeSandboxResponse, error) {
		return sc.ResumeSandbox(ctx, &wire.ResumeSandboxRequest{Id: s.id, MinIndex: max(s.index(), s.c.sessionIndex())})
	})
}
