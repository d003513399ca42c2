package client

import (
	"context"

	"github.com/megaflow/megaflow/internal/wire"
)

// Quota limits what one tenant (or, with an empty tenant, the whole
// cluster) may run at once: tasks, CPU millicores, memory bytes, GPUs. Zero
// limits are no limit.
type Quota = wire.Quota

// Quotas is every quota and the cluster limit, each with its current usage.
type Quotas = wire.GetQuotasResponse

// SetQuota sets tenant q.Tenant's quota in the replicated table; a quota
// with every limit zero removes it. The leader's scheduler and plan
// verifier enforce it from the next round: tasks over quota stay QUEUED
// with the reason ("tenant team-a is at its quota of 3 running tasks").
// It returns the Raft index of the change. Errors: errs.InvalidArgument
// (no tenant, invalid tenant name, negative limit).
func (c *Client) SetQuota(ctx context.Context, q *Quota) (uint64, error) {
	return c.setQuota(ctx, &wire.SetQuotaRequest{Quota: q})
}

// SetClusterLimit sets the cluster-wide limit (q.Tenant must be empty): at
// most q.MaxRunning tasks ASSIGNED or RUNNING at once across all tenants,
// and at most q's CPU, memory and GPUs in all. Zero limits remove it.
func (c *Client) SetClusterLimit(ctx context.Context, q *Quota) (uint64, error) {
	return c.setQuota(ctx, &wire.SetQuotaRequest{Quota: q, Cluster: true})
}

func (c *Client) setQuota(ctx context.Context, req *wire.SetQuotaRequest) (uint64, error) {
	var res *wire.SetQuotaResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.SetQuota(ctx, req)
		return err
	})
	if err != nil {
		return 0, err
	}
	c.observe(res.Index)
	return res.Index, nil
}

// GetQuotas returns every tenant quota and the cluster limit with what each
// tenant (and the cluster) runs now, plus the usage of tenants without a
// quota.
func (c *Client) GetQuotas(ctx context.Context, ro ReadOptions) (*Quotas, error) {
	var res *wire.GetQuotasResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.GetQuotas(ctx, &wire.GetQuotasRequest{Read: c.readOptions(ro)})
		return err
	})
	if err != nil {
		return nil, err
	}
	c.observe(res.Meta.GetIndex())
	return res, nil
}

// Limits are the limits in force as one head sees them: its per-tenant API
// rate limit and the cluster-wide settings of the table.
type Limits = wire.GetLimitsResponse

// GetLimits returns the limits of the head that answers (rate limits are
// per head) with the table's cluster limit and maximum queue wait.
func (c *Client) GetLimits(ctx context.Context, ro ReadOptions) (*Limits, error) {
	var res *wire.GetLimitsResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.GetLimits(ctx, &wire.GetLimitsRequest{Read: c.readOptions(ro)})
		return err
	})
	if err != nil {
		return nil, err
	}
	c.observe(res.Meta.GetIndex())
	return res, nil
}

// SyncSession raises the client's session index to the leader's applied
// index: every later read through this client, on any head, then sees
// every write acknowledged before the call, by any client (a CLI run
// reading what an earlier run wrote, through a follower that is behind).
// Reads already wait for the client's own writes; this extends that to
// writes made elsewhere. It costs one linearizable read through the
// leader (GetLimits with RequireLeader). Errors: as GetLimits (the leader
// unreachable: errs.Unavailable after the client's retries).
func (c *Client) SyncSession(ctx context.Context) error {
	_, err := c.GetLimits(ctx, ReadOptions{RequireLeader: true})
	return err
}
