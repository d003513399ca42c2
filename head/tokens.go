package head

import (
	"context"
	"crypto/rand"
	"time"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/acl"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// The token RPCs (docs/security.md). The leader draws each new token's
// accessor and secret from crypto/rand and proposes only the secret's
// SHA-256 (OpTokenCreate, rules 6): the secret is in the answer and
// nowhere else. Followers forward these calls, the caller's token with
// them.

// needTokens refuses token calls on a head without ACLs, and on the
// leader below rules 6 (a follower forwards: its table may lag).
func (h *Head) needTokens(call string) error {
	if !h.cfg.ACL {
		return errs.New(errs.FailedPrecondition,
			"%s: head %s runs without ACLs; start every head with --acl (or acl: true in its config file) first (docs/operations.md)", call, h.cfg.NodeID)
	}
	if r := h.fsm.View().Rules(); r < state.RulesTokens && h.IsLeader() {
		return errs.New(errs.FailedPrecondition,
			"%s: the cluster is at rules %d and tokens need rules %d: upgrade every head to a build with them (megaflow-head --version prints a build's rules) and retry",
			call, r, state.RulesTokens)
	}
	return nil
}

// BootstrapACL creates the cluster's first admin token, once per cluster.
// It needs no token: the FSM refuses a second bootstrap.
func (s *service) BootstrapACL(ctx context.Context, req *wire.BootstrapACLRequest) (*wire.CreateTokenResponse, error) {
	if err := s.h.needTokens("BootstrapACL"); err != nil {
		return nil, errs.ToStatus(err)
	}
	if !s.h.IsLeader() {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.BootstrapACL)
		return resp, errs.ToStatus(err)
	}
	if m := s.h.fsm.View().ACLBootstrap(); m != nil {
		return nil, errs.ToStatus(errs.New(errs.FailedPrecondition,
			"this cluster's ACLs were bootstrapped already (log index %d, %s); an admin makes more tokens with megaflow token create",
			m.GetCreateIndex(), time.Unix(0, m.GetCreateUnixNanos()).UTC().Format(time.RFC3339)))
	}
	return s.h.createToken(ctx, "", wire.TokenRole_TOKEN_ROLE_ADMIN, 0, true)
}

// CreateToken creates a token (admin).
func (s *service) CreateToken(ctx context.Context, req *wire.CreateTokenRequest) (*wire.CreateTokenResponse, error) {
	if err := s.h.needTokens("CreateToken"); err != nil {
		return nil, errs.ToStatus(err)
	}
	if req.GetTtlSeconds() < 0 || req.GetTtlSeconds() > int64(acl.MaxTTL/time.Second) {
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument, "CreateToken: ttl_seconds %d: use 0 (no expiry) or %d to %d",
			req.GetTtlSeconds(), int64(acl.MinTTL/time.Second), int64(acl.MaxTTL/time.Second)))
	}
	ttl := time.Duration(req.GetTtlSeconds()) * time.Second
	if err := acl.CheckNew(req.GetTenant(), req.GetRole(), ttl, 0); err != nil {
		return nil, errs.ToStatus(err)
	}
	if !s.h.IsLeader() {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.CreateToken)
		return resp, errs.ToStatus(err)
	}
	return s.h.createToken(ctx, req.GetTenant(), req.GetRole(), ttl, false)
}

// createToken draws a token and proposes it (leader); with bootstrap it
// also draws the cluster's relay key, which goes in the command only.
func (h *Head) createToken(ctx context.Context, tenant string, role wire.TokenRole, ttl time.Duration, bootstrap bool) (*wire.CreateTokenResponse, error) {
	accessor, secret, hash, err := acl.NewSecret(rand.Reader)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	now := h.clock.Now().UnixNano()
	tok := &wire.Token{Accessor: accessor, SecretHash: hash, Tenant: tenant, Role: role, CreateUnixNanos: now}
	if ttl > 0 {
		tok.ExpireUnixNanos = now + int64(ttl)
	}
	cmd := &wire.TokenCreateCommand{Token: tok, Bootstrap: bootstrap}
	if bootstrap {
		// The cluster's relay key (internal/acl's relay.go): in the
		// command and the table, never in the answer.
		if cmd.RelayKey, err = acl.NewRelayKey(rand.Reader); err != nil {
			return nil, errs.ToStatus(err)
		}
	}
	res, index, err := h.apply(ctx, fsm.OpTokenCreate, cmd)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &wire.CreateTokenResponse{Token: publicToken(res.(*wire.Token)), Secret: secret, Index: index}, nil
}

// ListTokens lists the tokens from this head's table (admin), without
// their hashes.
func (s *service) ListTokens(ctx context.Context, req *wire.ListTokensRequest) (*wire.ListTokensResponse, error) {
	if err := s.h.needTokens("ListTokens"); err != nil {
		return nil, errs.ToStatus(err)
	}
	view, _, err := s.h.read(ctx, req.GetRead())
	if err == errForward {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.ListTokens)
		return resp, errs.ToStatus(err)
	}
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	out := &wire.ListTokensResponse{}
	for _, t := range view.Tokens() {
		out.Tokens = append(out.Tokens, publicToken(t))
	}
	return out, nil
}

// RevokeToken removes a token (admin). Each head refuses it from the
// moment it applies the entry.
func (s *service) RevokeToken(ctx context.Context, req *wire.RevokeTokenRequest) (*wire.RevokeTokenResponse, error) {
	if err := s.h.needTokens("RevokeToken"); err != nil {
		return nil, errs.ToStatus(err)
	}
	if req.GetAccessor() == "" {
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument, "RevokeToken: accessor is empty; megaflow token list shows them"))
	}
	if !s.h.IsLeader() {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.RevokeToken)
		return resp, errs.ToStatus(err)
	}
	if lastAdmin(s.h.fsm.View().Tokens(), req.GetAccessor(), s.h.clock.Now()) {
		return nil, errs.ToStatus(errs.New(errs.FailedPrecondition,
			"RevokeToken: %s is the cluster's last admin token that has not expired; revoked, no one could make tokens, set quotas or restore a snapshot again. Create another admin token first (megaflow token create --role admin)",
			acl.Short(req.GetAccessor())))
	}
	_, index, err := s.h.apply(ctx, fsm.OpTokenRevoke, &wire.TokenRevokeCommand{Accessor: req.GetAccessor(), UnixNanos: s.h.clock.Now().UnixNano()})
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &wire.RevokeTokenResponse{Index: index}, nil
}

// publicToken is t without its secret's hash.
func publicToken(t *wire.Token) *wire.Token {
	return &wire.Token{Accessor: t.GetAccessor(), Tenant: t.GetTenant(), Role: t.GetRole(),
		CreateUnixNanos: t.GetCreateUnixNanos(), ExpireUnixNanos: t.GetExpireUnixNanos(), CreateIndex: t.GetCreateIndex()}
}

// lastAdmin reports whether accessor names the only admin token among
// tokens that has not expired at now (the leader refuses to revoke it).
func lastAdmin(tokens []*wire.Token, accessor string, now time.Time) bool {
	live, named := 0, false
	for _, t := range tokens {
		if t.GetRole() != wire.TokenRole_TOKEN_ROLE_ADMIN || t.GetAccessor() == "" ||
			(t.GetExpireUnixNanos() != 0 && now.UnixNano() >= t.GetExpireUnixNanos()) {
			continue
		}
		live++
		named = named || t.GetAccessor() == accessor
	}
	return named && live == 1
}
