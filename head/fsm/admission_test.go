package fsm

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/megaflow/megaflow/internal/acl"
	"github.com/megaflow/megaflow/internal/admission"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

func (f *testFSM) setPolicy(p *wire.AdmissionPolicy) *SetAdmissionPolicyResult {
	f.tb.Helper()
	return f.ok(OpSetAdmissionPolicy, &wire.SetAdmissionPolicyCommand{Policy: p, UnixNanos: f.now()}).(*SetAdmissionPolicyResult)
}

// assertRestores checks that the table rebuilt from a snapshot of f's
// equals f's.
func assertRestores(t *testing.T, f *testFSM) {
	t.Helper()
	dst := newTestFSM(t, 0)
	if err := dst.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, f.View()))}); err != nil {
		t.Fatal(err)
	}
	if d := firstDiff(dump(t, f.View()), dump(t, dst.View())); d != "" {
		t.Fatalf("the table restored from a snapshot differs: %s", d)
	}
}

// OpSetAdmissionPolicy: refused below rules 5, changing nothing; under 5
// it sets, replaces (in normal form) and removes rows, refuses a policy
// out of its bounds changing nothing, and the rows survive a snapshot.
func TestSetAdmissionPolicy(t *testing.T) {
	f := newTestFSM(t, 0)
	f.ok(OpSetRules, wrapperspb.UInt64(4))
	host := &wire.AdmissionPolicy{Tenant: "acme", AllowedNetworks: []string{"host"}}
	before := dump(t, f.View())
	if e := f.refused(errs.FailedPrecondition, OpSetAdmissionPolicy, &wire.SetAdmissionPolicyCommand{Policy: host}); !strings.Contains(e.Message, "rules 5") {
		t.Fatalf("below rules 5: %v; want a refusal naming rules 5", e)
	}
	if d := firstDiff(before, dump(t, f.View())); d != "" {
		t.Fatalf("a refused policy changed the table: %s", d)
	}
	f.ok(OpSetRules, wrapperspb.UInt64(5))

	rows := func() string {
		var b strings.Builder
		for _, p := range f.View().AdmissionPolicies() {
			b.WriteString(p.GetTenant() + ":" + admission.Flags(p) + ";")
		}
		return b.String()
	}
	steps := []struct {
		name    string
		policy  *wire.AdmissionPolicy
		removed bool
		want    string
	}{
		{"set", host, false, "acme: --allow-network host;"},
		{"cluster row", &wire.AdmissionPolicy{AllowedNetworks: []string{"*"}, RunAsUser: "65534:65534", MaxPids: 64}, false,
			": --allow-network '*' --user 65534:65534 --max-pids 64;acme: --allow-network host;"},
		{"replace, normalized", &wire.AdmissionPolicy{Tenant: "acme", AllowedNetworks: []string{"none", "host", "bridge", "host"},
			AllowedCapabilities: []string{"CAP_NET_ADMIN", "SYS_PTRACE", "NET_ADMIN"}, ReadOnlyRootFs: true}, false,
			": --allow-network '*' --user 65534:65534 --max-pids 64;acme: --allow-network bridge --allow-network host --allow-cap NET_ADMIN --allow-cap SYS_PTRACE --read-only-root;"},
		{"the default removes", &wire.AdmissionPolicy{Tenant: "acme", AllowedNetworks: []string{"*", "none"}}, true,
			": --allow-network '*' --user 65534:65534 --max-pids 64;"},
		{"removing no row", &wire.AdmissionPolicy{Tenant: "beta", AllowedNetworks: []string{"*"}}, true,
			": --allow-network '*' --user 65534:65534 --max-pids 64;"},
		{"an empty policy is a row: none only", &wire.AdmissionPolicy{Tenant: "beta"}, false,
			": --allow-network '*' --user 65534:65534 --max-pids 64;beta:;"},
	}
	for _, s := range steps {
		if got := f.setPolicy(s.policy); got.Removed != s.removed {
			t.Fatalf("%s: removed %v; want %v", s.name, got.Removed, s.removed)
		}
		if got := rows(); got != s.want {
			t.Fatalf("%s: rows %q; want %q", s.name, got, s.want)
		}
	}
	if p, src := f.View().EffectiveAdmission("acme"); src != wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_CLUSTER || p.GetMaxPids() != 64 {
		t.Fatalf("acme's effective policy: %v from %v; want the cluster row", p, src)
	}
	if p, src := f.View().EffectiveAdmission("beta"); src != wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT || p.GetModifyIndex() == 0 || p.GetUpdateUnixNanos() == 0 {
		t.Fatalf("beta's effective policy: %v from %v; want its own row, stamped", p, src)
	}

	before = dump(t, f.View())
	for name, p := range map[string]*wire.AdmissionPolicy{
		"too many networks":     {Tenant: "acme", AllowedNetworks: strings.Split(strings.Repeat("n,", admission.MaxNetworks+1), ",")[:admission.MaxNetworks+1]},
		"bad network":           {Tenant: "acme", AllowedNetworks: []string{"container:abc"}},
		"empty network":         {Tenant: "acme", AllowedNetworks: []string{""}},
		"too many capabilities": {Tenant: "acme", AllowedCapabilities: strings.Split(strings.Repeat("X,", admission.MaxCapabilities+1), ",")[:admission.MaxCapabilities+1]},
		"bad capability":        {Tenant: "acme", AllowedCapabilities: []string{"net_admin"}},
		"user name":             {Tenant: "acme", RunAsUser: "nobody"},
		"user with three parts": {Tenant: "acme", RunAsUser: "1:2:3"},
		"uid out of range":      {Tenant: "acme", RunAsUser: "4294967295"},
		"leading zero":          {Tenant: "acme", RunAsUser: "0065534"},
		"negative pids":         {Tenant: "acme", MaxPids: -1},
		"too many pids":         {Tenant: "acme", MaxPids: admission.MaxPids + 1},
		"long tenant":           {Tenant: strings.Repeat("t", admission.MaxTenantBytes+1)},
	} {
		e := f.refused(errs.InvalidArgument, OpSetAdmissionPolicy, &wire.SetAdmissionPolicyCommand{Policy: p})
		if !strings.Contains(e.Message, "admission policy") {
			t.Fatalf("%s: %v; want an error naming the admission policy", name, e)
		}
	}
	f.refused(errs.InvalidArgument, OpSetAdmissionPolicy, &wire.SetAdmissionPolicyCommand{})
	if d := firstDiff(before, dump(t, f.View())); d != "" {
		t.Fatalf("refused policies changed the table: %s", d)
	}
	assertRestores(t, f)
}

