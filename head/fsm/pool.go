package fsm

import (
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/wire"
)

// The pool op: pre-warm targets for the workers' warm containers.

// applyPoolWarm sets or removes a pre-warm target (state.Txn.SetPoolTarget).
func applyPoolWarm(txn *state.Txn, cmd *wire.PoolWarmCommand) (*PoolWarmResult, error) {
	removed, err := txn.SetPoolTarget(cmd.GetTarget(), cmd.GetUnixNanos())
	if err != nil {
		return nil, err
	}
	return &PoolWarmResult{Removed: removed}, nil
}
