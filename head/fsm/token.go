package fsm

import (
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// The token ops of rules 6 (state/token.go, docs/security.md).

// applyTokenCreate adds a token row (state.Txn.CreateToken; a bootstrap
// also keeps the command's relay key on the marker) and returns it as
// stored. Below rules 6 it is refused, changing nothing.
func applyTokenCreate(txn *state.Txn, cmd *wire.TokenCreateCommand) (*wire.Token, error) {
	if err := needTokenRules(txn, OpTokenCreate); err != nil {
		return nil, err
	}
	if err := txn.CreateToken(cmd.GetToken(), cmd.GetBootstrap(), cmd.GetRelayKey()); err != nil {
		return nil, err
	}
	return txn.Token(cmd.GetToken().GetAccessor()), nil
}

// applyTokenRevoke removes a token row (state.Txn.RevokeToken) and returns
// true. Below rules 6 it is refused, changing nothing.
func applyTokenRevoke(txn *state.Txn, cmd *wire.TokenRevokeCommand) (bool, error) {
	if err := needTokenRules(txn, OpTokenRevoke); err != nil {
		return false, err
	}
	if err := txn.RevokeToken(cmd.GetAccessor()); err != nil {
		return false, err
	}
	return true, nil
}

func needTokenRules(txn *state.Txn, op Op) error {
	if r := txn.Rules(); r < state.RulesTokens {
		return errs.New(errs.FailedPrecondition, "%s needs rules %d, the table is at rules %d: wait until every head runs a build with them",
			op, state.RulesTokens, r)
	}
	return nil
}
