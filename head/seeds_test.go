package head_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/gossip"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// A head restarted with a --join list that reaches nobody (only its own
// address) finds the other heads again through the gossip addresses it
// saved while it ran.
func TestRestartedHeadRejoinsThroughSavedSeeds(t *testing.T) {
	t.Parallel() // it waits for gossip and a downtime (see internal/testcluster)
	var h1Starts atomic.Int32
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) {
		if cfg.NodeID == "h1" && h1Starts.Add(1) > 1 {
			cfg.Join = []string{cfg.GossipAddr} // as a tour's `--join <its own address>` would
		}
	}})
	testcluster.WaitFor(t, 30*time.Second, "h1 to save the other heads' gossip addresses",
		seedsSaved(c.Members[0].DataDir, c.Members[1].GossipAddr, c.Members[2].GossipAddr))
	c.Kill(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Down long enough for the others to stop probing it: nobody reaches
	// out to the restarted h1, it must find them.
	c2, err := client.Dial(ctx, []string{c.Members[1].GRPCAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	testcluster.WaitFor(t, 30*time.Second, "h2 to see h1 dead in gossip", func() bool {
		st, err := c2.ClusterStatus(ctx)
		if err != nil || st.GetHeadId() != "h2" {
			return false
		}
		for _, h := range st.GetHeads() {
			if h.GetId() == "h1" {
				return h.GetStatus() == "dead"
			}
		}
		return false
	})
	// Gossip keeps talking to a dead member for a while (GossipToTheDead,
	// 2 s in the test profile): a member back within it is found by the
	// others. Staying down longer is the scenario under test, so this
	// sleep models downtime; nothing is waited for.
	time.Sleep(3 * time.Second)
	c.Restart(0)
	cl, err := client.Dial(ctx, []string{c.Members[0].GRPCAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	testcluster.WaitFor(t, 30*time.Second, "the restarted h1 to see h2 and h3 alive in gossip", func() bool {
		st, err := cl.ClusterStatus(ctx)
		if err != nil || st.GetHeadId() != "h1" {
			return false
		}
		alive := 0
		for _, h := range st.GetHeads() {
			if h.GetId() != "h1" && h.GetStatus() == "alive" {
				alive++
			}
		}
		return alive == 2
	})
}

// A worker restarted with a --join list that reaches no head (here an
// address nobody listens on) finds the cluster through the heads' gossip
// addresses it saved while it ran.
func TestRestartedWorkerRejoinsThroughSavedSeeds(t *testing.T) {
	t.Parallel() // it waits for gossip (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	var starts atomic.Int32
	dead := testcluster.FreeAddr(t) // nobody listens there
	wm := c.AddWorker(testcluster.WorkerOptions{Runtime: fake.New(nil), Configure: func(cfg *worker.Config) {
		if starts.Add(1) > 1 {
			cfg.Join, cfg.Heads = []string{dead}, nil
		}
	}})
	var heads []string
	for _, m := range c.Members {
		heads = append(heads, m.GossipAddr)
	}
	testcluster.WaitFor(t, 30*time.Second, "w1 to save the heads' gossip addresses", seedsSaved(wm.DataDir, heads...))
	c.StopWorker(0)
	c.RestartWorker(0)
	testcluster.WaitFor(t, 30*time.Second, "the restarted w1 to reach the leader", func() bool {
		return wm.Worker().Leader() != ""
	})
}

// seedsSaved reports whether the seeds file in dataDir (gossip.SaveSeeds)
// holds every one of addrs.
func seedsSaved(dataDir string, addrs ...string) func() bool {
	return func() bool {
		saved := gossip.LoadSeeds(dataDir, "")
		for _, a := range addrs {
			if !slices.Contains(saved, a) {
				return false
			}
		}
		return true
	}
}