// OpSubmitGraph under rules 5 checks each task's network and added
// capabilities against its tenant's effective policy (its row, else the
// cluster row, else the default: no host, no capabilities), refusing the
// whole graph, changing nothing, with PermissionDenied naming the task,
// the field, the value and the policy; below rules 5 nothing is checked.
func TestSubmitAdmission(t *testing.T) {
	hostTask := func() *wire.TaskSpec { s := spec("t"); s.Network = "host"; return s }
	capTask := func() *wire.TaskSpec { s := spec("t"); s.Capabilities = []string{"SYS_ADMIN"}; return s }
	named := func() *wire.TaskSpec { s := spec("t"); s.Network = "trainnet"; return s }
	graph := func(id, tenant string, s *wire.TaskSpec) *wire.GraphSpec {
		g := graphSpec(id, spec("plain"), s)
		g.Tenant = tenant
		return g
	}

	f := newTestFSM(t, 0)
	f.ok(OpSetRules, wrapperspb.UInt64(4))
	f.submit(graph("old-host", "acme", hostTask())) // rules 4: not checked
	f.ok(OpSetRules, wrapperspb.UInt64(5))

	type step struct {
		name   string
		policy *wire.AdmissionPolicy // set before the submit, if any
		graph  *wire.GraphSpec
		// refused: the error must contain every one of these; none: committed.
		refused []string
		reason  string
	}
	steps := []step{
		{name: "default: host", graph: graph("g1", "acme", hostTask()),
			refused: []string{`task "g1/t"`, `network "host"`, "the built-in default policy", "megaflow policy set acme --allow-network '*' --allow-network host"},
			reason:  admission.ReasonNetwork},
		{name: "default: capability", graph: graph("g2", "acme", capTask()),
			refused: []string{`task "g2/t"`, `capabilities "SYS_ADMIN"`, "the built-in default policy", "--allow-cap SYS_ADMIN"},
			reason:  admission.ReasonCapability},
		{name: "default: a named network", graph: graph("g3", "acme", named())},
		{name: "tenant row allows host", policy: &wire.AdmissionPolicy{Tenant: "acme", AllowedNetworks: []string{"*", "host"}},
			graph: graph("g4", "acme", hostTask())},
		{name: "tenant row still refuses a capability", graph: graph("g5", "acme", capTask()),
			refused: []string{"tenant acme's policy"}, reason: admission.ReasonCapability},
		{name: "another tenant: default", graph: graph("g6", "beta", hostTask()),
			refused: []string{"the built-in default policy"}, reason: admission.ReasonNetwork},
		{name: "cluster row allows the capability", policy: &wire.AdmissionPolicy{AllowedNetworks: []string{"*"}, AllowedCapabilities: []string{"SYS_ADMIN"}},
			graph: graph("g7", "beta", capTask())},
		{name: "cluster row: host still refused", graph: graph("g8", "beta", hostTask()),
			refused: []string{"the cluster policy"}, reason: admission.ReasonNetwork},
		{name: "a row with only host refuses bridge", policy: &wire.AdmissionPolicy{Tenant: "gamma", AllowedNetworks: []string{"host"}},
			graph:   graph("g9", "gamma", func() *wire.TaskSpec { s := spec("t"); s.Network = "bridge"; return s }()),
			refused: []string{`network "bridge"`}, reason: admission.ReasonNetwork},
		{name: "none is always allowed", policy: &wire.AdmissionPolicy{Tenant: "delta"},
			graph: graph("g10", "delta", func() *wire.TaskSpec { s := spec("t"); s.Network = "none"; return s }())},
		{name: "the default tenant, a CAP_ name", graph: graph("g11", "", func() *wire.TaskSpec { s := spec("t"); s.Capabilities = []string{"CAP_SYS_ADMIN"}; return s }())},
	}
	for _, s := range steps {
		if s.policy != nil {
			f.setPolicy(s.policy)
		}
		if len(s.refused) == 0 {
			if r := f.submit(s.graph); !r.Committed {
				t.Fatalf("%s: not committed: %+v", s.name, r)
			}
			continue
		}
		before := dump(t, f.View())
		e := f.refused(errs.PermissionDenied, OpSubmitGraph, submitCmd(s.graph, 100))
		for _, want := range s.refused {
			if !strings.Contains(e.Message, want) {
				t.Fatalf("%s: %q; want it to contain %q", s.name, e.Message, want)
			}
		}
		if e.Reason != s.reason {
			t.Fatalf("%s: reason %q; want %q", s.name, e.Reason, s.reason)
		}
		if d := firstDiff(before, dump(t, f.View())); d != "" {
			t.Fatalf("%s: a refused graph changed the table: %s", s.name, d)
		}
		if f.View().Graph(s.graph.GetId()) != nil {
			t.Fatalf("%s: graph committed", s.name)
		}
	}
	// A graph committed before a policy tightened stays.
	f.setPolicy(&wire.AdmissionPolicy{Tenant: "acme", AllowedNetworks: []string{"*"}, RunAsUser: "1"})
	if f.View().Graph("g4") == nil || f.View().Graph("old-host") == nil {
		t.Fatal("a committed graph went with a policy change")
	}
	assertRestores(t, f)
}

