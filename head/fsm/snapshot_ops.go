package fsm

import (
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// The sandbox ops of rules 3: snapshots recorded and removed, and a live
// sandbox's lifetime set (state/snapshot.go). applySubmit checks the
// snapshot forks of a graph (state.Txn.CheckForks) under the same rules.

// SnapshotAddResult is the result of OpSnapshotAdd: the row recorded.
type SnapshotAddResult struct {
	Snapshot *wire.Snapshot
}

// SnapshotDeleteResult is the result of OpSnapshotDelete.
type SnapshotDeleteResult struct {
	// Removed is the row removed; nil when there was none.
	Removed *wire.Snapshot
}

// needSnapshotRules refuses a snapshot op under rules below
// state.RulesSnapshots (heads propose none before; a leader that did
// would change nothing).
func needSnapshotRules(txn *state.Txn, op Op) error {
	if r := txn.Rules(); r < state.RulesSnapshots {
		return errs.New(errs.FailedPrecondition, "%s needs rules %d, the table is at rules %d: wait until every head runs a build with them", op, state.RulesSnapshots, r)
	}
	return nil
}

// applySnapshotAdd records a snapshot (state.Txn.AddSnapshot).
func applySnapshotAdd(txn *state.Txn, cmd *wire.SnapshotAddCommand) (*SnapshotAddResult, error) {
	if err := needSnapshotRules(txn, OpSnapshotAdd); err != nil {
		return nil, err
	}
	s, err := txn.AddSnapshot(cmd.GetSnapshot(), int(cmd.GetMaxPerTenant()))
	if err != nil {
		return nil, err
	}
	return &SnapshotAddResult{Snapshot: s}, nil
}

// applySnapshotDelete removes a snapshot's row unless sandboxes created
// from it may still run it (state.Txn.DeleteSnapshot).
func applySnapshotDelete(txn *state.Txn, cmd *wire.SnapshotDeleteCommand) (*SnapshotDeleteResult, error) {
	if err := needSnapshotRules(txn, OpSnapshotDelete); err != nil {
		return nil, err
	}
	removed, err := txn.DeleteSnapshot(cmd.GetId())
	if err != nil {
		return nil, err
	}
	return &SnapshotDeleteResult{Removed: removed}, nil
}

// applySandboxSetDeadline sets a live sandbox's lifetime
// (state.Txn.SetSandboxDeadline) and returns true.
func applySandboxSetDeadline(txn *state.Txn, cmd *wire.SandboxSetDeadlineCommand) (bool, error) {
	if err := needSnapshotRules(txn, OpSandboxSetDeadline); err != nil {
		return false, err
	}
	if err := txn.SetSandboxDeadline(cmd.GetGraphId(), cmd.GetDeadlineSeconds()); err != nil {
		return false, err
	}
	return true, nil
}
