package client

import (
	"context"

	"github.com/megaflow/megaflow/internal/wire"
)

// PoolTarget asks the workers matching WorkerSelector to keep Size warm
// containers of Image (persistent mode) for Tenant's tasks with CpuMillis
// and MemoryBytes, ahead of a burst. Size 0 removes the target.
type PoolTarget = wire.PoolTarget

// PoolWarm commits a pre-warm target in the replicated table (it survives
// leader changes); the leader sends it to the matching workers, whose pools
// then keep that many containers warm. A target replaces an earlier one of
// the same image and tenant. It returns the Raft index of the change.
// Errors: errs.InvalidArgument (no image, size outside 0 to 64, negative
// resources), errs.Unavailable.
func (c *Client) PoolWarm(ctx context.Context, t *PoolTarget) (uint64, error) {
	var res *wire.PoolWarmResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.PoolWarm(ctx, &wire.PoolWarmRequest{Target: t})
		return err
	})
	if err != nil {
		return 0, err
	}
	c.observe(res.Index)
	return res.Index, nil
}

// PoolList returns every pre-warm target, by image then tenant.
func (c *Client) PoolList(ctx context.Context, ro ReadOptions) ([]*PoolTarget, error) {
	var res *wire.PoolListResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.PoolList(ctx, &wire.PoolListRequest{Read: c.readOptions(ro)})
		return err
	})
	if err != nil {
		return nil, err
	}
	return res.GetTargets(), nil
}
