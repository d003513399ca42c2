package fsm

import (
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// The quota op: a tenant's or the cluster's limits.

// applySetQuota sets or removes a quota (the cluster limit for an empty
// tenant).
func applySetQuota(txn *state.Txn, cmd *wire.SetQuotaCommand) (*SetQuotaResult, error) {
	if cmd.GetQuota() == nil {
		return nil, errs.New(errs.InvalidArgument, "set quota: no quota")
	}
	if err := txn.SetQuota(cmd.GetQuota(), cmd.GetUnixNanos()); err != nil {
		return nil, err
	}
	q, _ := state.QuotaFromWire(cmd.GetQuota())
	return &SetQuotaResult{Removed: q.Unlimited()}, nil
}
