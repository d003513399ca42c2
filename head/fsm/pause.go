package fsm

import (
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// The sandbox op of rules 4: a READY sandbox's running attempt marked
// paused, or unmarked (state/pause.go).

// applySandboxPause marks or unmarks a sandbox's running attempt paused
// (state.Txn.SetSandboxPaused) and returns whether that changed the row.
// Below rules 4 it is refused, changing nothing (heads propose none
// before).
func applySandboxPause(txn *state.Txn, cmd *wire.SandboxPauseCommand) (bool, error) {
	if r := txn.Rules(); r < state.RulesSandboxPause {
		return false, errs.New(errs.FailedPrecondition, "%s needs rules %d, the table is at rules %d: wait until every head runs a build with them",
			OpSandboxPause, state.RulesSandboxPause, r)
	}
	return txn.SetSandboxPaused(cmd.GetGraphId(), cmd.GetAttempt(), cmd.GetPaused(), cmd.GetUnixNanos())
}
