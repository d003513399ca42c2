package fsm

import (
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// What workers report about the attempts they run. The rules live in
// head/state (Txn.ApplyAttemptEvent); this walks a batch in order.

// applyTaskEvents applies a worker's events in order, each with its retry
// backoff under the rules in force (retryBackoff).
func applyTaskEvents(txn *state.Txn, cmd *wire.TaskEventsCommand) (*TaskEventsResult, error) {
	if cmd.GetWorkerId() == "" {
		return nil, errs.New(errs.InvalidArgument, "task events: no worker id")
	}
	res := &TaskEventsResult{}
	rules := txn.Rules()
	for i, ev := range cmd.GetEvents() {
		if txn.ApplyAttemptEvent(cmd.GetWorkerId(), ev, cmd.GetUnixNanos(), retryBackoff(rules, cmd, i)) {
			res.Applied++
		} else {
			res.Ignored++
		}
	}
	return res, nil
}
