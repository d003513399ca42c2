package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/megaflow/megaflow/head/consensus"
)

// bareCluster is the baseline: three hashicorp/raft nodes in this process,
// nothing of MegaFlow in the write path. Each node has what a head has
// underneath its FSM (a TCP transport on 127.0.0.1, a raft-boltdb/v2 log and
// stable store fsynced on every write, a 512-entry log cache, a file
// snapshot store) and Raft tuned for throughput as bench/README.md measured
// it: BatchApplyCh and MaxAppendEntries 1024. Its timeouts are the test
// cluster's (consensus.FastTiming), so both sides elect and commit alike.
// The FSM only counts applies.
type bareCluster struct {
	nodes  []*raft.Raft
	trans  []*raft.NetworkTransport
	stores []*raftboltdb.BoltStore
	fsms   []*countFSM
}

// countFSM is the baseline's trivial state machine.
type countFSM struct{ applied atomic.Uint64 }

func (f *countFSM) Apply(*raft.Log) any { f.applied.Add(1); return nil }

func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) { return countSnapshot{}, nil }

func (f *countFSM) Restore(rc io.ReadCloser) error { return rc.Close() }

type countSnapshot struct{}

func (countSnapshot) Persist(sink raft.SnapshotSink) error { return sink.Close() }
func (countSnapshot) Release()                             {}

// newBareCluster starts n nodes on loopback with data under tb.TempDir(),
// bootstraps them together and waits for a leader. tb's cleanup shuts them
// down.
func newBareCluster(tb testing.TB, n int) *bareCluster {
	tb.Helper()
	c := &bareCluster{}
	tb.Cleanup(c.shutdown)
	root := tb.TempDir()
	timing := consensus.FastTiming()
	var servers []raft.Server
	for i := range n {
		id := fmt.Sprintf("bare%d", i+1)
		dir := filepath.Join(root, id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			tb.Fatalf("bare raft %s: %v", id, err)
		}
		store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
		if err != nil {
			tb.Fatalf("bare raft %s: bolt: %v", id, err)
		}
		c.stores = append(c.stores, store)
		logs, err := raft.NewLogCache(512, store)
		if err != nil {
			tb.Fatalf("bare raft %s: log cache: %v", id, err)
		}
		snaps, err := raft.NewFileSnapshotStore(dir, 1, io.Discard)
		if err != nil {
			tb.Fatalf("bare raft %s: snapshots: %v", id, err)
		}
		trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 10*time.Second, io.Discard)
		if err != nil {
			tb.Fatalf("bare raft %s: transport: %v", id, err)
		}
		c.trans = append(c.trans, trans)

		cfg := raft.DefaultConfig()
		cfg.LocalID = raft.ServerID(id)
		cfg.HeartbeatTimeout = timing.HeartbeatTimeout
		cfg.ElectionTimeout = timing.ElectionTimeout
		cfg.LeaderLeaseTimeout = timing.LeaderLeaseTimeout
		cfg.CommitTimeout = timing.CommitTimeout
		cfg.BatchApplyCh = true
		cfg.MaxAppendEntries = 1024
		cfg.LogOutput = io.Discard
		cfg.LogLevel = "ERROR"

		fsm := &countFSM{}
		c.fsms = append(c.fsms, fsm)
		r, err := raft.NewRaft(cfg, fsm, logs, store, snaps, trans)
		if err != nil {
			tb.Fatalf("bare raft %s: start: %v", id, err)
		}
		c.nodes = append(c.nodes, r)
		servers = append(servers, raft.Server{ID: cfg.LocalID, Address: trans.LocalAddr()})
	}
	if err := c.nodes[0].BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		tb.Fatalf("bare raft: bootstrap: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for c.leader() == nil {
		if time.Now().After(deadline) {
			tb.Fatal("bare raft: no leader after 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c
}

// leader returns the node that leads now, or nil.
func (c *bareCluster) leader() *raft.Raft {
	for _, r := range c.nodes {
		if r.State() == raft.Leader {
			return r
		}
	}
	return nil
}

// apply commits one command through the leader and waits until the
// leader's FSM applied it, as a head's write does.
func (c *bareCluster) apply(r *raft.Raft, cmd []byte) error {
	return r.Apply(cmd, 10*time.Second).Error()
}

func (c *bareCluster) shutdown() {
	for _, r := range c.nodes {
		_ = r.Shutdown().Error()
	}
	for _, t := range c.trans {
		_ = t.Close()
	}
	for _, s := range c.stores {
		_ = s.Close()
	}
}
