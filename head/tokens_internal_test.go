package head

import (
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/wire"
)

// The leader refuses to revoke the last admin token that has not expired:
// revoked, nobody could make tokens or restore a snapshot again.
func TestLastAdmin(t *testing.T) {
	now := time.Unix(1000, 0)
	admin := func(acc string, exp int64) *wire.Token {
		return &wire.Token{Accessor: acc, Role: wire.TokenRole_TOKEN_ROLE_ADMIN, ExpireUnixNanos: exp}
	}
	read := &wire.Token{Accessor: "r", Role: wire.TokenRole_TOKEN_ROLE_READ, Tenant: "a"}
	marker := &wire.Token{} // the bootstrap marker row: no accessor
	for _, tc := range []struct {
		name     string
		tokens   []*wire.Token
		accessor string
		want     bool
	}{
		{"the only admin", []*wire.Token{marker, admin("a1", 0), read}, "a1", true},
		{"one of two admins", []*wire.Token{admin("a1", 0), admin("a2", 0)}, "a1", false},
		{"the other admin expired", []*wire.Token{admin("a1", 0), admin("a2", 500)}, "a1", true},
		{"an expired admin itself", []*wire.Token{admin("a1", 0), admin("a2", 500)}, "a2", false},
		{"a read token", []*wire.Token{admin("a1", 0), read}, "r", false},
		{"unknown accessor", []*wire.Token{admin("a1", 0)}, "zz", false},
	} {
		if got := lastAdmin(tc.tokens, tc.accessor, now); got != tc.want {
			t.Errorf("%s: lastAdmin = %v; want %v", tc.name, got, tc.want)
		}
	}
}
