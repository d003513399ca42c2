package head_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/cluster"
	"github.com/megaflow/megaflow/runtime/fake"
)

// TestHeadRunsOnInMemoryRaft: a head given hashicorp/raft's in-memory
// transport and stores (Config.RaftTransport and the stores) runs a graph
// to the end with no Raft socket and no Raft file, and a head killed and
// started again on the same stores (a new transport at the same address)
// comes back with the graph.
func TestHeadRunsOnInMemoryRaft(t *testing.T) {
	t.Parallel() // it waits for its cluster (see internal/testcluster)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	const addr = raft.ServerAddress("inmem-h1")
	dir := t.TempDir()
	c, err := cluster.Start(ctx, cluster.Options{Dir: dir, Heads: 1, ConfigureHead: func(_ int, cfg *head.Config) {
		_, tr := raft.NewInmemTransport(addr) // Raft closes it when the head stops
		cfg.RaftTransport, cfg.RaftLogStore, cfg.RaftStableStore, cfg.RaftSnapshotStore = tr, store, store, snaps
		cfg.RaftAddr = "not used"
		cfg.Fast = true
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	m := c.Members[0]
	if m.RaftAddr != string(addr) {
		t.Fatalf("head's Raft address %q, want the in-memory %q", m.RaftAddr, addr)
	}
	if _, err := os.Stat(filepath.Join(m.DataDir, "raft")); !os.IsNotExist(err) {
		t.Fatalf("%s/raft exists (stat: %v): the head wrote Raft files", m.DataDir, err)
	}
	if _, err := c.AddWorker(cluster.WorkerOptions{Runtime: fake.New(nil)}); err != nil {
		t.Fatal(err)
	}
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Submit(ctx, flatGraph("inmem", 3)); err != nil {
		t.Fatal(err)
	}
	if g, err := cl.Wait(ctx, "inmem"); err != nil || g.State != client.GraphSucceeded {
		t.Fatalf("graph: %v, %v; want it succeeded", g, err)
	}
	applied := m.Head().AppliedIndex()

	c.Kill(0)
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitLeader(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	g, _, err := cl.GetGraph(ctx, "inmem", client.ReadOptions{MinIndex: applied, RequireLeader: true})
	if err != nil || g.State != client.GraphSucceeded || g.Counts.GetSucceeded() != 3 {
		t.Fatalf("graph after the restart on the same stores: %v, %v; want 3 succeeded", g, err)
	}
}
