package fsm

import (
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// DeleteGraphResult is the result of an OpDeleteGraph.
type DeleteGraphResult struct {
	// Tasks counts the task rows removed.
	Tasks uint32
}

// applyDeleteGraph removes a finished graph and its tasks.
func applyDeleteGraph(txn *state.Txn, cmd *wire.DeleteGraphCommand) (*DeleteGraphResult, error) {
	if cmd.GetGraphId() == "" {
		return nil, errs.New(errs.InvalidArgument, "delete graph: no graph id")
	}
	n, err := txn.DeleteGraph(cmd.GetGraphId())
	if err != nil {
		return nil, err
	}
	return &DeleteGraphResult{Tasks: n}, nil
}
