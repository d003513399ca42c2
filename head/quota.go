package head

import (
	"context"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// SetQuota sets a tenant's quota, or the cluster limit, through the log
// (OpSetQuota). Followers forward it to the leader.
func (s *service) SetQuota(ctx context.Context, req *wire.SetQuotaRequest) (*wire.SetQuotaResponse, error) {
	q := req.GetQuota()
	if q == nil {
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument, "SetQuota: quota is missing"))
	}
	switch {
	case req.GetCluster() && q.GetTenant() != "":
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument,
			"SetQuota: cluster is set and the quota names tenant %q; set either the cluster limit or a tenant's quota", q.GetTenant()))
	case !req.GetCluster() && q.GetTenant() == "":
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument,
			"SetQuota: the quota names no tenant; name one, or set the request's cluster field for the cluster-wide limit (megaflow quota set --cluster)"))
	}
	if q.GetTenant() != "" {
		if err := checkTenantName("SetQuota", q.GetTenant()); err != nil {
			return nil, errs.ToStatus(err)
		}
	}
	if _, err := state.QuotaFromWire(q); err != nil {
		return nil, errs.ToStatus(err)
	}
	if !s.h.IsLeader() {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.SetQuota)
		return resp, errs.ToStatus(err)
	}
	cmd := &wire.SetQuotaCommand{Quota: &wire.Quota{Tenant: q.GetTenant(), MaxRunning: q.GetMaxRunning(),
		CpuMillis: q.GetCpuMillis(), MemoryBytes: q.GetMemoryBytes(), Gpus: q.GetGpus()}, UnixNanos: s.h.clock.Now().UnixNano()}
	_, index, err := s.h.apply(ctx, fsm.OpSetQuota, cmd)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &wire.SetQuotaResponse{Index: index}, nil
}

// GetQuotas returns the quotas, the cluster limit and the usage of every
// tenant running tasks, from this head's table.
func (s *service) GetQuotas(ctx context.Context, req *wire.GetQuotasRequest) (*wire.GetQuotasResponse, error) {
	view, meta, err := s.h.read(ctx, req.GetRead())
	if err == errForward {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.GetQuotas)
		return resp, errs.ToStatus(err)
	}
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return quotasResponse(view, meta), nil
}

func quotasResponse(view *state.View, meta *wire.ReadMeta) *wire.GetQuotasResponse {
	tenants, cluster := view.Quotas()
	usage, total := view.Usage()
	wireUsage := func(q *wire.Quota, u state.Usage) *wire.QuotaUsage {
		return &wire.QuotaUsage{Quota: q, Running: int32(u.Running),
			Used: &wire.Resources{CpuMillis: u.Used.CPUMillis, MemoryBytes: u.Used.MemoryBytes, Gpus: int32(u.Used.GPUs)}}
	}
	out := &wire.GetQuotasResponse{Meta: meta}
	limited := map[string]bool{}
	for _, q := range tenants {
		limited[q.Tenant] = true
		out.Quotas = append(out.Quotas, wireUsage(q.ToWire(), usage[q.Tenant]))
	}
	cq := &wire.Quota{}
	if cluster != nil {
		cq = cluster.ToWire()
	}
	out.Cluster = wireUsage(cq, total)
	for _, t := range state.SortedTenants(usage) {
		if !limited[t] {
			out.Unlimited = append(out.Unlimited, wireUsage(&wire.Quota{Tenant: t}, usage[t]))
		}
	}
	return out
}

// GetLimits returns this head's API rate limit and the table's cluster-wide
// settings.
func (s *service) GetLimits(ctx context.Context, req *wire.GetLimitsRequest) (*wire.GetLimitsResponse, error) {
	// The rate limit is per head: the answer names the head. With
	// require_leader a follower forwards, so the cluster settings are
	// current (and the rate limit shown is the leader's).
	view, meta, err := s.h.read(ctx, req.GetRead())
	if err == errForward {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.GetLimits)
		return resp, errs.ToStatus(err)
	}
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	out := &wire.GetLimitsResponse{HeadId: s.h.cfg.NodeID, Meta: meta, Cluster: &wire.Quota{},
		MaxQueueWaitMillis: s.h.cfg.MaxQueueWait.Milliseconds()}
	if s.h.limiter != nil {
		out.RateLimit, out.RateBurst = s.h.cfg.RateLimit, int32(s.h.cfg.rateBurst())
	}
	if _, c := view.Quotas(); c != nil {
		out.Cluster = c.ToWire()
	}
	return out, nil
}
