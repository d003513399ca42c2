package admission

import (
	"slices"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

func TestAllowsNetwork(t *testing.T) {
	def := Default()
	hostOnly := &wire.AdmissionPolicy{AllowedNetworks: []string{"host"}}
	noneOnly := &wire.AdmissionPolicy{}
	for _, tc := range []struct {
		p    *wire.AdmissionPolicy
		n    string
		want bool
	}{
		{def, "", true}, {def, "none", true}, {def, "bridge", true}, {def, "trainnet", true}, {def, "host", false},
		{hostOnly, "host", true}, {hostOnly, "bridge", false}, {hostOnly, "none", true},
		{noneOnly, "none", true}, {noneOnly, "bridge", false},
	} {
		if got := AllowsNetwork(tc.p, tc.n); got != tc.want {
			t.Errorf("AllowsNetwork(%v, %q) = %v; want %v", tc.p.GetAllowedNetworks(), tc.n, got, tc.want)
		}
	}
}

func TestCheckUser(t *testing.T) {
	for u, ok := range map[string]bool{
		"": true, "0": true, "65534": true, "65534:65534": true, "4294967294:0": true,
		"root": false, "1:": false, ":1": false, "1:2:3": false, "-1": false, "4294967295": false, "+1": false, "01": false,
		strings.Repeat("1", MaxUserBytes+1): false,
	} {
		if err := CheckUser(u); (err == nil) != ok {
			t.Errorf("CheckUser(%q) = %v; want ok %v", u, err, ok)
		}
	}
}

func TestNormalizeAndDefault(t *testing.T) {
	p, err := Normalize(&wire.AdmissionPolicy{Tenant: "a", AllowedNetworks: []string{"none", "*", "*"}, AllowedCapabilities: []string{}})
	if err != nil || !IsDefault(p) {
		t.Fatalf("Normalize of the default with none and a duplicate: %v, %v; want the default", p, err)
	}
	in := &wire.AdmissionPolicy{AllowedCapabilities: []string{"CAP_SYS_ADMIN", "NET_ADMIN", "SYS_ADMIN"}}
	p, err = Normalize(in)
	if err != nil || strings.Join(p.GetAllowedCapabilities(), ",") != "NET_ADMIN,SYS_ADMIN" || in.AllowedCapabilities[0] != "CAP_SYS_ADMIN" {
		t.Fatalf("Normalize: %v, %v (input %v); want canonical, sorted, deduplicated, the input untouched", p, err, in)
	}
	for _, tc := range []struct {
		p    *wire.AdmissionPolicy
		want string
	}{
		{&wire.AdmissionPolicy{MaxPids: MaxPids + 1}, "max_pids"},
		{&wire.AdmissionPolicy{MaxPids: 5}, "max_pids 5 is out of range"}, // megaflow-init could not start
		{&wire.AdmissionPolicy{AllowedCapabilities: []string{"FOO_BAR"}}, `"FOO_BAR" is not a Linux capability`},
		{&wire.AdmissionPolicy{AllowedCapabilities: []string{"CAP_ALL"}}, "every capability at once"},
	} {
		if _, err := Normalize(tc.p); !strings.Contains(errString(err), tc.want) || errs.ClassOf(err) != errs.InvalidArgument {
			t.Errorf("Normalize(%v): %v; want InvalidArgument containing %q", tc.p, err, tc.want)
		}
	}
	if p, err := Normalize(&wire.AdmissionPolicy{MaxPids: MinPids, AllowedCapabilities: []string{"WAKE_ALARM", "CAP_BPF"}}); err != nil ||
		strings.Join(p.GetAllowedCapabilities(), ",") != "BPF,WAKE_ALARM" {
		t.Errorf("Normalize at the pids floor with known capabilities: %v, %v", p, err)
	}
}

// Check names the task, field, value and policy, and gives a command that,
// run, allows the task: the policy it sets passes Check. CheckGraph's
// command allows every refused task of the graph at once, and says how
// many there are.
func TestCheckHintAllows(t *testing.T) {
	p := &wire.AdmissionPolicy{Tenant: "t", AllowedNetworks: []string{"*"}, ReadOnlyRootFs: true, MaxPids: 64}
	task := &wire.TaskSpec{Name: "x", Network: "host", Capabilities: []string{"CAP_NET_ADMIN"}}
	e := Check("g/x", task, "t", p, wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT)
	want := `task "g/x": network "host" is not allowed by tenant t's policy (allowed: none, bridge and any named network ("*")); ` +
		"an admin can allow it: megaflow policy set t --allow-network '*' --allow-network host --allow-cap NET_ADMIN --read-only-root --max-pids 64"
	if e == nil || e.Message != want || e.Class != errs.PermissionDenied || Field(e.Reason) != "network" {
		t.Fatalf("Check: %v\nwant %s", e, want)
	}
	p.AllowedNetworks = append(p.AllowedNetworks, "host")
	e = Check("g/x", task, "t", p, wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT)
	if e == nil || !strings.HasSuffix(e.Message, "--allow-cap NET_ADMIN --read-only-root --max-pids 64") || Field(e.Reason) != "capabilities" {
		t.Fatalf("Check after allowing host: %v", e)
	}
	p.AllowedCapabilities = []string{"NET_ADMIN"}
	if e := Check("g/x", task, "t", p, wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT); e != nil {
		t.Fatalf("Check after following the hint: %v", e)
	}

	open := &wire.AdmissionPolicy{Tenant: "t", AllowedNetworks: []string{"*"}}
	tasks := []*wire.TaskSpec{{Name: "ok"}, {Name: "a", Network: "host"}, {Name: "b", Capabilities: []string{"SYS_ADMIN", "NET_ADMIN"}}, {Name: "c", Network: "host"}}
	e = CheckGraph("g", "t", tasks, open, wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT)
	want = `task "g/a": network "host" is not allowed by tenant t's policy (allowed: none, bridge and any named network ("*")); ` +
		"an admin can allow it and the graph's 2 other refused tasks: megaflow policy set t --allow-network '*' --allow-network host --allow-cap NET_ADMIN --allow-cap SYS_ADMIN"
	if e == nil || e.Message != want {
		t.Fatalf("CheckGraph: %v\nwant %s", e, want)
	}
	fixed := &wire.AdmissionPolicy{Tenant: "t", AllowedNetworks: []string{"*", "host"}, AllowedCapabilities: []string{"NET_ADMIN", "SYS_ADMIN"}}
	if e := CheckGraph("g", "t", tasks, fixed, wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT); e != nil {
		t.Fatalf("CheckGraph after following its hint: %v", e)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The effective policy: the tenant's row, else the cluster row, else the
// built-in default in force, which runs containers as the image's user
// without ACLs and as 65534:65534 with them; a row is the default (and is
// removed) only when it equals the default in force. "0:0" is a user
// (root), not the image's.
func TestEffectiveWithAndWithoutACL(t *testing.T) {
	tenantRow := &wire.AdmissionPolicy{Tenant: "t", AllowedNetworks: []string{"*"}, RunAsUser: "0:0"}
	clusterRow := &wire.AdmissionPolicy{AllowedNetworks: []string{"*"}, MaxPids: 64}
	for _, tc := range []struct {
		name            string
		tenant, cluster *wire.AdmissionPolicy
		acl             bool
		wantUser        string
		wantSrc         wire.AdmissionPolicySource
		wantName        string
	}{
		{"no rows, no ACL", nil, nil, false, "", wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_DEFAULT, "the built-in default policy"},
		{"no rows, ACL", nil, nil, true, ACLDefaultUser, wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_DEFAULT_ACL,
			"the built-in default policy for clusters with ACLs"},
		{"cluster row, no ACL", nil, clusterRow, false, "", wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_CLUSTER, "the cluster policy"},
		{"cluster row, ACL: the row's image user", nil, clusterRow, true, "", wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_CLUSTER, "the cluster policy"},
		{"tenant row, no ACL", tenantRow, clusterRow, false, "0:0", wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT, "tenant t's policy"},
		{"tenant row, ACL: root", tenantRow, nil, true, "0:0", wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT, "tenant t's policy"},
	} {
		p, src := Effective(tc.tenant, tc.cluster, tc.acl)
		if p.GetRunAsUser() != tc.wantUser || src != tc.wantSrc || SourceName(src, "t") != tc.wantName {
			t.Errorf("%s: user %q from %v (%q); want %q from %v (%q)", tc.name, p.GetRunAsUser(), src, SourceName(src, "t"), tc.wantUser, tc.wantSrc, tc.wantName)
		}
		// The built-in default with ACLs allows no network but none; the
		// rows here and the default without ACLs allow '*'.
		wantNets := []string{AnyNetwork}
		if tc.tenant == nil && tc.cluster == nil && tc.acl {
			wantNets = nil
		}
		if !slices.Equal(p.GetAllowedNetworks(), wantNets) || len(p.GetAllowedCapabilities()) != 0 {
			t.Errorf("%s: networks %v, capabilities %v; want %v and no capabilities", tc.name, p.GetAllowedNetworks(), p.GetAllowedCapabilities(), wantNets)
		}
	}

	for _, tc := range []struct {
		name             string
		p                *wire.AdmissionPolicy
		isDefault, isACL bool
	}{
		{"the default without ACLs", Default(), true, false},
		{"the default with ACLs", DefaultFor(true), false, true},
		{"root", &wire.AdmissionPolicy{AllowedNetworks: []string{"*"}, RunAsUser: "0:0"}, false, false},
		{"nobody without the group", &wire.AdmissionPolicy{AllowedNetworks: []string{"*"}, RunAsUser: "65534"}, false, false},
		{"nobody with bridge and named networks", &wire.AdmissionPolicy{AllowedNetworks: []string{"*"}, RunAsUser: ACLDefaultUser}, false, false},
		{"nobody, no network (none is always allowed)", &wire.AdmissionPolicy{AllowedNetworks: []string{"none"}, RunAsUser: ACLDefaultUser}, false, true},
		{"nobody, read-only", &wire.AdmissionPolicy{AllowedNetworks: []string{"*"}, RunAsUser: ACLDefaultUser, ReadOnlyRootFs: true}, false, false},
	} {
		n, err := Normalize(tc.p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if IsDefaultFor(n, false) != tc.isDefault || IsDefault(n) != tc.isDefault || IsDefaultFor(n, true) != tc.isACL {
			t.Errorf("%s: IsDefaultFor(false) %v, (true) %v; want %v, %v", tc.name, IsDefaultFor(n, false), IsDefaultFor(n, true), tc.isDefault, tc.isACL)
		}
	}
	if Default().GetRunAsUser() != "" || DefaultFor(false).GetRunAsUser() != "" || !Confines(DefaultFor(true)) {
		t.Fatal("the default without ACLs sets a user, or the one with ACLs does not confine")
	}
	if err := CheckUser("0:0"); err != nil || Flags(&wire.AdmissionPolicy{RunAsUser: "0:0"}) != " --user 0:0" {
		t.Fatalf(`CheckUser("0:0"): %v; Flags: %q; want root accepted and shown`, err, Flags(&wire.AdmissionPolicy{RunAsUser: "0:0"}))
	}
}