// The policy row a snapshot carries is read back exactly, and a snapshot
// whose admission record is out of bounds is refused.
func TestAdmissionSnapshotRecord(t *testing.T) {
	f := newTestFSM(t, 0)
	f.ok(OpSetRules, wrapperspb.UInt64(5))
	f.setPolicy(&wire.AdmissionPolicy{Tenant: "acme", AllowedNetworks: []string{"host"}, MaxPids: 40})
	snap := snapshotBytes(t, f.View())
	row, _ := proto.MarshalOptions{Deterministic: true}.Marshal(f.View().AdmissionPolicies()[0])
	bad, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&wire.AdmissionPolicy{Tenant: "acme", MaxPids: -3, ModifyIndex: 2})
	i := bytes.Index(snap, row)
	if i < 2 || snap[i-2] != recAdmission || len(row) != len(bad) {
		t.Fatalf("admission record not found as expected (at %d)", i)
	}
	corrupt := append(append(append([]byte{}, snap[:i]...), bad...), snap[i+len(row):]...)
	dst := newTestFSM(t, 0)
	if err := dst.Restore(nopCloser{bytes.NewReader(corrupt)}); err == nil || !strings.Contains(err.Error(), "max_pids") {
		t.Fatalf("restoring a snapshot with a bad policy row: %v; want an error naming max_pids", err)
	}
}

