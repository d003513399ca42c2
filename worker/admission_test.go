package worker

import (
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/admission"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/worker/attempt"
)

// An assignment whose spec asks for more than the admission policy
// attached to it fails, not retryable, with a reason naming the field,
// the value and the policy, and starts no container; one within it starts
// with the policy's user, read-only root and pids limit; one without a
// policy (a leader below rules 5) starts as before.
func TestWorkerEnforcesAdmissionPolicy(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	startWorker(t, testConfig(t, rt, t.TempDir(), head.addr))
	policy := &wire.AdmissionPolicy{AllowedNetworks: []string{"*"}, AllowedCapabilities: []string{"NET_ADMIN"},
		RunAsUser: "65534:65534", ReadOnlyRootFs: true, MaxPids: 64}
	send := func(id, network string, caps []string, p *wire.AdmissionPolicy) {
		s := spec("busybox", "hang")
		s.Network, s.Capabilities = network, caps
		m := assignMsg(id, 1, s)
		m.GetAssign().Tenant = "team-a"
		m.GetAssign().AdmissionPolicy = p
		m.GetAssign().AdmissionSource = wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_CLUSTER
		head.send(m)
	}
	for _, tc := range []struct {
		id, network string
		caps        []string
		want        []string
	}{
		{"g/host", "host", nil, []string{`task "g/host"`, `network "host"`, "the cluster policy"}},
		{"g/cap", "bridge", []string{"SYS_ADMIN"}, []string{`task "g/cap"`, `capabilities "SYS_ADMIN"`, "the cluster policy", "--allow-cap SYS_ADMIN"}},
	} {
		send(tc.id, tc.network, tc.caps, policy)
		e := head.waitEvent(tc.id, 1, kindFailed)
		for _, w := range append(tc.want, "worker refused the start") {
			if !strings.Contains(e.GetReason(), w) {
				t.Fatalf("%s: reason %q; want it to contain %q", tc.id, e.GetReason(), w)
			}
		}
		if !e.GetNotRetryable() {
			t.Fatalf("%s: the refusal is retryable; want not", tc.id)
		}
		if _, ok := rt.startSpec(ContainerName("w1", attempt.Key{TaskID: tc.id, Attempt: 1})); ok {
			t.Fatalf("%s: a container was started beyond the policy", tc.id)
		}
	}

	send("g/ok", "trainnet", []string{"NET_ADMIN"}, policy)
	head.waitEvent("g/ok", 1, kindStarted)
	s, ok := rt.startSpec(ContainerName("w1", attempt.Key{TaskID: "g/ok", Attempt: 1}))
	if !ok || s.User != "65534:65534" || !s.ReadOnlyRootfs || s.PidsLimit != 64 || s.Network != "trainnet" {
		t.Fatalf("the container within the policy: %+v; want user 65534:65534, a read-only root, pids 64, network trainnet", s)
	}
	send("g/old", "host", []string{"SYS_ADMIN"}, nil)
	head.waitEvent("g/old", 1, kindStarted)
	if s, _ := rt.startSpec(ContainerName("w1", attempt.Key{TaskID: "g/old", Attempt: 1})); s.User != "" || s.ReadOnlyRootfs || s.PidsLimit != 0 {
		t.Fatalf("the container without a policy: %+v; want it unconfined", s)
	}
}

// processRT is the fake runtime under the process runtime's name: the
// worker treats it as a runtime without isolation.
type processRT struct{ *fakeRT }

func (processRT) Name() string { return "process" }

