package head

import (
	"context"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// Sandbox pause and resume (docs/sandboxes.md, "Pause and resume"). The
// mark is replicated state (state.Attempt.Paused, OpSandboxPause, rules
// 4), so that every head shows a paused sandbox PAUSED and refuses its
// execs and file calls (target), after a leader change too. The leader
// runs both calls (a follower forwards them), in the order that never
// leaves a running container marked paused:
//
//   - pause: the worker pauses the container (docker pause) and marks the
//     box paused (its own calls refused, its idle timer stopped); then
//     the leader commits the mark;
//   - resume: the leader commits the mark's removal; then the worker
//     unpauses the container and unmarks the box (its idle timer counts
//     afresh).
//
// In between (and when the second step fails) the table says READY while
// the container is paused: the worker refuses the calls that reach it
// with the same SANDBOX_PAUSED error, and a pause or resume called again
// completes it (both are idempotent, and both ask the worker whatever the
// table says).

// ReasonSandboxPaused: the sandbox is PAUSED (FailedPrecondition): resume
// it first.
const ReasonSandboxPaused = spec.ReasonSandboxPaused

// pausedErr is target's error for a PAUSED sandbox.
func pausedErr(id string) error { return spec.SandboxPausedError(id) }

// needPauseRules refuses pause and resume until the cluster applies rules
// 4: Unavailable, so that clients retry (as the snapshot calls before
// rules 3).
func (s *sandboxService) needPauseRules() error {
	if r := s.h.fsm.View().Rules(); r < state.RulesSandboxPause {
		return errs.New(errs.Unavailable,
			"head %s applies rules %d and sandbox pause needs rules %d: every head must run a build that has them (megaflow cluster shows each head's RULES), and the leader then moves the cluster; retry",
			s.h.cfg.NodeID, r, state.RulesSandboxPause)
	}
	return nil
}

// PauseSandbox pauses a READY sandbox (setPaused). A follower forwards
// it to the leader.
func (s *sandboxService) PauseSandbox(ctx context.Context, req *wire.PauseSandboxRequest) (*wire.PauseSandboxResponse, error) {
	if err := s.pauseCheck(req.GetId()); err != nil {
		return nil, errs.ToStatus(err)
	}
	if !s.h.IsLeader() {
		return forwardSandbox(ctx, s.h.fwd, req, wire.SandboxServiceClient.PauseSandbox)
	}
	sb, err := s.setPaused(ctx, req.GetId(), req.GetMinIndex(), true)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &wire.PauseSandboxResponse{Sandbox: sb}, nil
}

// ResumeSandbox resumes a PAUSED sandbox (setPaused). A follower forwards
// it to the leader.
func (s *sandboxService) ResumeSandbox(ctx context.Context, req *wire.ResumeSandboxRequest) (*wire.ResumeSandboxResponse, error) {
	if err := s.pauseCheck(req.GetId()); err != nil {
		return nil, errs.ToStatus(err)
	}
	if !s.h.IsLeader() {
		return forwardSandbox(ctx, s.h.fwd, req, wire.SandboxServiceClient.ResumeSandbox)
	}
	sb, err := s.setPaused(ctx, req.GetId(), req.GetMinIndex(), false)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &wire.ResumeSandboxResponse{Sandbox: sb}, nil
}

// pauseCheck is what every head checks of a pause or resume before
// forwarding it: the rules version and the id.
func (s *sandboxService) pauseCheck(id string) error {
	if err := s.needPauseRules(); err != nil {
		return err
	}
	return spec.CheckSandboxID("id", id)
}

// setPaused pauses (paused true) or resumes sandbox id on the leader, once
// it applied minIndex, and returns the sandbox as of the end. A READY or
// PAUSED sandbox's worker is asked whatever the table says (so that a call
// repeated after a failure completes what the first began); the table is
// written only when its mark changes. Each call is charged to the
// sandbox's tenant. Errors: NotFound; FailedPrecondition (not READY yet,
// ended, calls in flight at a pause: SANDBOX_BUSY); Unavailable (the
// worker or Raft did not answer); ResourceExhausted (rate limit).
func (s *sandboxService) setPaused(ctx context.Context, id string, minIndex uint64, paused bool) (*wire.Sandbox, error) {
	if err := s.h.waitApplied(ctx, minIndex, 0); err != nil {
		return nil, err
	}
	verb := "resumed"
	if paused {
		verb = "paused"
	}
	view := s.h.fsm.View()
	sb, err := s.get(view, id)
	if err != nil {
		return nil, err
	}
	switch sb.State {
	case wire.SandboxState_SANDBOX_STATE_READY, wire.SandboxState_SANDBOX_STATE_PAUSED:
	case wire.SandboxState_SANDBOX_STATE_PENDING, wire.SandboxState_SANDBOX_STATE_STARTING:
		e := errs.New(errs.FailedPrecondition, "sandbox %s is %s, not ready yet: only a READY or PAUSED sandbox can be %s; wait until GetSandbox says READY",
			id, sandboxStateName(sb.State), verb)
		e.Reason = ReasonSandboxNotReady
		return nil, e
	default:
		e := errs.New(errs.FailedPrecondition, "sandbox %s is %s (%s: %s); its container is gone, so it cannot be %s: create a new sandbox",
			id, sandboxStateName(sb.State), codeName(sb.ReasonCode), sb.Reason, verb)
		e.Reason = "SANDBOX_" + sandboxStateName(sb.State)
		return nil, e
	}
	if err := s.h.charge(sb.GetTenant(), "each sandbox pause and resume counts"); err != nil {
		return nil, err
	}
	cli, n, worker, err := s.workerOf(view, id)
	if err != nil {
		return nil, err
	}
	marked := sb.State == wire.SandboxState_SANDBOX_STATE_PAUSED
	cmd := &wire.SandboxPauseCommand{GraphId: id, Attempt: n, Paused: paused, UnixNanos: s.h.clock.Now().UnixNano()}
	var index uint64
	if paused {
		// The container first: the table never marks a running one.
		if _, err := cli.SetPaused(ctx, &wire.SandboxSetPausedRequest{SandboxId: id, Attempt: n, Paused: true}); err != nil {
			return nil, relayErr(id, worker, err)
		}
		if !marked {
			if _, index, err = s.h.apply(ctx, fsm.OpSandboxPause, cmd); err != nil {
				// The container stays paused, its worker refusing its
				// calls (SANDBOX_PAUSED), until a pause (which the client
				// retries after a leader change) or a resume completes.
				return nil, err
			}
		}
	} else {
		// The table first: it never marks a container once it runs.
		if marked {
			if _, index, err = s.h.apply(ctx, fsm.OpSandboxPause, cmd); err != nil {
				return nil, err
			}
		}
		if _, err := cli.SetPaused(ctx, &wire.SandboxSetPausedRequest{SandboxId: id, Attempt: n, Paused: false}); err != nil {
			if marked {
				s.h.logger.Warn("a sandbox is recorded READY, and its worker did not unpause its container; its worker refuses its calls until a resume succeeds",
					"sandbox", id, "worker", worker, "err", err)
			}
			return nil, relayErr(id, worker, err)
		}
	}
	if err := s.h.waitApplied(ctx, index, 0); err != nil {
		return nil, err
	}
	return s.get(s.h.fsm.View(), id)
}
