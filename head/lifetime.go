package head

import (
	"context"
	"time"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// SetSandboxTimeout sets a live sandbox to end timeout_seconds from now
// (OpSandboxSetDeadline, rules 3): its graph's deadline_seconds becomes
// its age in whole seconds, rounded up, plus the timeout. The lifetime
// from creation stays within spec.SandboxMaxSeconds, the bound
// CreateSandbox applies. The leader's deadline loop ends it (EXPIRED,
// CANCELLED_DEADLINE) as for the lifetime it was created with. A
// follower forwards the call to the leader, whose clock decides "now".
func (s *sandboxService) SetSandboxTimeout(ctx context.Context, req *wire.SetSandboxTimeoutRequest) (*wire.SetSandboxTimeoutResponse, error) {
	if err := s.needSnapshotRules(); err != nil {
		return nil, errs.ToStatus(err)
	}
	if err := spec.CheckSandboxID("id", req.GetId()); err != nil {
		return nil, errs.ToStatus(err)
	}
	timeout := req.GetTimeoutSeconds()
	if timeout < 1 || timeout > spec.SandboxMaxSeconds {
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument, "sandbox %s: timeout_seconds %d is out of range: 1 to %d", req.GetId(), timeout, spec.SandboxMaxSeconds))
	}
	if !s.h.IsLeader() {
		return forwardSandbox(ctx, s.h.fwd, req, wire.SandboxServiceClient.SetSandboxTimeout)
	}
	if err := s.h.waitApplied(ctx, req.GetMinIndex(), 0); err != nil {
		return nil, errs.ToStatus(err)
	}
	sb, err := s.get(s.h.fsm.View(), req.GetId())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	if !spec.SandboxLive(sb.GetState()) {
		e := errs.New(errs.FailedPrecondition, "sandbox %s is %s (%s: %s): its lifetime can no longer change; create a new sandbox",
			req.GetId(), sandboxStateName(sb.GetState()), codeName(sb.GetReasonCode()), sb.GetReason())
		e.Reason = "SANDBOX_" + sandboxStateName(sb.GetState())
		return nil, errs.ToStatus(e)
	}
	now := s.h.clock.Now()
	age := (now.UnixNano() - sb.GetCreateUnixNanos() + int64(time.Second) - 1) / int64(time.Second)
	if age+timeout > spec.SandboxMaxSeconds {
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument,
			"sandbox %s: timeout_seconds %d would make its lifetime %d s; a sandbox lives at most %d s from its creation, and it is %d s old: give at most %d",
			req.GetId(), timeout, age+timeout, spec.SandboxMaxSeconds, age, max(spec.SandboxMaxSeconds-age, 0)))
	}
	_, index, err := s.h.apply(ctx, fsm.OpSandboxSetDeadline, &wire.SandboxSetDeadlineCommand{
		GraphId: req.GetId(), DeadlineSeconds: age + timeout, UnixNanos: now.UnixNano()})
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	if err := s.h.waitApplied(ctx, index, 0); err != nil {
		return nil, errs.ToStatus(err)
	}
	sb, err = s.get(s.h.fsm.View(), req.GetId())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &wire.SetSandboxTimeoutResponse{Sandbox: sb}, nil
}
