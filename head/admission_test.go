package head_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/admission"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/fake"
)

// A tenant without a policy gets the built-in default: a `network: host`
// task and a `capabilities: [SYS_ADMIN]` task are refused at submission
// (PERMISSION_DENIED naming the task, the field and the value; counted in
// megaflow_admission_refusals_total by field), and so is a host-network
// sandbox; once `policy set` allows
// them both graphs run. A cluster row's confinement reaches the worker's
// container (user, read-only root, pids), and policies are listed and
// read back with where they come from.
func TestAdmissionPolicyRefusesThenAllows(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{Configure: withHTTP})
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: 10 * time.Millisecond})
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	graph := func(id, tenant, network string, caps ...string) *client.GraphSpec {
		g := flatGraph(id, 1)
		g.Tenant = tenant
		g.Tasks[0].Network, g.Tasks[0].Capabilities = network, caps
		return g
	}
	host, sysAdmin := graph("host", "team-a", "host"), graph("cap", "team-a", "", "SYS_ADMIN")
	for _, tc := range []struct {
		g      *client.GraphSpec
		want   []string
		reason string
	}{
		{host, []string{`task "host/t000"`, `network "host"`, "the built-in default policy", "megaflow policy set team-a --allow-network '*' --allow-network host"}, admission.ReasonNetwork},
		{sysAdmin, []string{`task "cap/t000"`, `capabilities "SYS_ADMIN"`, "the built-in default policy", "--allow-cap SYS_ADMIN"}, admission.ReasonCapability},
	} {
		_, err := cl.Submit(ctx, tc.g)
		if !errors.Is(err, errs.ErrPermissionDenied) || errs.ReasonOf(err) != tc.reason {
			t.Fatalf("submit %s: %v (reason %q); want PERMISSION_DENIED with reason %s", tc.g.Id, err, errs.ReasonOf(err), tc.reason)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("submit %s: %q; want it to contain %q", tc.g.Id, err, w)
			}
		}
	}
	// A sandbox goes through the same check.
	if _, err := cl.CreateSandbox(ctx, client.SandboxSpec{Tenant: "team-c", Image: "busybox", Network: "host"}); !errors.Is(err, errs.ErrPermissionDenied) ||
		!strings.Contains(err.Error(), `network "host"`) {
		t.Fatalf("a host-network sandbox: %v; want PERMISSION_DENIED naming the network", err)
	}
	var refusals float64
	for _, m := range c.Running() {
		f := scrape(t, m)
		refusals += value(f, "megaflow_admission_refusals_total", "field", "network") + value(f, "megaflow_admission_refusals_total", "field", "capabilities")
	}
	if refusals != 3 {
		t.Fatalf("megaflow_admission_refusals_total on all heads: %v; want 3", refusals)
	}
	if p, src, err := cl.GetAdmissionPolicy(ctx, "team-a", client.ReadOptions{RequireLeader: true}); err != nil || src != client.AdmissionFromDefault ||
		strings.Join(p.GetAllowedNetworks(), ",") != "*" {
		t.Fatalf("team-a's policy: %v from %v, %v; want the default", p, src, err)
	}

	if _, removed, err := cl.SetAdmissionPolicy(ctx, &client.AdmissionPolicy{Tenant: "team-a",
		AllowedNetworks: []string{"*", "host"}, AllowedCapabilities: []string{"CAP_SYS_ADMIN"}}); err != nil || removed {
		t.Fatalf("set team-a's policy: removed %v, %v", removed, err)
	}
	for _, g := range []*client.GraphSpec{host, sysAdmin} {
		if _, err := cl.Submit(ctx, g); err != nil {
			t.Fatalf("submit %s once allowed: %v", g.Id, err)
		}
		if got := waitGraph(ctx, t, cl, g.Id); got.State != client.GraphSucceeded {
			t.Fatalf("graph %s: %v", g.Id, got)
		}
	}
	if p, src, err := cl.GetAdmissionPolicy(ctx, "team-a", client.ReadOptions{RequireLeader: true}); err != nil || src != client.AdmissionFromTenant ||
		strings.Join(p.GetAllowedCapabilities(), ",") != "SYS_ADMIN" || p.GetModifyIndex() == 0 {
		t.Fatalf("team-a's policy: %v from %v, %v; want its row, SYS_ADMIN", p, src, err)
	}

	// The cluster row confines team-b's containers.
	if _, _, err := cl.SetClusterAdmissionPolicy(ctx, &client.AdmissionPolicy{AllowedNetworks: []string{"*"},
		RunAsUser: "65534:65534", ReadOnlyRootFs: true, MaxPids: 64}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Submit(ctx, graph("confined", "team-b", "")); err != nil {
		t.Fatal(err)
	}
	waitGraph(ctx, t, cl, "confined")
	found := false
	for _, call := range rt.Calls() {
		if call.Op == "Start" && strings.Contains(call.Spec.Name, "confined") {
			found = true
			if call.Spec.User != "65534:65534" || !call.Spec.ReadOnlyRootfs || call.Spec.PidsLimit != 64 {
				t.Fatalf("the confined task's container: user %q, read-only %v, pids %d; want 65534:65534, true, 64",
					call.Spec.User, call.Spec.ReadOnlyRootfs, call.Spec.PidsLimit)
			}
		}
	}
	if !found {
		t.Fatal("no container started for graph confined")
	}
	ps, err := cl.ListAdmissionPolicies(ctx, client.ReadOptions{RequireLeader: true})
	if err != nil || len(ps) != 2 || ps[0].GetTenant() != "" || ps[1].GetTenant() != "team-a" {
		t.Fatalf("policies %v, %v; want the cluster row, then team-a's", ps, err)
	}

	// Bad input changes nothing.
	for _, p := range []*client.AdmissionPolicy{{Tenant: "team-a", RunAsUser: "root"}, {Tenant: "team-a", MaxPids: -1}, {}} {
		if _, _, err := cl.SetAdmissionPolicy(ctx, p); !errors.Is(err, errs.ErrInvalidArgument) {
			t.Fatalf("set %v: %v; want INVALID_ARGUMENT", p, err)
		}
	}
	if _, err := cl.Submit(ctx, graph("bridge-ok", "team-a", "bridge")); err != nil {
		t.Fatalf("team-a's policy after refused changes: %v", err)
	}
}
