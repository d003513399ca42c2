package consensus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// isolate cuts node i off from every other node, in both directions, as a
// network partition would: its RPCs fail at once and none reach it.
func (c *cluster) isolate(i int) {
	c.t.Helper()
	for j, o := range c.trans {
		if j != i && o != nil {
			c.trans[i].Disconnect(o.LocalAddr())
			o.Disconnect(c.trans[i].LocalAddr())
		}
	}
}

// heal reconnects node i to every other node, in both directions.
func (c *cluster) heal(i int) {
	c.t.Helper()
	for j, o := range c.trans {
		if j != i && o != nil {
			c.trans[i].Connect(o.LocalAddr(), o)
			o.Connect(c.trans[i].LocalAddr(), c.trans[i])
		}
	}
}

// waitAppliedOn waits until the FSMs of members hold count commands and
// equal hashes.
func (c *cluster) waitAppliedOn(count int, members ...int) {
	c.t.Helper()
	waitFor(c.t, 20*time.Second, fmt.Sprintf("the FSMs of nodes %v to hold %d equal commands", members, count), func() bool {
		first := c.fsms[members[0]].state()
		for _, i := range members {
			st := c.fsms[i].state()
			if st.Count != count {
				return false
			}
			if st.Hash != first.Hash {
				c.t.Fatalf("FSM hash of %s differs: %+v vs %+v", c.nodes[i].ID(), st, first)
			}
		}
		return true
	})
}

// A leader cut off from both followers (both directions, in memory) can
// no longer commit: its Apply fails once it steps down. The other two elect
// a new leader and commit without it. Healed, the old leader drops its
// uncommitted entry and catches up to the same FSM state: by replication,
// or by InstallSnapshot (from an InmemSnapshotStore) when the new leader
// has compacted its log past the old leader's last entry.
func TestInmemPartitionedLeaderIsReplacedAndCatchesUp(t *testing.T) {
	for _, catchUp := range []string{"replication", "snapshot"} {
		t.Run(catchUp, func(t *testing.T) {
			c := newInmemCluster(t, 3, func(cfg *Config) {
				if catchUp == "snapshot" {
					cfg.SnapshotThreshold = 64
					cfg.SnapshotInterval = time.Hour // only the explicit Snapshot below
					cfg.TrailingLogs = 16
				}
			})
			c.bootstrap()
			l := c.leader()
			if want := "inmem-" + c.nodes[l].ID(); c.nodes[l].Addr() != want {
				t.Fatalf("Addr = %q, want the transport's LocalAddr %q", c.nodes[l].Addr(), want)
			}
			c.apply(l, 0, 100)
			c.waitApplied(100)
			c.waitCaughtUp(l)
			c.checkLogsEqual()

			old := l
			var others []int
			for i := range c.nodes {
				if i != old {
					others = append(others, i)
				}
			}
			c.isolate(old)
			start := time.Now()
			// Proposed after the cut: no follower can receive it.
			f := c.nodes[old].Raft().Apply([]byte("lost"), 0)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := c.nodes[old].Await(ctx, f)
			cancel()
			if !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, raft.ErrNotLeader) {
				t.Fatalf("Apply on the cut-off leader = %v, want raft.ErrLeadershipLost or raft.ErrNotLeader", err)
			}
			t.Logf("cut-off leader %s: Apply failed after %s: %v", c.nodes[old].ID(), time.Since(start), err)

			nl := c.leaderAmong(others...)
			t.Logf("new leader %s elected %s after the cut", c.nodes[nl].ID(), time.Since(start))
			c.apply(nl, 100, 200)
			c.waitAppliedOn(300, others...)
			if c.nodes[old].IsLeader() {
				t.Fatalf("cut-off %s still leads", c.nodes[old].ID())
			}
			if st := c.fsms[old].state(); st.Count != 100 {
				t.Fatalf("cut-off %s applied %d commands, want the 100 from before the cut", c.nodes[old].ID(), st.Count)
			}
			var snapIdx uint64
			if catchUp == "snapshot" {
				if err := c.nodes[nl].Raft().Snapshot().Error(); err != nil {
					t.Fatalf("Snapshot: %v", err)
				}
				snapIdx = c.nodes[nl].Stats().LastSnapshotIndex
				first, _ := c.nodes[nl].FirstIndex()
				if oldLast := c.nodes[old].Raft().LastIndex(); first <= oldLast+1 {
					t.Fatalf("new leader's log starts at %d: the old leader (at %d) could catch up from it", first, oldLast)
				}
			}

			c.heal(old)
			l = c.leader()
			c.apply(l, 300, 10)
			c.waitApplied(310)
			c.waitCaughtUp(l)
			c.checkLogsEqual()
			c.fsms[old].mu.Lock()
			restores, restored := c.fsms[old].restores, c.fsms[old].restored
			c.fsms[old].mu.Unlock()
			switch {
			case catchUp == "replication" && restores != 0:
				t.Errorf("old leader restored %d snapshots; want catch-up by replication", restores)
			case catchUp == "snapshot" && (restores == 0 || restored < snapIdx):
				t.Errorf("old leader restored %d snapshots, the last at %d; want InstallSnapshot of index >= %d",
					restores, restored, snapIdx)
			}
		})
	}
}

