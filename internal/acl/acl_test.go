package acl_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/megaflow/megaflow/internal/acl"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// TestEveryMethodHasARule fails when a service the head serves gains an
// RPC without a row in acl.Methods (a new RPC would be refused to everyone
// on a cluster with ACLs on, or worse, guessed).
func TestEveryMethodHasARule(t *testing.T) {
	descs := []grpc.ServiceDesc{wire.MegaflowService_ServiceDesc, wire.SandboxService_ServiceDesc,
		wire.OperatorService_ServiceDesc, wire.WorkerService_ServiceDesc}
	seen := map[string]bool{}
	for _, d := range descs {
		for _, m := range d.Methods {
			seen["/"+d.ServiceName+"/"+m.MethodName] = true
		}
		for _, s := range d.Streams {
			seen["/"+d.ServiceName+"/"+s.StreamName] = true
		}
	}
	for m := range seen {
		if _, ok := acl.Methods[m]; !ok {
			t.Errorf("%s has no row in acl.Methods", m)
		}
	}
	for m := range acl.Methods {
		if !seen[m] && !strings.HasPrefix(m, "/grpc.") {
			t.Errorf("acl.Methods has %s, which no service serves", m)
		}
	}
	if len(seen) < 45 {
		t.Fatalf("only %d methods found: the descriptors moved?", len(seen))
	}
}

func TestAuthorize(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	tok := func(role wire.TokenRole, expire int64) *wire.Token {
		return &wire.Token{Accessor: "0123456789abcdef", Tenant: "a", Role: role, ExpireUnixNanos: expire}
	}
	const (
		submitM = "/megaflow.v1.MegaflowService/SubmitGraph"
		readM   = "/megaflow.v1.MegaflowService/GetGraph"
		adminM  = "/megaflow.v1.MegaflowService/SetQuota"
		workerM = "/megaflow.v1.WorkerService/Connect"
		health  = "/grpc.health.v1.Health/Check"
		boot    = "/megaflow.v1.MegaflowService/BootstrapACL"
	)
	R, S, A, W := wire.TokenRole_TOKEN_ROLE_READ, wire.TokenRole_TOKEN_ROLE_SUBMIT, wire.TokenRole_TOKEN_ROLE_ADMIN, wire.TokenRole_TOKEN_ROLE_WORKER
	cases := []struct {
		name      string
		tok       *wire.Token
		presented bool
		method    string
		reason    string // "" allowed
		class     errs.Class
		msg       string
	}{
		{"read reads", tok(R, 0), true, readM, "", 0, ""},
		{"read cannot submit", tok(R, 0), true, submitM, acl.ReasonRole, errs.PermissionDenied, "SubmitGraph needs role submit; your token (accessor 01234567…) has role read"},
		{"submit submits", tok(S, 0), true, submitM, "", 0, ""},
		{"submit reads", tok(S, 0), true, readM, "", 0, ""},
		{"submit no admin", tok(S, 0), true, adminM, acl.ReasonRole, errs.PermissionDenied, "needs role admin"},
		{"admin all", tok(A, 0), true, adminM, "", 0, ""},
		{"admin submits", tok(A, 0), true, submitM, "", 0, ""},
		{"admin is no worker", tok(A, 0), true, workerM, acl.ReasonRole, errs.PermissionDenied, "needs role worker"},
		{"worker connects", tok(W, 0), true, workerM, "", 0, ""},
		{"worker cannot read", tok(W, 0), true, readM, acl.ReasonRole, errs.PermissionDenied, "has role worker"},
		{"worker asks who leads", tok(W, 0), true, "/megaflow.v1.MegaflowService/ClusterStatus", "", 0, ""},
		{"no token", nil, false, readM, acl.ReasonNoToken, errs.Unauthenticated, "--token or MEGAFLOW_TOKEN"},
		{"unknown token", nil, true, readM, acl.ReasonUnknown, errs.Unauthenticated, "not one this cluster knows"},
		{"expired", tok(A, now.UnixNano()), true, readM, acl.ReasonExpired, errs.Unauthenticated, "expired at"},
		{"not yet expired", tok(A, now.UnixNano()+1), true, readM, "", 0, ""},
		{"health public", nil, false, health, "", 0, ""},
		{"bootstrap public", nil, false, boot, "", 0, ""},
		{"no rule", tok(A, 0), true, "/megaflow.v1.MegaflowService/Nope", acl.ReasonNoRule, errs.PermissionDenied, "no ACL rule"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, ref := acl.Authorize(c.tok, c.presented, c.method, now)
			if c.reason == "" {
				if ref != nil {
					t.Fatalf("refused: %v", ref.Err)
				}
				return
			}
			if ref == nil {
				t.Fatal("allowed")
			}
			if ref.Reason != c.reason || ref.Err.Class != c.class || !strings.Contains(ref.Err.Message, c.msg) {
				t.Fatalf("got %s %v %q; want %s %v containing %q", ref.Reason, ref.Err.Class, ref.Err.Message, c.reason, c.class, c.msg)
			}
		})
	}
}

