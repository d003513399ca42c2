// Package acl is the pure logic of API tokens (docs/security.md): roles
// and their order, the table of which role each RPC needs, the decision
// whether a token may make a call (Authorize), and the bounds of a new
// token. It does no I/O and keeps no state: the head keeps the tokens in
// its replicated table (head/state) and asks Authorize on every call.
package acl

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// MetadataKey is the gRPC metadata key that carries a call's token, as
// "Bearer <secret>".
const MetadataKey = "authorization"

// SecretPrefix starts every secret, so that a leaked one is recognizable
// (secret scanners) and a mistyped flag value is told apart from a secret.
const SecretPrefix = "mft_"

// SecretBytes is a secret's random part: 256 bits, read from crypto/rand.
// Guessing one is hopeless, so the table stores only its SHA-256 (a fast
// hash is enough for a secret of full entropy; no salt or slow KDF is
// needed, unlike for passwords), and a copy of the table or a snapshot
// gives no token.
const SecretBytes = 32

// AccessorBytes is the random part of an accessor (16 hex digits).
const AccessorBytes = 8

// Bounds of tokens.
const (
	// MaxTokens is how many tokens a cluster keeps at once (expired ones
	// count until revoked).
	MaxTokens = 10_000
	// MinTTL and MaxTTL bound a token's lifetime; 0 means no expiry.
	MinTTL = time.Minute
	MaxTTL = 5 * 365 * 24 * time.Hour
	// MaxTenantBytes bounds a token's tenant, as every tenant.
	MaxTenantBytes = 128
)

// RoleName names a role as the CLI spells it: "read", "submit", "admin",
// "worker"; "none" for the zero role.
func RoleName(r wire.TokenRole) string {
	switch r {
	case wire.TokenRole_TOKEN_ROLE_READ:
		return "read"
	case wire.TokenRole_TOKEN_ROLE_SUBMIT:
		return "submit"
	case wire.TokenRole_TOKEN_ROLE_ADMIN:
		return "admin"
	case wire.TokenRole_TOKEN_ROLE_WORKER:
		return "worker"
	}
	return "none"
}

// ParseRole is RoleName's inverse. Errors: InvalidArgument naming the
// roles.
func ParseRole(s string) (wire.TokenRole, error) {
	for _, r := range []wire.TokenRole{wire.TokenRole_TOKEN_ROLE_READ, wire.TokenRole_TOKEN_ROLE_SUBMIT,
		wire.TokenRole_TOKEN_ROLE_ADMIN, wire.TokenRole_TOKEN_ROLE_WORKER} {
		if RoleName(r) == s {
			return r, nil
		}
	}
	return 0, errs.New(errs.InvalidArgument, "role %q: use read, submit, admin or worker", s)
}

// Allows reports whether a token of role have may make a call that needs
// role need: read < submit < admin; worker allows worker calls only, and
// only worker tokens allow them.
func Allows(have, need wire.TokenRole) bool {
	if need == wire.TokenRole_TOKEN_ROLE_WORKER || have == wire.TokenRole_TOKEN_ROLE_WORKER {
		return have == need
	}
	rank := func(r wire.TokenRole) int {
		switch r {
		case wire.TokenRole_TOKEN_ROLE_READ:
			return 1
		case wire.TokenRole_TOKEN_ROLE_SUBMIT:
			return 2
		case wire.TokenRole_TOKEN_ROLE_ADMIN:
			return 3
		}
		return 0
	}
	return rank(have) >= rank(need) && rank(need) > 0
}

// Hash is the SHA-256 of a secret, as stored in Token.secret_hash.
func Hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// NewSecret reads a new token's accessor and secret from rand
// (crypto/rand.Reader outside tests) and returns them with the secret's
// hash.
func NewSecret(rand io.Reader) (accessor, secret string, hash []byte, err error) {
	b := make([]byte, AccessorBytes+SecretBytes)
	if _, err := io.ReadFull(rand, b); err != nil {
		return "", "", nil, errs.New(errs.Internal, "token: read random bytes: %v", err)
	}
	accessor = hex.EncodeToString(b[:AccessorBytes])
	secret = SecretPrefix + hex.EncodeToString(b[AccessorBytes:])
	return accessor, secret, Hash(secret), nil
}

// BearerSecret returns the secret of an "authorization" metadata value
// ("Bearer <secret>", the scheme in any case); ok is false for anything
// else.
func BearerSecret(v string) (secret string, ok bool) {
	scheme, s, found := strings.Cut(strings.TrimSpace(v), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	s = strings.TrimSpace(s)
	return s, s != ""
}

// CheckNew checks a new token's fields: a read or submit token names a
// tenant (1 to MaxTenantBytes of [A-Za-z0-9._-]), an admin or worker token
// none; ttl is 0 (no expiry) or within [MinTTL, MaxTTL]; count (the tokens
// kept now) is below MaxTokens. Errors: InvalidArgument or
// ResourceExhausted, naming the field and the bound.
func CheckNew(tenant string, role wire.TokenRole, ttl time.Duration, count int) error {
	switch role {
	case wire.TokenRole_TOKEN_ROLE_READ, wire.TokenRole_TOKEN_ROLE_SUBMIT:
		if p := tenantProblem(tenant); p != "" {
			return errs.New(errs.InvalidArgument, "token of role %s: tenant %s", RoleName(role), p)
		}
	case wire.TokenRole_TOKEN_ROLE_ADMIN, wire.TokenRole_TOKEN_ROLE_WORKER:
		if tenant != "" {
			return errs.New(errs.InvalidArgument, "token of role %s: tenant %q given; %s tokens belong to no tenant (leave --tenant out)", RoleName(role), tenant, RoleName(role))
		}
	default:
		return errs.New(errs.InvalidArgument, "token role %d: use read, submit, admin or worker", int32(role))
	}
	if ttl != 0 && (ttl < MinTTL || ttl > MaxTTL) {
		return errs.New(errs.InvalidArgument, "token ttl %s: use 0 (no expiry) or %s to %s", ttl, MinTTL, MaxTTL)
	}
	if count >= MaxTokens {
		return errs.New(errs.ResourceExhausted, "the cluster keeps %d tokens, the limit; revoke unused or expired ones (megaflow token list, megaflow token revoke)", count)
	}
	return nil
}

func tenantProblem(s string) string {
	if s == "" {
		return "is empty; name it with --tenant"
	}
	if len(s) > MaxTenantBytes {
		return fmt.Sprintf("is %d bytes long; the limit is %d", len(s), MaxTenantBytes)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("%q has %q at byte %d; use only ASCII letters, digits, '.', '_' and '-'", s, c, i)
		}
	}
	if s[0] == '.' || s[0] == '-' {
		return fmt.Sprintf("%q starts with %q; start with a letter, digit or '_'", s, s[0])
	}
	return ""
}

// Short is an accessor's first 8 hex digits followed by "…", as refusals
// name a token.
func Short(accessor string) string {
	if len(accessor) > 8 {
		return accessor[:8] + "…"
	}
	return accessor
}
