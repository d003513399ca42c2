package head_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/fake"
)

// warmOf counts worker m's warm containers of image that no task uses.
func warmOf(m *testcluster.WorkerMember, image string) int {
	w := m.Worker()
	if w == nil {
		return -1
	}
	n := 0
	for _, p := range w.Pool() {
		if p.Image == image && !p.Busy {
			n++
		}
	}
	return n
}

// A pre-warm target set through the API makes the matching workers (only
// those) keep that many warm containers; it is in the table, so after the
// leader dies and a matching worker restarts (losing its warm containers)
// the new leader has it warmed again; persistent tasks of the target's
// image then run in those containers without starting new ones. Bad
// targets are refused.
func TestPoolWarmThroughTheAPI(t *testing.T) {
	t.Parallel() // it waits for its cluster (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	rtA := fake.New(nil)
	rtA.Default(fake.Behavior{Duration: time.Hour}) // keepers idle until removed
	rtA.OnCommand("/eval", fake.Behavior{Duration: time.Millisecond})
	rtB := fake.New(nil)
	rtB.Default(fake.Behavior{Duration: time.Hour})
	wa := c.AddWorker(testcluster.WorkerOptions{Runtime: rtA, Labels: map[string]string{"zone": "a"}})
	wb := c.AddWorker(testcluster.WorkerOptions{Runtime: rtB, Labels: map[string]string{"zone": "b"}})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, bad := range []*client.PoolTarget{
		{Image: "swe/django:1", Size: 65},
		{Image: "swe/django:1", Size: 1, Tenant: "../x"},
		{Image: "swe/django:1", Size: 1, MemoryBytes: 100 << 50},
		{Image: "swe/django:1", Size: 1, CpuMillis: 999_999_999},
	} {
		if _, err := cl.PoolWarm(ctx, bad); errs.ClassOf(err) != errs.InvalidArgument {
			t.Fatalf("PoolWarm(%v): err = %v, want InvalidArgument (a target no task could use)", bad, err)
		}
	}
	if _, err := cl.PoolWarm(ctx, &client.PoolTarget{Image: "swe/django:1", Size: 3, WorkerSelector: map[string]string{"zone": "a"}}); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 30*time.Second, "3 warm containers on w1", func() bool { return warmOf(wa, "swe/django:1") == 3 })
	if n := warmOf(wb, "swe/django:1"); n != 0 {
		t.Fatalf("w2 (zone b) has %d warm containers; want none", n)
	}

	// The leader dies; the worker restarts and removes its old containers.
	c.Kill(c.WaitLeader(30 * time.Second))
	c.KillWorker(0)
	c.WaitLeader(30 * time.Second)
	c.RestartWorker(0)
	testcluster.WaitFor(t, 60*time.Second, "3 warm containers on the restarted w1", func() bool { return warmOf(wa, "swe/django:1") == 3 })
	ts, err := cl.PoolList(ctx, client.ReadOptions{RequireLeader: true})
	if err != nil || len(ts) != 1 || ts[0].GetSize() != 3 || ts[0].GetTenant() != "default" {
		t.Fatalf("PoolList = %v, %v", ts, err)
	}

	// Persistent tasks of the image use the warm containers.
	starts := rtA.CallCount("Start")
	g := &client.GraphSpec{Id: "warm"}
	for i := range 3 {
		g.Tasks = append(g.Tasks, &client.TaskSpec{Name: fmt.Sprintf("t%d", i), Image: "swe/django:1", Command: []string{"/eval"},
			Mode: client.ModePersistent, NodeSelector: map[string]string{"zone": "a"}})
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	if got := waitGraph(ctx, t, cl, "warm"); got.State != client.GraphSucceeded {
		t.Fatalf("graph %v", got)
	}
	if n := rtA.CallCount("Start") - starts; n != 0 {
		t.Fatalf("%d containers started for persistent tasks; want 0 (the warm ones are used)", n)
	}

	// Size 0 removes the target.
	if _, err := cl.PoolWarm(ctx, &client.PoolTarget{Image: "swe/django:1"}); err != nil {
		t.Fatal(err)
	}
	if ts, err := cl.PoolList(ctx, client.ReadOptions{RequireLeader: true}); err != nil || len(ts) != 0 {
		t.Fatalf("after removal PoolList = %v, %v", ts, err)
	}
}

// Under a policy that confines containers (a cluster row with a user, as
// the built-in default for clusters with ACLs does) the leader sends each
// pre-warm target with its tenant's policy, so the warm containers run as
// that user and the tenant's persistent tasks, whose pool key includes the
// user, use them instead of starting new ones.
func TestPoolWarmUnderAConfiningPolicy(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: time.Hour})
	rt.OnCommand("/eval", fake.Behavior{Duration: time.Millisecond})
	w := c.AddWorker(testcluster.WorkerOptions{Runtime: rt})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, _, err := cl.SetClusterAdmissionPolicy(ctx, &client.AdmissionPolicy{AllowedNetworks: []string{"*"}, RunAsUser: "65534:65534"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PoolWarm(ctx, &client.PoolTarget{Image: "swe/django:1", Size: 2}); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 30*time.Second, "2 warm containers", func() bool { return warmOf(w, "swe/django:1") == 2 })
	for _, call := range rt.Calls() {
		if call.Op == "Start" && call.Spec.User != "65534:65534" {
			t.Fatalf("a warm container started as user %q; want 65534:65534 (the tenant's policy)", call.Spec.User)
		}
	}
	starts := rt.CallCount("Start")
	g := &client.GraphSpec{Id: "warm"}
	for i := range 2 {
		g.Tasks = append(g.Tasks, &client.TaskSpec{Name: fmt.Sprintf("t%d", i), Image: "swe/django:1", Command: []string{"/eval"}, Mode: client.ModePersistent})
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	if got := waitGraph(ctx, t, cl, "warm"); got.State != client.GraphSucceeded {
		t.Fatalf("graph %v", got)
	}
	if n := rt.CallCount("Start") - starts; n != 0 {
		t.Fatalf("%d containers started for persistent tasks under the policy; want 0 (the warm ones, started under it, are used)", n)
	}
}
