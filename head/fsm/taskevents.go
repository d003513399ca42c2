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
	if p := cmd.GetPlan(); p != nil && rules >= RulesEventPlan {
		// The leader's placements on the table as the events leave it
		// (rules 9).
		var err error
		if res.Plan, err = applyPlan(txn, p); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// SpeculateEvents returns the table of view as it would be after the
// event batch cmd (with its plan, if it carries one) applied at the next
// index, leaving view and the FSM's table as they are: the leader plans
// what the events' ends free and make ready on it before proposing them
// (TaskEventsCommand.plan). The error is the one the apply would give; cmd
// must not change while the returned view is in use.
func SpeculateEvents(view *state.View, cmd *wire.TaskEventsCommand) (*state.View, error) {
	store := view.Fork()
	txn := store.WriteTxn(view.Index() + 1)
	if _, err := applyTaskEvents(txn, cmd); err != nil {
		txn.Abort()
		return nil, err
	}
	txn.Commit()
	return store.Snapshot(), nil
}