func TestAllows(t *testing.T) {
	roles := []wire.TokenRole{0, wire.TokenRole_TOKEN_ROLE_READ, wire.TokenRole_TOKEN_ROLE_SUBMIT, wire.TokenRole_TOKEN_ROLE_ADMIN, wire.TokenRole_TOKEN_ROLE_WORKER}
	// want[have][need]
	want := [5][5]bool{
		{false, false, false, false, false},
		{false, true, false, false, false},
		{false, true, true, false, false},
		{false, true, true, true, false},
		{false, false, false, false, true},
	}
	for i, have := range roles {
		for j, need := range roles {
			if got := acl.Allows(have, need); got != want[i][j] {
				t.Errorf("Allows(%s, %s) = %v", acl.RoleName(have), acl.RoleName(need), got)
			}
		}
	}
}

func TestCheckNew(t *testing.T) {
	R, A := wire.TokenRole_TOKEN_ROLE_READ, wire.TokenRole_TOKEN_ROLE_ADMIN
	cases := []struct {
		tenant string
		role   wire.TokenRole
		ttl    time.Duration
		count  int
		want   string
	}{
		{"a", R, 0, 0, ""},
		{"", A, time.Hour, acl.MaxTokens - 1, ""},
		{"", R, 0, 0, "tenant is empty"},
		{"a b", R, 0, 0, "use only ASCII"},
		{strings.Repeat("a", 129), R, 0, 0, "129 bytes long"},
		{"-a", R, 0, 0, "starts with"},
		{"a", A, 0, 0, "belong to no tenant"},
		{"", 0, 0, 0, "use read, submit, admin or worker"},
		{"a", R, time.Second, 0, "ttl 1s"},
		{"a", R, acl.MaxTTL + 1, 0, "use 0 (no expiry)"},
		{"a", R, 0, acl.MaxTokens, "the limit"},
	}
	for _, c := range cases {
		err := acl.CheckNew(c.tenant, c.role, c.ttl, c.count)
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckNew(%q, %v, %s, %d) = %v; want %q", c.tenant, c.role, c.ttl, c.count, err, c.want)
		}
	}
}

func TestSecret(t *testing.T) {
	acc, sec, hash, err := acl.NewSecret(bytes.NewReader(bytes.Repeat([]byte{0xab}, 64)))
	if err != nil {
		t.Fatal(err)
	}
	if acc != "abababababababab" || !strings.HasPrefix(sec, "mft_") || len(sec) != 4+64 || !bytes.Equal(hash, acl.Hash(sec)) {
		t.Fatalf("%s %s %x", acc, sec, hash)
	}
	for in, want := range map[string]string{"Bearer x": "x", "bearer  y ": "y", "Basic x": "", "Bearer": "", "x": ""} {
		got, ok := acl.BearerSecret(in)
		if got != want || ok != (want != "") {
			t.Errorf("BearerSecret(%q) = %q %v", in, got, ok)
		}
	}
	if _, err := acl.ParseRole("root"); err == nil {
		t.Fatal("ParseRole(root) passed")
	}
}
