package head_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// Finding 4 of issue 18: the leader's gRPC port black-holed (a TCP proxy
// between the workers and the leader's --grpc-addr stops forwarding, as
// an iptables DROP rule would; Raft and gossip untouched) for 12 s, three
// times the lease and its margin (3 s + 1 s here), while 10 tasks of 16 s
// run on 2 workers, so that they end after it. The lease is renewed
// through gossip while the stream is dead, so the leader re-queues nothing
// and the workers stop nothing: every task succeeds with one attempt.
// Without leases (a 4 s grace, the same time to re-queue a dead worker's
// tasks) every task was killed and run again. (The finding's black hole
// was 20 s with tasks of 30 s: the same assertions, 14 s longer.)
func TestLeaderGRPCBlackholeRestartsNoTask(t *testing.T) {
	if testing.Short() {
		t.Skip("a 12 s fault")
	}
	// It waits out the fault and the tasks, the CPU idle: beside the
	// package's other waiting tests (see internal/testcluster).
	t.Parallel()
	// The scenario needs one leader throughout: a leader that loses its
	// leadership (even to win it back) stops acking renewals, and the
	// workers rightly stop their tasks. On a starved machine Raft itself
	// can lose it; such a try proves nothing either way, so it is made
	// again with a fresh cluster, at most 3 times.
	for try := 1; try <= 3; try++ {
		var held bool
		t.Run(fmt.Sprintf("try%d", try), func(t *testing.T) { held = blackholeOnce(t) })
		if held || t.Failed() {
			return
		}
	}
	t.Fatal("the leader lost its leadership during the black hole in 3 tries of 3: the machine is too loaded for this test to prove anything")
}

// The black hole's length and the tasks' (TestLeaderGRPCBlackholeRestartsNoTask).
const (
	blackholeFault = 12 * time.Second
	blackholeTask  = 16 * time.Second
)

// blackholeOnce runs the scenario on a fresh cluster and reports whether
// the leader held its leadership (one term) throughout; when it did not,
// the try is skipped, not failed.
func blackholeOnce(t *testing.T) bool {
	// Raft's production timing, not the test cluster's fast one (a 300 ms
	// leader lease): what is tested is the workers' lease across a dead
	// gRPC stream, and a leader that steps down on a busy machine makes
	// the try prove nothing.
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) { cfg.Fast = false }})
	leader := c.WaitLeader(30 * time.Second)
	r := c.Members[leader].Head().Node().Raft()
	term := r.CurrentTerm()
	proxy := testcluster.NewProxy(t, c.Members[leader].GRPCAddr)
	for range 2 {
		rt := fake.New(nil)
		rt.Default(fake.Behavior{Duration: blackholeTask, Output: "MEGAFLOW_RESULT {\"ok\": true}\n"})
		c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Configure: func(cfg *worker.Config) {
			cfg.Heads = []string{proxy.Addr()} // the leader's port, only through the proxy
		}})
	}
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := cl.Submit(ctx, flatGraph("g", 10)); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 30*time.Second, "10 tasks running", func() bool {
		n := 0
		for _, task := range allTasks(ctx, t, cl, "g") {
			if task.State == client.TaskRunning {
				n++
			}
		}
		return n == 10
	})
	proxy.Block()
	time.Sleep(blackholeFault) // the fault's length, not a synchronization
	proxy.Unblock()
	if l := c.WaitLeader(10 * time.Second); l != leader || r.CurrentTerm() != term {
		t.Skipf("the leader changed (head %d term %d to head %d term %d): this try proves nothing", leader, term, l, r.CurrentTerm())
		return false
	}
	g := waitGraph(ctx, t, cl, "g")
	if g.State != client.GraphSucceeded || g.Counts.GetSucceeded() != 10 {
		t.Fatalf("graph %v", g)
	}
	if r.CurrentTerm() != term {
		t.Skipf("the leader lost its leadership (term %d to %d) before the tasks ended: this try proves nothing", term, r.CurrentTerm())
		return false
	}
	restarted := 0
	for _, task := range allTasks(ctx, t, cl, "g") {
		if len(task.Attempts) != 1 {
			restarted++
			t.Errorf("task %s ran %d attempts: %v", task.Id, len(task.Attempts), task.Attempts)
		}
	}
	if restarted > 0 {
		t.Fatalf("%d of 10 running tasks were restarted by a %v black hole on the leader's gRPC port", restarted, blackholeFault)
	}
	return true
}
