package client

import (
	"context"

	"google.golang.org/grpc"

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
	var res *wire.PauseSandboxResponse
	err := s.c.callConn(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) (err error) {
		res, err = wire.NewSandboxServiceClient(cc).PauseSandbox(ctx, &wire.PauseSandboxRequest{Id: s.id, MinIndex: max(s.index(), s.c.sessionIndex())})
		return err
	})
	if err != nil {
		return err
	}
	s.c.observe(res.GetSandbox().GetIndex())
	s.set(res.GetSandbox())
	return nil
}

// Resume thaws a PAUSED sandbox: it is READY again, and its idle timeout
// counts afresh from now. Resuming a READY sandbox changes nothing (its
// worker is asked to unpause all the same, which completes a pause or
// resume cut short by a failure). Retried like Pause. Errors:
// errs.NotFound; errs.FailedPrecondition (not READY yet, or ended); ctx's
// error.
func (s *Sandbox) Resume(ctx context.Context) error {
	var res *wire.ResumeSandboxResponse
	err := s.c.callConn(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) (err error) {
		res, err = wire.NewSandboxServiceClient(cc).ResumeSandbox(ctx, &wire.ResumeSandboxRequest{Id: s.id, MinIndex: max(s.index(), s.c.sessionIndex())})
		return err
	})
	if err != nil {
		return err
	}
	s.c.observe(res.GetSandbox().GetIndex())
	s.set(res.GetSandbox())
	return nil
}