// A worker whose runtime cannot confine a container (the process runtime)
// refuses an assignment whose policy asks it to, not retryable, saying
// what it cannot enforce; a policy that confines nothing runs, and so does
// one under the built-in default for clusters with ACLs, whose user the
// runtime does not apply (an admin's row with the same user is refused).
func TestProcessWorkerRefusesConfinement(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newFakeRT(t)
	startWorker(t, testConfig(t, processRT{rt}, t.TempDir(), head.addr))
	m := assignMsg("g/ro", 1, spec("busybox", "hang"))
	m.GetAssign().Tenant = "team-a"
	m.GetAssign().AdmissionPolicy = &wire.AdmissionPolicy{Tenant: "team-a", AllowedNetworks: []string{"*"}, ReadOnlyRootFs: true}
	m.GetAssign().AdmissionSource = wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT
	head.send(m)
	e := head.waitEvent("g/ro", 1, kindFailed)
	for _, w := range []string{"tenant team-a's policy", "--read-only-root", "process runtime", "cannot enforce"} {
		if !strings.Contains(e.GetReason(), w) {
			t.Fatalf("reason %q; want it to contain %q", e.GetReason(), w)
		}
	}
	if !e.GetNotRetryable() {
		t.Fatal("the refusal is retryable; want not")
	}
	ok := assignMsg("g/plain", 1, spec("busybox", "hang"))
	ok.GetAssign().AdmissionPolicy = &wire.AdmissionPolicy{AllowedNetworks: []string{"*"}}
	head.send(ok)
	head.waitEvent("g/plain", 1, kindStarted)

	nobody := func(id string, src wire.AdmissionPolicySource) {
		m := assignMsg(id, 1, spec("busybox", "hang"))
		m.GetAssign().Tenant = "team-a"
		m.GetAssign().AdmissionPolicy = admission.DefaultFor(true)
		m.GetAssign().AdmissionSource = src
		head.send(m)
	}
	nobody("g/acl-default", wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_DEFAULT_ACL)
	head.waitEvent("g/acl-default", 1, kindStarted)
	if s, _ := rt.startSpec(ContainerName("w1", attempt.Key{TaskID: "g/acl-default", Attempt: 1})); s.User != "" {
		t.Fatalf("the process under the built-in default for clusters with ACLs: user %q; want none (the runtime cannot apply it)", s.User)
	}
	nobody("g/acl-row", wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_CLUSTER)
	if e := head.waitEvent("g/acl-row", 1, kindFailed); !strings.Contains(e.GetReason(), "the cluster policy sets --user 65534:65534") {
		t.Fatalf("a cluster row with a user on the process runtime: reason %q; want the refusal naming it", e.GetReason())
	}
}

// A persistent session's container keeps the confinement it was started
// with: once the tenant's policy confines containers (a user here), a
// later task of the session is refused, not retryable, saying to start a
// new session, instead of running in the unconfined container; a task of
// a new session gets a confined container.
func TestSessionKeepsItsConfinement(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newPoolRT(t)
	startWorker(t, poolConfig(t, rt, head, 3))
	send := func(id, session string, p *wire.AdmissionPolicy) {
		m := assignMsg(id, 1, pspec(session, "true"))
		m.GetAssign().Tenant = "team-k"
		m.GetAssign().AdmissionPolicy = p
		m.GetAssign().AdmissionSource = wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT
		head.send(m)
	}
	open := &wire.AdmissionPolicy{Tenant: "team-k", AllowedNetworks: []string{"*"}}
	confined := &wire.AdmissionPolicy{Tenant: "team-k", AllowedNetworks: []string{"*"}, RunAsUser: "65534:65534"}
	send("g/s1", "one", open)
	head.waitEvent("g/s1", 1, kindExited)
	send("g/s2", "one", confined)
	e := head.waitEvent("g/s2", 1, kindFailed)
	for _, w := range []string{"session container", `user=""`, `user="65534:65534"`, "new session"} {
		if !strings.Contains(e.GetReason(), w) {
			t.Fatalf("reason %q; want it to contain %q", e.GetReason(), w)
		}
	}
	if !e.GetNotRetryable() {
		t.Fatal("the refusal is retryable; want not")
	}
	if rt.execIn("g/s2") != "" {
		t.Fatal("g/s2 ran in the session's unconfined container")
	}
	send("g/t1", "two", confined)
	head.waitEvent("g/t1", 1, kindExited)
	if c := rt.execIn("g/t1"); c == "" || c == rt.execIn("g/s1") {
		t.Fatalf("g/t1 of a new session ran in %q; want a new container", c)
	}
}
