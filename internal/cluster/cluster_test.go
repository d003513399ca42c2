package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

func TestStartRefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no dir", Options{Heads: 1}, "Options.Dir is required"},
		{"too many heads", Options{Dir: t.TempDir(), Heads: 8}, "want 1 to 7"},
		{"negative heads", Options{Dir: t.TempDir(), Heads: -1}, "want 1 to 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Start(context.Background(), tc.o)
			if err == nil {
				c.Stop()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// aliveWorkers lists the workers the leader holds ALIVE.
func aliveWorkers(ctx context.Context, cl *client.Client) map[string]bool {
	ws, err := cl.ListWorkers(ctx, client.ReadOptions{RequireLeader: true})
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	for _, w := range ws {
		if w.GetStatus() == wire.WorkerStatus_WORKER_STATUS_ALIVE {
			out[w.GetInfo().GetId()] = true
		}
	}
	return out
}

// TestOneHeadOneWorker is `megaflow up`'s shape: a head whose id,
// directory and addresses (port 0) the caller chose, a worker with a
// chosen id; the members report the bound addresses, the worker comes up
// alive, a killed worker comes back under the same id, and Stop returns
// the head it stopped.
func TestOneHeadOneWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, err := Start(ctx, Options{Dir: dir, Heads: 1, ConfigureHead: func(i int, cfg *head.Config) {
		cfg.NodeID, cfg.DataDir = "solo", dir+"/head"
		cfg.GRPCAddr, cfg.RaftAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
		cfg.Fast = true
	}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop()
		}
	}()
	m := c.Members[0]
	if m.ID != "solo" || m.DataDir != dir+"/head" || strings.HasSuffix(m.GRPCAddr, ":0") || strings.HasSuffix(m.GossipAddr, ":0") {
		t.Fatalf("member %+v: want id solo, dir %s/head and bound ports", m, dir)
	}
	wm, err := c.AddWorker(WorkerOptions{ID: "wk", Runtime: fake.New(nil), Capacity: worker.Capacity{CPUMillis: 1000, MemoryBytes: 1 << 30},
		Configure: func(cfg *worker.Config) { cfg.Fast = true; cfg.HeartbeatInterval = 200 * time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	if wm.DataDir != dir+"/wk" || wm.Worker() == nil {
		t.Fatalf("worker slot %+v: want its directory under %s and a running worker", wm, dir)
	}
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := WaitUntil(ctx, time.Minute, "worker wk alive", func() bool { return aliveWorkers(ctx, cl)["wk"] }); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddWorker(WorkerOptions{ID: "wk", Runtime: fake.New(nil)}); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Fatalf("a second worker wk: %v, want refused", err)
	}
	if err := c.RestartWorker(0); err == nil || !strings.Contains(err.Error(), "is running") {
		t.Fatalf("restarting a running worker: %v, want refused", err)
	}
	if err := c.Restart(0); err == nil || !strings.Contains(err.Error(), "is running") {
		t.Fatalf("restarting a running head: %v, want refused", err)
	}
	// A killed head comes back on the ports it had, although its config
	// asks for port 0.
	grpcAddr, gossipAddr := m.GRPCAddr, m.GossipAddr
	c.Kill(0)
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	if m.GRPCAddr != grpcAddr || m.GossipAddr != gossipAddr || m.Head().GRPCAddr() != grpcAddr {
		t.Fatalf("restarted head at %s (gossip %s), was %s (%s)", m.GRPCAddr, m.GossipAddr, grpcAddr, gossipAddr)
	}
	if _, err := c.WaitLeader(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	workerGossip := wm.GossipAddr
	c.KillWorker(0)
	if wm.Worker() != nil {
		t.Fatal("a killed worker still runs")
	}
	if err := c.RestartWorker(0); err != nil {
		t.Fatal(err)
	}
	if err := WaitUntil(ctx, time.Minute, "worker wk alive after its restart", func() bool {
		return wm.Worker() != nil && aliveWorkers(ctx, cl)["wk"]
	}); err != nil {
		t.Fatal(err)
	}
	if wm.GossipAddr != workerGossip {
		t.Fatalf("restarted worker gossips at %s, was %s", wm.GossipAddr, workerGossip)
	}
	got := c.Stop()
	stopped = true
	if len(got) != 1 || got[0].Member != m || got[0].Err != nil || m.Head() != nil {
		t.Fatalf("Stop returned %+v: want the one head, stopped cleanly", got)
	}
}
