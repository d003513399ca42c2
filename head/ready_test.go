package head_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/cluster"
)

// appendGate holds the AppendEntries requests that carry entries or a
// commit index (not heartbeats) on their way to one Raft address while it
// is closed: the follower then hears from its leader only by heartbeat, as
// a restarted head does while the leader's replication to it is still
// backing off or busy.
type appendGate struct {
	mu     sync.Mutex
	target raft.ServerAddress
	open   chan struct{} // closed when the gate opens
}

func newAppendGate() *appendGate {
	g := &appendGate{open: make(chan struct{})}
	close(g.open)
	return g
}

// hold closes the gate for target.
func (g *appendGate) hold(target raft.ServerAddress) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.target, g.open = target, make(chan struct{})
}

// release opens the gate.
func (g *appendGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// wait blocks a request to target while the gate is closed for it, 30 s
// at most.
func (g *appendGate) wait(target raft.ServerAddress) {
	g.mu.Lock()
	open, held := g.open, g.target == target
	g.mu.Unlock()
	if !held {
		return
	}
	select {
	case <-open:
	case <-time.After(30 * time.Second):
	}
}

// gatedTransport is a TCP transport (without pipelining, as the heads run
// it) whose AppendEntries go through gate.
type gatedTransport struct {
	*raft.NetworkTransport
	gate *appendGate
}

func (t gatedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	heartbeat := args.PrevLogEntry == 0 && args.PrevLogTerm == 0 && len(args.Entries) == 0 && args.LeaderCommitIndex == 0
	if !heartbeat {
		t.gate.wait(target)
	}
	return t.NetworkTransport.AppendEntries(id, target, args, resp)
}

// TestReadyWaitsForTheLeadersCommitIndexAfterRestart: a follower killed
// while the cluster commits, and restarted, is not ready (/readyz) while
// it has heard its leader only by heartbeat: Raft's commit index is 0
// after a restart until an AppendEntries with the leader's commit index
// arrives, and ready must not compare the applied index with that. Once
// replication reaches it, it is ready with the leader's commit index
// applied. Before the fix, Ready answered nil at the first heartbeat (the
// soak's /readyz at 2.7 s with the commit index applied at 10.0 s).
func TestReadyWaitsForTheLeadersCommitIndexAfterRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	gate := newAppendGate()
	var mu sync.Mutex
	addrs := map[int]string{}
	c, err := cluster.Start(ctx, cluster.Options{Dir: t.TempDir(), Heads: 3, ConfigureHead: func(i int, cfg *head.Config) {
		mu.Lock()
		defer mu.Unlock()
		addr := addrs[i]
		if addr == "" {
			var err error
			if addr, err = cluster.FreeAddr(); err != nil {
				t.Errorf("free address: %v", err)
				return
			}
			addrs[i] = addr
		}
		nt, err := raft.NewTCPTransportWithConfig(addr, nil, &raft.NetworkTransportConfig{MaxPool: 3, Timeout: 10 * time.Second, MaxRPCsInFlight: 1, Logger: hclog.NewNullLogger()})
		if err != nil {
			t.Errorf("raft transport on %s: %v", addr, err)
			return
		}
		cfg.RaftTransport = gatedTransport{NetworkTransport: nt, gate: gate}
		cfg.RaftAddr = ""
		cfg.Fast = true
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Submit(ctx, flatGraph("before", 5)); err != nil {
		t.Fatal(err)
	}
	l, err := c.WaitLeader(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f := (l + 1) % 3
	c.Kill(f)
	if _, err := cl.Submit(ctx, flatGraph("while-down", 5)); err != nil {
		t.Fatal(err)
	}
	leader := c.Members[l].Head()
	commit := leader.Node().Stats().CommitIndex

	gate.hold(raft.ServerAddress(c.Members[f].RaftAddr))
	defer gate.release()
	if err := c.Restart(f); err != nil {
		t.Fatal(err)
	}
	fh := c.Members[f].Head()
	if err := cluster.WaitUntil(ctx, 30*time.Second, "the restarted follower to hear of its leader (heartbeats)", func() bool {
		return fh.Node().Stats().LeaderID != ""
	}); err != nil {
		t.Fatal(err)
	}
	if applied := fh.AppliedIndex(); applied >= commit {
		t.Fatalf("restarted follower applied %d before any AppendEntries reached it; want below the leader's commit index %d (the test's premise)", applied, commit)
	}
	if err := fh.Ready(); err == nil {
		t.Fatalf("restarted follower is ready with applied index %d, behind the leader's commit index %d, having heard its leader only by heartbeat", fh.AppliedIndex(), commit)
	} else {
		t.Logf("before replication reaches it: %v", err)
	}

	gate.release()
	if err := cluster.WaitUntil(ctx, 60*time.Second, "the restarted follower to be ready", func() bool { return fh.Ready() == nil }); err != nil {
		t.Fatal(err)
	}
	if applied := fh.AppliedIndex(); applied < commit {
		t.Fatalf("restarted follower ready with applied index %d, below the leader's commit index %d at the restart", applied, commit)
	}
}