// bootstrapACL applies the ACL bootstrap: the first admin token and the
// bootstrap marker.
func (f *testFSM) bootstrapACL() {
	f.tb.Helper()
	f.ok(OpTokenCreate, &wire.TokenCreateCommand{Bootstrap: true, RelayKey: bytes.Repeat([]byte{7}, acl.RelayKeyBytes),
		Token: &wire.Token{Accessor: "00000000000000a1", SecretHash: bytes.Repeat([]byte{1}, 32), Role: wire.TokenRole_TOKEN_ROLE_ADMIN, CreateUnixNanos: f.now()}})
}

// From rules 7 the built-in default policy of a cluster whose table holds
// the ACL bootstrap marker runs containers as 65534:65534 and names itself
// so; without the marker, or below rules 7, it is the default without
// ACLs. A row equal to the default in force is removed; one equal to the
// other default is kept (with ACLs, the image's user is a choice); a
// cluster or tenant row with user 0:0 is root; every row survives a
// snapshot.
func TestACLDefaultAdmission(t *testing.T) {
	aclDefault := wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_DEFAULT_ACL
	plainDefault := wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_DEFAULT
	effective := func(f *testFSM, tenant string) (string, wire.AdmissionPolicySource) {
		p, src := f.View().EffectiveAdmission(tenant)
		return p.GetRunAsUser(), src
	}
	want := func(f *testFSM, step, tenant, user string, src wire.AdmissionPolicySource) {
		t.Helper()
		if u, s := effective(f, tenant); u != user || s != src {
			t.Fatalf("%s: %s's effective policy runs as %q from %v; want %q from %v", step, tenant, u, s, user, src)
		}
	}

	old := newTestFSM(t, 0)
	old.ok(OpSetRules, wrapperspb.UInt64(6))
	old.bootstrapACL()
	want(old, "rules 6 with ACLs", "acme", "", plainDefault)
	if got := old.setPolicy(&wire.AdmissionPolicy{Tenant: "acme", AllowedNetworks: []string{"*"}}); !got.Removed {
		t.Fatal("rules 6 with ACLs: the default without ACLs was kept; want it removed as before rules 7")
	}

	noACL := newTestFSM(t, 0)
	noACL.ok(OpSetRules, wrapperspb.UInt64(7))
	want(noACL, "rules 7 without ACLs", "acme", "", plainDefault)
	if got := noACL.setPolicy(&wire.AdmissionPolicy{Tenant: "acme", AllowedNetworks: []string{"*"}}); !got.Removed {
		t.Fatal("rules 7 without ACLs: the default was kept; want it removed")
	}
	// Set before the bootstrap: a row that equals the default with ACLs
	// once they are bootstrapped stays (and is restored).
	if got := noACL.setPolicy(&wire.AdmissionPolicy{Tenant: "early", AllowedNetworks: []string{"*"}, RunAsUser: "65534:65534"}); got.Removed {
		t.Fatal("rules 7 without ACLs: a row with user 65534:65534 was removed; want it kept")
	}
	noACL.setPolicy(&wire.AdmissionPolicy{Tenant: "early-kept", AllowedNetworks: []string{"*"}, RunAsUser: "65534:65534"})
	noACL.bootstrapACL()
	want(noACL, "bootstrapped", "acme", admission.ACLDefaultUser, aclDefault)
	want(noACL, "bootstrapped", "early", admission.ACLDefaultUser, wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT)
	if !noACL.View().ACLDefaultAdmission() || old.View().ACLDefaultAdmission() {
		t.Fatal("ACLDefaultAdmission: want true from rules 7 with the marker, false at rules 6")
	}

	// A refusal names the default and its suggested command keeps the user.
	hostGraph := graphSpec("acl-host", func() *wire.TaskSpec { s := spec("t"); s.Network = "host"; return s }())
	hostGraph.Tenant = "acme"
	e := noACL.refused(errs.PermissionDenied, OpSubmitGraph, submitCmd(hostGraph, 100))
	for _, w := range []string{"the built-in default policy for clusters with ACLs (allowed: none)", "megaflow policy set acme --allow-network host --user 65534:65534"} {
		if !strings.Contains(e.Message, w) {
			t.Fatalf("a host graph under the default with ACLs: %q; want it to contain %q", e.Message, w)
		}
	}

	f := noACL
	for _, s := range []struct {
		name    string
		policy  *wire.AdmissionPolicy
		removed bool
		tenant  string // whose effective policy is then checked
		user    string
		src     wire.AdmissionPolicySource
	}{
		{"the ACL default removes", &wire.AdmissionPolicy{Tenant: "early", AllowedNetworks: []string{"none"}, RunAsUser: "65534:65534"}, true,
			"early", admission.ACLDefaultUser, aclDefault},
		{"nobody with bridge is a row", &wire.AdmissionPolicy{Tenant: "bridged", AllowedNetworks: []string{"*"}, RunAsUser: "65534:65534"}, false,
			"bridged", admission.ACLDefaultUser, wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT},
		{"the image's user is a row", &wire.AdmissionPolicy{Tenant: "imgusr", AllowedNetworks: []string{"*"}}, false,
			"imgusr", "", wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT},
		{"a tenant row with root", &wire.AdmissionPolicy{Tenant: "rooted", AllowedNetworks: []string{"*"}, RunAsUser: "0:0"}, false,
			"rooted", "0:0", wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT},
		{"others keep the default", &wire.AdmissionPolicy{Tenant: "other", RunAsUser: "65534:65534"}, true,
			"acme", admission.ACLDefaultUser, aclDefault},
		{"a cluster row with root", &wire.AdmissionPolicy{AllowedNetworks: []string{"*"}, RunAsUser: "0:0"}, false,
			"acme", "0:0", wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_CLUSTER},
		{"the cluster row back to the ACL default", &wire.AdmissionPolicy{RunAsUser: "65534:65534"}, true,
			"acme", admission.ACLDefaultUser, aclDefault},
	} {
		if got := f.setPolicy(s.policy); got.Removed != s.removed {
			t.Fatalf("%s: removed %v; want %v", s.name, got.Removed, s.removed)
		}
		want(f, s.name, s.tenant, s.user, s.src)
	}
	// Rows equal to either default (early-kept, imgusr) are restored.
	assertRestores(t, f)
	assertRestores(t, old)
}
