package fsm

import (
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// The admission op of rules 5: a tenant's container admission policy, or
// the cluster row (state/admission.go). Submissions are checked against
// the policies in applySubmit.

// SetAdmissionPolicyResult is the result of OpSetAdmissionPolicy.
type SetAdmissionPolicyResult struct {
	// Removed is true when the policy allowed nothing beyond the built-in
	// default: its row was deleted (or none was left).
	Removed bool
}

// applySetAdmissionPolicy sets or removes an admission policy row
// (state.Txn.SetAdmissionPolicy). Below rules 5 it is refused, changing
// nothing (heads propose none before).
func applySetAdmissionPolicy(txn *state.Txn, cmd *wire.SetAdmissionPolicyCommand) (*SetAdmissionPolicyResult, error) {
	if r := txn.Rules(); r < state.RulesAdmission {
		return nil, errs.New(errs.FailedPrecondition, "%s needs rules %d, the table is at rules %d: wait until every head runs a build with them",
			OpSetAdmissionPolicy, state.RulesAdmission, r)
	}
	if cmd.GetPolicy() == nil {
		return nil, errs.New(errs.InvalidArgument, "set admission policy: no policy")
	}
	removed, err := txn.SetAdmissionPolicy(cmd.GetPolicy(), cmd.GetUnixNanos())
	if err != nil {
		return nil, err
	}
	return &SetAdmissionPolicyResult{Removed: removed}, nil
}