// Kill and restart on in-memory stores: the Node leaves the stores it was
// given open, so a restart on them (with a new transport) finds its log
// and term and catches up by replication.
func TestInmemKillAndRestartOnTheSameStores(t *testing.T) {
	c := newInmemCluster(t, 3, nil)
	c.bootstrap()
	l := c.leader()
	c.apply(l, 0, 50)
	c.waitApplied(50)
	c.waitCaughtUp(l)

	f := (l + 1) % 3
	if err := c.nodes[f].Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	c.nodes[f] = nil
	// Kill closed f's transport: it has no route left to any peer.
	var resp raft.RequestVoteResponse
	if err := c.trans[f].RequestVote("h", c.trans[l].LocalAddr(), &raft.RequestVoteRequest{}, &resp); err == nil ||
		!strings.Contains(err.Error(), "failed to connect") {
		t.Errorf("RPC from the killed node's transport = %v, want no route", err)
	}
	c.unroute(f)
	c.apply(l, 50, 50)
	c.waitApplied(100)

	c.start(f)
	if !c.nodes[f].HasExistingState() {
		t.Fatal("restarted node has no existing state")
	}
	c.waitApplied(100)
	c.waitCaughtUp(l)
	c.checkLogsEqual()
	c.fsms[f].mu.Lock()
	restores := c.fsms[f].restores
	c.fsms[f].mu.Unlock()
	if restores != 0 {
		t.Errorf("restarted node restored %d snapshots; want catch-up by replication", restores)
	}
}

// Validate's rules for the injected transport and stores.
func TestConfigValidateInjected(t *testing.T) {
	_, tr := raft.NewInmemTransport("")
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	inmem := func() Config {
		cfg := DefaultConfig()
		cfg.NodeID, cfg.FSM = "h0", &testFSM{}
		cfg.Transport = tr
		cfg.LogStore, cfg.StableStore, cfg.SnapshotStore = store, store, snaps
		return cfg
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" means valid; else a substring of the error
	}{
		{"all in memory, no DataDir or BindAddr", func(*Config) {}, ""},
		{"TCP with in-memory stores", func(c *Config) { c.Transport, c.BindAddr = nil, "127.0.0.1:0" }, ""},
		{"in-memory transport on disk", func(c *Config) {
			c.LogStore, c.StableStore, c.SnapshotStore, c.DataDir = nil, nil, nil, "/tmp/x"
		}, ""},
		{"in-memory log, file snapshots", func(c *Config) { c.SnapshotStore, c.DataDir = nil, "/tmp/x" }, ""},
		{"no transport, no BindAddr", func(c *Config) { c.Transport = nil }, "Config.BindAddr"},
		{"Transport and BindAddr", func(c *Config) { c.BindAddr = "127.0.0.1:0" }, "Config.BindAddr \"127.0.0.1:0\": must be empty when Config.Transport is set"},
		{"Transport and AdvertiseAddr", func(c *Config) { c.AdvertiseAddr = "10.0.0.1:7000" }, "Config.AdvertiseAddr \"10.0.0.1:7000\": must be empty when Config.Transport is set"},
		{"LogStore alone", func(c *Config) { c.StableStore = nil }, "Config.LogStore and Config.StableStore must be set together"},
		{"StableStore alone", func(c *Config) { c.LogStore = nil }, "Config.LogStore and Config.StableStore must be set together"},
		{"BoltDB without DataDir", func(c *Config) { c.LogStore, c.StableStore = nil, nil }, "Config.DataDir is required"},
		{"file snapshots without DataDir", func(c *Config) { c.SnapshotStore = nil }, "Config.DataDir is required"},
	} {
		cfg := inmem()
		tc.edit(&cfg)
		err := cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Validate = %v, want nil", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: Validate = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
