package head

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// PoolWarm commits a pre-warm target (OpPoolWarm): the workers matching its
// selector keep target.size warm containers of its image. A follower
// forwards the call to the leader. Errors: InvalidArgument naming the bad
// field (nothing is committed), NotLeader/Unavailable.
func (s *service) PoolWarm(ctx context.Context, req *wire.PoolWarmRequest) (*wire.PoolWarmResponse, error) {
	tg := req.GetTarget()
	if err := state.CheckPoolTarget(tg); err != nil {
		return nil, errs.ToStatus(err)
	}
	if err := checkPoolTask(tg); err != nil {
		return nil, errs.ToStatus(err)
	}
	if !s.h.IsLeader() {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.PoolWarm)
		return resp, errs.ToStatus(err)
	}
	c := proto.CloneOf(tg)
	c.ModifyIndex, c.UpdateUnixNanos = 0, 0       // the FSM stamps them
	c.AdmissionPolicy, c.AdmissionSource = nil, 0 // sent to workers, never stored
	_, index, err := s.h.apply(ctx, fsm.OpPoolWarm, &wire.PoolWarmCommand{Target: c, UnixNanos: s.h.clock.Now().UnixNano()})
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &wire.PoolWarmResponse{Index: index}, nil
}

// PoolList returns every pre-warm target, read as req.read asks.
func (s *service) PoolList(ctx context.Context, req *wire.PoolListRequest) (*wire.PoolListResponse, error) {
	view, _, err := s.h.read(ctx, req.GetRead())
	if err == errForward {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.PoolList)
		return resp, errs.ToStatus(err)
	}
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &wire.PoolListResponse{Targets: view.PoolTargets()}, nil
}

// poolTargetsMessage returns the pre-warm targets for worker id, each with
// its tenant's effective admission policy (from rules 5), as a head
// message when they differ from last (what the stream sent before; nil at
// first), else nil. The worker stream's goroutine calls it after each
// table change.
func poolTargetsMessage(view *state.View, id string, last *wire.PoolTargets) *wire.PoolTargets {
	w := view.Worker(id)
	if w == nil {
		return nil
	}
	cur := &wire.PoolTargets{Targets: view.PoolTargetsFor(w.Info.GetLabels())}
	if view.Rules() >= state.RulesAdmission {
		// The tenant's confinement, so that the warm containers have the
		// pool key of its tasks' (a user under the default for clusters
		// with ACLs, say).
		for i, t := range cur.Targets {
			c := proto.CloneOf(t)
			tenant := t.GetTenant()
			if tenant == "" {
				tenant = state.DefaultTenant
			}
			c.AdmissionPolicy, c.AdmissionSource = view.EffectiveAdmission(tenant)
			cur.Targets[i] = c
		}
	}
	if last != nil && proto.Equal(cur, last) {
		return nil
	}
	if last == nil && len(cur.Targets) == 0 {
		return nil // nothing to say yet
	}
	return cur
}

// checkPoolTask checks a pre-warm target as the task its warm containers
// stand in for: its tenant, image and resources as a submitted task's
// (spec.Validate; the request bounds, spec's wire bounds, cap its
// resources at a worker's largest), so that a target no task could use (a
// tenant "../x") is refused here with the field named, not retried for
// ever by the workers. It is the head's check of the
// request only: the FSM applies state.CheckPoolTarget, whose rules a
// stricter check there would change for logs already written.
func checkPoolTask(tg *wire.PoolTarget) error {
	task := &wire.TaskSpec{Name: "warm", Image: tg.GetImage(), Command: []string{"true"},
		Resources: &wire.Resources{CpuMillis: tg.GetCpuMillis(), MemoryBytes: tg.GetMemoryBytes()}}
	if err := spec.Validate(&wire.GraphSpec{Id: "pool", Tenant: tg.GetTenant(), Tasks: []*wire.TaskSpec{task}}, spec.DefaultLimits()); err != nil {
		return errs.New(errs.InvalidArgument, "pool warm %s: the target is not one a task could use: %v", tg.GetImage(), err)
	}
	return nil
}
