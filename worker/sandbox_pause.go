package worker

import (
	"context"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
)

// SetPaused pauses (docker pause) or unpauses the sandbox's container for
// the leader's PauseSandbox and ResumeSandbox (docs/sandboxes.md, "Pause
// and resume"), and marks the sandbox's box so: while it is marked, the
// box's calls are refused (SANDBOX_PAUSED) and its idle timer does not
// count; the unpause restarts the timer. The box is marked before the
// container is paused and unmarked only once it runs again, so no call
// reaches a paused container, and a pause or unpause that failed leaves
// it marked (the container may be paused): a pause or resume called again
// settles it, both being idempotent here.
//
// Errors: as Exec; FailedPrecondition (SANDBOX_BUSY) for a pause while
// calls are in flight; FailedPrecondition when the runtime cannot pause.
func (s *sandboxServer) SetPaused(ctx context.Context, req *wire.SandboxSetPausedRequest) (*wire.SandboxSetPausedResponse, error) {
	id := req.GetSandboxId()
	p, ok := s.w.rt.(contract.Pauser)
	if !ok {
		return nil, errs.ToStatus(errs.New(errs.FailedPrecondition, "worker %s's %s runtime cannot pause sandboxes", s.w.cfg.NodeID, s.w.rt.Name()))
	}
	cid, box, err := s.w.sandboxTarget(id, req.GetAttempt())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	if req.GetPaused() {
		if err := box.markPaused(id); err != nil {
			return nil, errs.ToStatus(err)
		}
		if err := p.Pause(ctx, cid); err != nil {
			s.w.log.Warn("pausing a sandbox's container failed; its calls are refused until a pause or resume succeeds", "sandbox", id, "err", err)
			return nil, errs.ToStatus(runtimeErr(id, err))
		}
		s.w.log.Info("sandbox paused", "sandbox", id, "attempt", req.GetAttempt(), "container", cid)
		return &wire.SandboxSetPausedResponse{}, nil
	}
	if err := p.Unpause(ctx, cid); err != nil {
		if box.isPaused() {
			s.w.log.Warn("unpausing a sandbox's container failed; its calls are refused until a resume succeeds", "sandbox", id, "err", err)
		}
		return nil, errs.ToStatus(runtimeErr(id, err))
	}
	if box.isPaused() {
		s.w.log.Info("sandbox resumed", "sandbox", id, "attempt", req.GetAttempt(), "container", cid)
	}
	box.unmarkPaused(s.w.clock.Now())
	return &wire.SandboxSetPausedResponse{}, nil
}
