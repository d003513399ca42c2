package admission

import (
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
