package state

import (
	"encoding/hex"
	"time"

	"github.com/megaflow/megaflow/internal/acl"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// API tokens (docs/security.md): the FSM adds them (OpTokenCreate, rules 6)
// and removes them (OpTokenRevoke); every head looks a call's token up in
// its own table (TokenByHash), without a round trip to the leader. A row
// keeps the SHA-256 of the secret, never the secret. The row with accessor
// "" is the bootstrap marker: it records that the cluster's first admin
// token was made (ACLBootstrap), has no secret and authenticates nothing;
// revoking the bootstrap token leaves it, so a second bootstrap stays
// refused. The marker also keeps the cluster's relay key (RelayKey,
// internal/acl's relay.go), which a snapshot carries with it.

// RulesTokens is the first rules version with API tokens: OpTokenCreate and
// OpTokenRevoke apply (refused below it, changing nothing).
const RulesTokens uint64 = 6

// Token is a token's row. Like every row it is immutable once inserted.
type Token struct {
	T *wire.Token
}

// CreateToken checks w (its accessor is 16 hex digits, its hash 32 bytes,
// acl.CheckNew of its tenant, role and lifetime, the count of tokens) and
// inserts it, stamped with the transaction's index. With bootstrap it is
// the cluster's first admin token and also writes the bootstrap marker,
// which keeps relayKey (acl.RelayKeyBytes bytes; without bootstrap it
// must be empty); refused if a marker is there. Errors, changing nothing:
// InvalidArgument, ResourceExhausted (acl.MaxTokens), AlreadyExists
// (accessor or secret taken), FailedPrecondition (bootstrapped before).
func (t *Txn) CreateToken(w *wire.Token, bootstrap bool, relayKey []byte) error {
	if err := checkTokenRow(w); err != nil {
		return err
	}
	switch {
	case bootstrap && len(relayKey) != acl.RelayKeyBytes:
		return errs.New(errs.InvalidArgument, "the bootstrap's relay key has %d bytes; want %d", len(relayKey), acl.RelayKeyBytes)
	case !bootstrap && len(relayKey) != 0:
		return errs.New(errs.InvalidArgument, "token %s: a relay key comes only with the bootstrap", w.GetAccessor())
	}
	ttl := time.Duration(0)
	if w.GetExpireUnixNanos() != 0 {
		ttl = time.Duration(w.GetExpireUnixNanos() - w.GetCreateUnixNanos())
	}
	if err := acl.CheckNew(w.GetTenant(), w.GetRole(), ttl, t.tokenCount()); err != nil {
		return err
	}
	if bootstrap {
		if m := aclMarker(t); m != nil {
			return errs.New(errs.FailedPrecondition, "this cluster's ACLs were bootstrapped already (log index %d, %s); an admin makes more tokens with megaflow token create",
				m.GetCreateIndex(), time.Unix(0, m.GetCreateUnixNanos()).UTC().Format(time.RFC3339))
		}
		if w.GetRole() != wire.TokenRole_TOKEN_ROLE_ADMIN {
			return errs.New(errs.InvalidArgument, "the bootstrap token is of role admin, not %s", acl.RoleName(w.GetRole()))
		}
	}
	if first(t.mem, tableTokens, indexID, w.GetAccessor()) != nil {
		return errs.New(errs.AlreadyExists, "token accessor %s is taken", w.GetAccessor())
	}
	if first(t.mem, tableTokens, indexHash, hex.EncodeToString(w.GetSecretHash())) != nil {
		return errs.New(errs.AlreadyExists, "token %s: its secret's hash is another token's", w.GetAccessor())
	}
	row := cloneToken(w)
	row.CreateIndex = t.index
	must(t.mem.Insert(tableTokens, &Token{T: row}))
	if bootstrap {
		must(t.mem.Insert(tableTokens, &Token{T: &wire.Token{CreateIndex: t.index, CreateUnixNanos: w.GetCreateUnixNanos(),
			RelayKey: append([]byte(nil), relayKey...)}}))
	}
	return nil
}

// RevokeToken removes the token of accessor. Errors, changing nothing:
// NotFound.
func (t *Txn) RevokeToken(accessor string) error {
	raw := first(t.mem, tableTokens, indexID, accessor)
	if accessor == "" || raw == nil {
		return errs.New(errs.NotFound, "no token with accessor %q (megaflow token list shows them)", accessor)
	}
	must(t.mem.Delete(tableTokens, raw))
	return nil
}

func (t *Txn) tokenCount() int {
	n := 0
	it := get(t.mem, tableTokens, indexID)
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if raw.(*Token).T.GetAccessor() != "" {
			n++
		}
	}
	return n
}

func aclMarker(t *Txn) *wire.Token {
	if raw := first(t.mem, tableTokens, indexID, ""); raw != nil {
		return raw.(*Token).T
	}
	return nil
}

