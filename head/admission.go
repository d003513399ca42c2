package head

import (
	"context"
	"strings"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/admission"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// Container admission policies (docs/security.md): the admin sets them
// through the log (OpSetAdmissionPolicy, rules 5); the leader checks a
// submitted graph against its tenant's effective policy before proposing
// it (a fast, clear error), the FSM checks it again at apply (the log's
// order decides a race with a policy change), and the leader attaches the
// effective policy to each assignment for the worker to enforce.

// needAdmissionRules refuses policy changes until the cluster applies
// rules 5.
func (h *Head) needAdmissionRules() error {
	if r := h.fsm.View().Rules(); r < state.RulesAdmission {
		return errs.New(errs.FailedPrecondition,
			"head %s: the cluster is at rules %d and admission policies need rules %d: upgrade every head to a build with them (megaflow-head --version prints a build's rules) and retry",
			h.cfg.NodeID, r, state.RulesAdmission)
	}
	return nil
}

// SetAdmissionPolicy sets a tenant's admission policy, or the cluster row,
// through the log. Followers forward it to the leader. The leader logs the
// change at info (tenant, old -> new).
func (s *service) SetAdmissionPolicy(ctx context.Context, req *wire.SetAdmissionPolicyRequest) (*wire.SetAdmissionPolicyResponse, error) {
	p := req.GetPolicy()
	if p == nil {
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument, "SetAdmissionPolicy: policy is missing"))
	}
	switch {
	case req.GetCluster() && p.GetTenant() != "":
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument,
			"SetAdmissionPolicy: cluster is set and the policy names tenant %q; set either the cluster row or a tenant's policy", p.GetTenant()))
	case !req.GetCluster() && p.GetTenant() == "":
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument,
			"SetAdmissionPolicy: the policy names no tenant; name one, or set the request's cluster field for the cluster-wide row (megaflow policy set --cluster)"))
	}
	if p.GetTenant() != "" {
		if err := checkTenantName("SetAdmissionPolicy", p.GetTenant()); err != nil {
			return nil, errs.ToStatus(err)
		}
	}
	norm, err := admission.Normalize(p)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	if !s.h.IsLeader() {
		// The leader checks the rules: a follower may not have applied
		// the entry that moved them yet (a new cluster's, for a while).
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.SetAdmissionPolicy)
		return resp, errs.ToStatus(err)
	}
	if err := s.h.needAdmissionRules(); err != nil {
		return nil, errs.ToStatus(err)
	}
	norm.ModifyIndex, norm.UpdateUnixNanos = 0, 0
	old, oldSrc := s.h.fsm.View().EffectiveAdmission(p.GetTenant())
	res, index, err := s.h.apply(ctx, fsm.OpSetAdmissionPolicy, &wire.SetAdmissionPolicyCommand{Policy: norm, UnixNanos: s.h.clock.Now().UnixNano()})
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	removed := res.(*fsm.SetAdmissionPolicyResult).Removed
	s.h.logger.Info("admission policy changed", "tenant", p.GetTenant(), "cluster_row", p.GetTenant() == "",
		"old", admission.SourceName(oldSrc, p.GetTenant())+":"+admission.Flags(old), "new", strings.TrimSpace(admission.Flags(norm)), "removed", removed, "index", index)
	return &wire.SetAdmissionPolicyResponse{Index: index, Removed: removed}, nil
}

// checkTenantName validates a tenant as a graph's would be.
func checkTenantName(call, tenant string) error {
	if err := spec.Validate(&wire.GraphSpec{Id: "policy", Tenant: tenant,
		Tasks: []*wire.TaskSpec{{Name: "t", Image: "i", Command: []string{"x"}}}}, spec.DefaultLimits()); err != nil {
		return errs.New(errs.InvalidArgument, "%s: tenant %q is not a valid tenant name: %v", call, tenant, err)
	}
	return nil
}

// GetAdmissionPolicy returns a tenant's effective policy and where it
// comes from, from this head's table.
func (s *service) GetAdmissionPolicy(ctx context.Context, req *wire.GetAdmissionPolicyRequest) (*wire.GetAdmissionPolicyResponse, error) {
	tenant := req.GetTenant()
	if tenant == "" {
		tenant = "default"
	}
	if err := checkTenantName("GetAdmissionPolicy", tenant); err != nil {
		return nil, errs.ToStatus(err)
	}
	view, meta, err := s.h.read(ctx, req.GetRead())
	if err == errForward {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.GetAdmissionPolicy)
		return resp, errs.ToStatus(err)
	}
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	p, src := view.EffectiveAdmission(tenant)
	return &wire.GetAdmissionPolicyResponse{Policy: p, Source: src, Meta: meta}, nil
}

// ListAdmissionPolicies returns every policy row from this head's table,
// the cluster row first.
func (s *service) ListAdmissionPolicies(ctx context.Context, req *wire.ListAdmissionPoliciesRequest) (*wire.ListAdmissionPoliciesResponse, error) {
	view, meta, err := s.h.read(ctx, req.GetRead())
	if err == errForward {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.ListAdmissionPolicies)
		return resp, errs.ToStatus(err)
	}
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &wire.ListAdmissionPoliciesResponse{Policies: view.AdmissionPolicies(), Meta: meta}, nil
}

// checkAdmission checks a normalized graph against its tenant's effective
// policy in view, on the leader before it proposes the graph; nothing
// below rules 5. A refusal is logged and counted (refused).
func (h *Head) checkAdmission(view *state.View, g *wire.GraphSpec) error {
	if view.Rules() < state.RulesAdmission {
		return nil
	}
	p, src := view.EffectiveAdmission(g.GetTenant())
	if err := admission.CheckGraph(g.GetId(), g.GetTenant(), g.GetTasks(), p, src); err != nil {
		h.refused(g.GetTenant(), err)
		return err
	}
	return nil
}

// refused logs and counts an admission refusal (err's reason names the
// field); any other error is ignored.
func (h *Head) refused(tenant string, err error) {
	field := admission.Field(errs.ReasonOf(err))
	if field == "" {
		return
	}
	h.metrics.admissionRefusals.WithLabelValues(field).Inc()
	h.logger.Info("admission refused", "tenant", tenant, "field", field, "err", err)
}
