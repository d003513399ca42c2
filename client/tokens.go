package client

import (
	"context"
	"time"

	"github.com/megaflow/megaflow/internal/wire"
)

// Token is an API token's row as the heads list it: accessor, tenant,
// role, times; never the secret or its hash (docs/security.md).
type Token = wire.Token

// TokenRole is what a token may do: read < submit < admin, and worker.
type TokenRole = wire.TokenRole

// The token roles.
const (
	RoleRead   = wire.TokenRole_TOKEN_ROLE_READ
	RoleSubmit = wire.TokenRole_TOKEN_ROLE_SUBMIT
	RoleAdmin  = wire.TokenRole_TOKEN_ROLE_ADMIN
	RoleWorker = wire.TokenRole_TOKEN_ROLE_WORKER
)

// BootstrapACL creates the cluster's first admin token and returns it with
// its secret (shown this once). It needs no token and works once per
// cluster. Errors: errs.FailedPrecondition (ACLs off, below rules 6, or
// bootstrapped already).
func (c *Client) BootstrapACL(ctx context.Context) (*Token, string, error) {
	return c.createToken(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (*wire.CreateTokenResponse, error) {
		return s.BootstrapACL(ctx, &wire.BootstrapACLRequest{})
	})
}

// CreateToken creates a token of role for tenant (empty for admin and
// worker tokens) that expires after ttl (0: never; else 1m to 5 years)
// and returns it with its secret, shown this once. It needs an admin
// token. Errors: errs.InvalidArgument (a field out of its bounds),
// errs.ResourceExhausted (too many tokens), errs.PermissionDenied.
func (c *Client) CreateToken(ctx context.Context, tenant string, role TokenRole, ttl time.Duration) (*Token, string, error) {
	req := &wire.CreateTokenRequest{Tenant: tenant, Role: role, TtlSeconds: int64(ttl / time.Second)}
	return c.createToken(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (*wire.CreateTokenResponse, error) {
		return s.CreateToken(ctx, req)
	})
}

func (c *Client) createToken(ctx context.Context, call func(context.Context, wire.MegaflowServiceClient) (*wire.CreateTokenResponse, error)) (*Token, string, error) {
	var res *wire.CreateTokenResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = call(ctx, s)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	c.observe(res.Index)
	return res.Token, res.Secret, nil
}

// ListTokens returns every token by accessor (admin).
func (c *Client) ListTokens(ctx context.Context, ro ReadOptions) ([]*Token, error) {
	var res *wire.ListTokensResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.ListTokens(ctx, &wire.ListTokensRequest{Read: c.readOptions(ro)})
		return err
	})
	if err != nil {
		return nil, err
	}
	return res.Tokens, nil
}

// RevokeToken removes the token of accessor (admin); every head refuses it
// once it applied the returned index. Errors: errs.NotFound.
func (c *Client) RevokeToken(ctx context.Context, accessor string) (uint64, error) {
	var res *wire.RevokeTokenResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.RevokeToken(ctx, &wire.RevokeTokenRequest{Accessor: accessor})
		return err
	})
	if err != nil {
		return 0, err
	}
	c.observe(res.Index)
	return res.Index, nil
}