// TokenByHash returns the token whose secret has SHA-256 hash, or nil. The
// row is shared: never modify it.
func (v *View) TokenByHash(hash []byte) *wire.Token {
	if len(hash) == 0 {
		return nil
	}
	if raw := first(v.txn(), tableTokens, indexHash, hex.EncodeToString(hash)); raw != nil {
		return raw.(*Token).T
	}
	return nil
}

// Token returns the token of accessor, or nil.
func (v *View) Token(accessor string) *wire.Token {
	if accessor == "" {
		return nil
	}
	if raw := first(v.txn(), tableTokens, indexID, accessor); raw != nil {
		return raw.(*Token).T
	}
	return nil
}

// Tokens returns every token by accessor, without the bootstrap marker.
// The rows are shared: never modify them.
func (v *View) Tokens() []*wire.Token {
	var out []*wire.Token
	for _, r := range collect[*Token](get(v.txn(), tableTokens, indexID)) {
		if r.T.GetAccessor() != "" {
			out = append(out, r.T)
		}
	}
	return out
}

// TokenRows returns every token row by accessor, the bootstrap marker (if
// any) first: what a snapshot writes.
func (v *View) TokenRows() []*wire.Token {
	var out []*wire.Token
	for _, r := range collect[*Token](get(v.txn(), tableTokens, indexID)) {
		out = append(out, r.T)
	}
	return out
}

// ACLBootstrap returns the bootstrap marker (its create index and time),
// or nil if the cluster's ACLs were never bootstrapped.
func (v *View) ACLBootstrap() *wire.Token {
	if raw := first(v.txn(), tableTokens, indexID, ""); raw != nil {
		return raw.(*Token).T
	}
	return nil
}

// RelayKey returns the cluster's relay key (acl.RelayKeyBytes bytes, kept
// on the bootstrap marker), or nil before the ACL bootstrap. The slice is
// shared: never modify it, and never send it anywhere but in a relay
// call's metadata or the Welcome of an authenticated worker stream.
func (v *View) RelayKey() []byte {
	return v.ACLBootstrap().GetRelayKey()
}

// Token adds a token row (or the bootstrap marker, with its relay key) to
// a restore. Errors: InvalidArgument for a row out of its bounds (a
// corrupt snapshot).
func (r *Restore) Token(w *wire.Token) error {
	if w.GetAccessor() != "" {
		if err := checkTokenRow(w); err != nil {
			return err
		}
		if len(w.GetRelayKey()) != 0 {
			return errs.New(errs.InvalidArgument, "token %s with a relay key: only the bootstrap marker has one", w.GetAccessor())
		}
	} else if len(w.GetSecretHash()) != 0 || w.GetRole() != 0 {
		return errs.New(errs.InvalidArgument, "token bootstrap marker with a secret or role")
	} else if n := len(w.GetRelayKey()); n != acl.RelayKeyBytes {
		return errs.New(errs.InvalidArgument, "token bootstrap marker with a relay key of %d bytes; want %d", n, acl.RelayKeyBytes)
	}
	return r.mem.Insert(tableTokens, &Token{T: w})
}

func checkTokenRow(w *wire.Token) error {
	if w == nil {
		return errs.New(errs.InvalidArgument, "create token: no token")
	}
	if a := w.GetAccessor(); len(a) != 2*acl.AccessorBytes || !isHex(a) {
		return errs.New(errs.InvalidArgument, "token accessor %q: want %d lowercase hex digits", a, 2*acl.AccessorBytes)
	}
	if len(w.GetSecretHash()) != 32 {
		return errs.New(errs.InvalidArgument, "token %s: secret hash of %d bytes; want 32 (SHA-256)", w.GetAccessor(), len(w.GetSecretHash()))
	}
	if e := w.GetExpireUnixNanos(); e != 0 && e <= w.GetCreateUnixNanos() {
		return errs.New(errs.InvalidArgument, "token %s: expires before it was created", w.GetAccessor())
	}
	return nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func cloneToken(w *wire.Token) *wire.Token {
	return &wire.Token{Accessor: w.GetAccessor(), SecretHash: append([]byte(nil), w.GetSecretHash()...), Tenant: w.GetTenant(),
		Role: w.GetRole(), CreateUnixNanos: w.GetCreateUnixNanos(), ExpireUnixNanos: w.GetExpireUnixNanos(), CreateIndex: w.GetCreateIndex()}
}

// Token returns the token of accessor as this transaction sees it, or nil.
func (t *Txn) Token(accessor string) *wire.Token {
	if raw := first(t.mem, tableTokens, indexID, accessor); raw != nil && accessor != "" {
		return raw.(*Token).T
	}
	return nil
}
