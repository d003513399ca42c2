package fsm

import (
	"strings"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// defaultCancelReason is the reason of a cancel that gave none.
const defaultCancelReason = "cancelled"

// applyCancel cancels a graph (task_id empty) or one task and the pending
// dependents that can no longer run. Cancelling what is already finished
// changes nothing and returns 0.
func applyCancel(txn *state.Txn, cmd *wire.CancelCommand) (*CancelResult, error) {
	reason := cmd.GetReason()
	if reason == "" {
		reason = defaultCancelReason
	}
	graphID, taskID := cmd.GetGraphId(), cmd.GetTaskId()
	var (
		n   uint32
		err error
	)
	if taskID == "" {
		if graphID == "" {
			return nil, errs.New(errs.InvalidArgument, "cancel: neither graph id nor task id given")
		}
		n, err = txn.CancelGraph(graphID, cmd.GetReasonCode(), reason, cmd.GetUnixNanos())
	} else {
		g, _, ok := strings.Cut(taskID, "/")
		if !ok || (graphID != "" && g != graphID) {
			return nil, errs.New(errs.InvalidArgument, "cancel: task id %q is not \"%s/<task name>\"", taskID, graphID)
		}
		n, err = txn.CancelTask(taskID, cmd.GetReasonCode(), reason, cmd.GetUnixNanos())
	}
	if err != nil {
		return nil, err
	}
	return &CancelResult{Cancelled: n}, nil
}

// applyDropStaged drops the staged chunks of graphs whose submission never
// finished. Committed graphs and unknown ids are left alone.
func applyDropStaged(txn *state.Txn, cmd *wire.DropStagedCommand) (*DropStagedResult, error) {
	var n uint32
	for _, id := range cmd.GetGraphIds() {
		n += txn.DropStaged(id)
	}
	return &DropStagedResult{Dropped: n}, nil
}
