package consensus

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/megaflow/megaflow/internal/errs"
)

// stuckPeer accepts TCP connections and never reads or answers: a peer
// frozen, or a machine whose kernel still completes handshakes.
type stuckPeer struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	done  chan struct{}
}

func newStuckPeer(t *testing.T) *stuckPeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stuckPeer{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Error("timed out after 10s waiting for the stuck peer's accept loop to end once closed")
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

// Issue 18, finding 7: a graceful shutdown must end within its bound while
// a peer accepts TCP and never answers. Two real nodes and a stuck third
// voter; RPCs to it would block for the whole transport timeout (a
// minute here), so Raft's replication and heartbeat goroutines to it are
// parked in the transport when the leader (and then the follower) shuts
// down with a 1 s context. Each Shutdown returns within 1 s plus
// ShutdownGrace; before, Shutdown waited for those RPCs to time out.
func TestShutdownBoundedWithAStuckPeer(t *testing.T) {
	stuck := newStuckPeer(t)
	c := newCluster(t, 2, func(cfg *Config) { cfg.TransportTimeout = time.Minute })
	servers := []raft.Server{
		{Suffrage: raft.Voter, ID: "h0", Address: raft.ServerAddress(c.nodes[0].Addr())},
		{Suffrage: raft.Voter, ID: "h1", Address: raft.ServerAddress(c.nodes[1].Addr())},
		{Suffrage: raft.Voter, ID: "stuck", Address: raft.ServerAddress(stuck.ln.Addr().String())},
	}
	for _, nd := range c.nodes {
		if err := nd.Bootstrap(servers); err != nil {
			t.Fatal(err)
		}
	}
	l := c.leader()
	c.apply(l, 0, 100)
	waitFor(t, 10*time.Second, "the stuck peer to hold a connection", func() bool {
		stuck.mu.Lock()
		defer stuck.mu.Unlock()
		return len(stuck.conns) > 0
	})
	bound := time.Second + ShutdownGrace + 500*time.Millisecond
	for _, i := range []int{l, 1 - l} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		begin := time.Now()
		err := c.nodes[i].Shutdown(ctx)
		took := time.Since(begin)
		cancel()
		if took > bound {
			t.Errorf("%s: Shutdown took %v with a stuck peer; want at most %v", c.nodes[i].ID(), took, bound)
		}
		if err != nil {
			t.Errorf("%s: Shutdown: %v", c.nodes[i].ID(), err)
		}
		t.Logf("%s: Shutdown took %v", c.nodes[i].ID(), took)
		c.nodes[i] = nil
	}
}

// Replication is synchronous (no pipeline): hashicorp/raft v1.8.0's
// pipeline can deadlock a replication goroutine for good, and with it
// raft.Shutdown (see New).
func TestNoPipelinedReplication(t *testing.T) {
	c := newCluster(t, 1, nil)
	if _, err := c.nodes[0].trans.AppendEntriesPipeline("x", "127.0.0.1:1"); err != raft.ErrPipelineReplicationNotSupported {
		t.Fatalf("AppendEntriesPipeline: %v, want raft.ErrPipelineReplicationNotSupported", err)
	}
}

// A second node on a data directory in use is refused at once, naming the
// directory; the first keeps it (issue 18, finding 10: it failed after
// BoltDB's 5 s timeout with "open raft.db: timeout").
func TestNewOnADataDirInUse(t *testing.T) {
	c := newCluster(t, 1, nil)
	cfg := c.cfgs[0]
	cfg.BindAddr = "127.0.0.1:0"
	cfg.FSM = &testFSM{}
	begin := time.Now()
	nd, err := New(cfg)
	if err == nil {
		_ = nd.Kill()
		t.Fatal("a second node started on the same data directory")
	}
	if took := time.Since(begin); took > time.Second || errs.ClassOf(err) != errs.FailedPrecondition ||
		!strings.Contains(err.Error(), "is in use by another process (pid") {
		t.Fatalf("second New after %v: %v", took, err)
	}
}
