package consensus

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor polls cond every 10 ms until it holds or timeout passes, then
// fails the test with what.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// shutdown shuts nd down within 30 s (plus ShutdownGrace): a Shutdown
// that would hang returns ErrShutdownIncomplete instead, naming what
// still runs.
func shutdown(nd *Node) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return nd.Shutdown(ctx)
}

// testFSM counts commands and chains a hash over them in log order, so two
// FSMs that applied the same commands in the same order compare equal.
type testFSM struct {
	mu       sync.Mutex
	st       fsmState
	restores int    // how many times Restore ran
	restored uint64 // LastIndex of the last snapshot restored
}

type fsmState struct {
	Count     int    `json:"count"`
	Hash      uint64 `json:"hash"`
	LastIndex uint64 `json:"last_index"`
}

var _ raft.FSM = (*testFSM)(nil)

func (f *testFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := fnv.New64a()
	fmt.Fprintf(h, "%d:", f.st.Hash)
	h.Write(l.Data)
	f.st.Hash = h.Sum64()
	f.st.Count++
	f.st.LastIndex = l.Index
	return f.st.Count
}

func (f *testFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fsmSnapshot(f.st), nil
}

func (f *testFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var st fsmState
	if err := json.NewDecoder(rc).Decode(&st); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = st
	f.restores++
	f.restored = st.LastIndex
	return nil
}

func (f *testFSM) state() fsmState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

type fsmSnapshot fsmState

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(fsmState(s)); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s fsmSnapshot) Release() {}

// testLogger discards logs unless MEGAFLOW_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("MEGAFLOW_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// cluster is n heads in this process with real TCP transports on loopback
// and BoltDB files in temporary directories (newCluster), or with
// hashicorp/raft's in-memory transports and stores (newInmemCluster).
type cluster struct {
	t     *testing.T
	cfgs  []Config
	nodes []*Node // nil while stopped
	fsms  []*testFSM
	// trans holds each node's current InmemTransport (newInmemCluster
	// only; nil for TCP). A restart gets a new one.
	trans []*raft.InmemTransport
}

func newCluster(t *testing.T, n int, tweak func(*Config)) *cluster {
	t.Helper()
	return newClusterOf(t, n, false, tweak)
}

// newInmemCluster is newCluster on InmemTransport, InmemStore and
// InmemSnapshotStore: no socket, no file. A node's stores live in its
// Config, so a restart (start) keeps its log, term and snapshots.
func newInmemCluster(t *testing.T, n int, tweak func(*Config)) *cluster {
	t.Helper()
	return newClusterOf(t, n, true, tweak)
}

func newClusterOf(t *testing.T, n int, inmem bool, tweak func(*Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, cfgs: make([]Config, n), nodes: make([]*Node, n), fsms: make([]*testFSM, n)}
	if inmem {
		c.trans = make([]*raft.InmemTransport, n)
	}
	for i := range n {
		cfg := DefaultConfig()
		cfg.NodeID = fmt.Sprintf("h%d", i)
		if inmem {
			store := raft.NewInmemStore()
			cfg.LogStore, cfg.StableStore = store, store
			cfg.SnapshotStore = raft.NewInmemSnapshotStore()
		} else {
			cfg.DataDir = t.TempDir()
			cfg.BindAddr = "127.0.0.1:0"
		}
		cfg.Logger = testLogger().With("test_node", cfg.NodeID)
		cfg.Fast = true
		cfg.TransportTimeout = 2 * time.Second
		if tweak != nil {
			tweak(&cfg)
		}
		c.cfgs[i] = cfg
		c.start(i)
	}
	t.Cleanup(func() {
		for i, nd := range c.nodes {
			if nd != nil {
				_ = shutdown(nd)
				c.unroute(i)
			}
		}
	})
	return c
}

// unroute, in an in-memory cluster, removes every other node's route to
// node i, stopped, so that their RPCs to it fail at once, as TCP dials to a
// stopped head are refused. Otherwise an RPC to it would wait out the
// transport timeout in its queue (a leader's leadership transfer as it
// shuts down, ten times that), outliving the test. Only i's peers'
// transports are touched: Raft closed i's own as it stopped.
func (c *cluster) unroute(i int) {
	if c.trans == nil {
		return
	}
	for j, o := range c.trans {
		if j != i && o != nil {
			o.Disconnect(c.trans[i].LocalAddr())
		}
	}
}

// start (re)starts node i on its data directory with a fresh FSM. After the
// first start it binds the address it had, so that its peers reach it. In
// an in-memory cluster it gives node i a new transport at the same address,
// connected both ways to every other node's.
func (c *cluster) start(i int) {
	c.t.Helper()
	c.fsms[i] = &testFSM{}
	cfg := c.cfgs[i]
	cfg.FSM = c.fsms[i]
	var nd *Node
	if c.trans != nil {
		_, tr := raft.NewInmemTransportWithTimeout(raft.ServerAddress("inmem-"+cfg.NodeID), cfg.TransportTimeout)
		c.trans[i] = tr
		for j, o := range c.trans {
			if j != i && o != nil {
				tr.Connect(o.LocalAddr(), o)
				o.Connect(tr.LocalAddr(), tr)
			}
		}
		cfg.Transport = tr
		var err error
		if nd, err = New(cfg); err != nil {
			c.t.Fatalf("New(%s): %v", cfg.NodeID, err)
		}
		c.nodes[i] = nd
		return
	}
	// A restart binds the old port, which may briefly serve as some
	// connection's ephemeral source port: retry until it is free.
	waitFor(c.t, 10*time.Second, cfg.NodeID+" to start on "+cfg.BindAddr, func() bool {
		var err error
		nd, err = New(cfg)
		if err != nil && !strings.Contains(err.Error(), "address already in use") {
			c.t.Fatalf("New(%s): %v", cfg.NodeID, err)
		}
		return err == nil
	})
	c.nodes[i] = nd
	c.cfgs[i].BindAddr = nd.Addr()
}

// bootstrap has every node compute the voter set from the others' addresses,
// as the heads do from gossip, and bootstrap with it.
func (c *cluster) bootstrap() {
	c.t.Helper()
	var peers []Peer
	for _, nd := range c.nodes {
		peers = append(peers, Peer{ID: nd.ID(), Addr: nd.Addr()})
	}
	for _, nd := range c.nodes {
		if nd.HasExistingState() {
			c.t.Fatalf("%s has state before bootstrap", nd.ID())
		}
		servers, ok := BootstrapServers(nd.ID(), peers, len(c.nodes))
		if !ok {
			c.t.Fatalf("BootstrapServers(%s) = false", nd.ID())
		}
		if err := nd.Bootstrap(servers); err != nil {
			c.t.Fatal(err)
		}
		if !nd.HasExistingState() {
			c.t.Fatalf("%s has no state after bootstrap", nd.ID())
		}
	}
}

// leader waits until exactly one running node is leader and all running
// nodes agree on it, and returns its index.
func (c *cluster) leader() int {
	c.t.Helper()
	var running []int
	for i, nd := range c.nodes {
		if nd != nil {
			running = append(running, i)
		}
	}
	return c.leaderAmong(running...)
}

// leaderAmong waits until exactly one of the nodes members is leader and
// all of them agree on it, and returns its index. Nodes outside members
// (stopped, or cut off from members) are not looked at.
func (c *cluster) leaderAmong(members ...int) int {
	c.t.Helper()
	idx := -1
	waitFor(c.t, 10*time.Second, fmt.Sprintf("a leader nodes %v agree on", members), func() bool {
		idx = -1
		for _, i := range members {
			if c.nodes[i].IsLeader() {
				if idx >= 0 {
					return false
				}
				idx = i
			}
		}
		if idx < 0 {
			return false
		}
		for _, i := range members {
			if c.nodes[i].Stats().LeaderID != c.nodes[idx].ID() {
				return false
			}
		}
		return true
	})
	return idx
}

// apply proposes count commands on node i all at once (so that BatchApplyCh
// batches them) and waits for every one.
func (c *cluster) apply(i, from, count int) {
	c.t.Helper()
	futures := make([]raft.ApplyFuture, count)
	for k := range futures {
		futures[k] = c.nodes[i].Raft().Apply([]byte(fmt.Sprintf("cmd-%d", from+k)), 5*time.Second)
	}
	for k, f := range futures {
		if err := f.Error(); err != nil {
			c.t.Fatalf("apply cmd-%d on %s: %v", from+k, c.nodes[i].ID(), err)
		}
	}
}

// waitApplied waits until every running node's FSM holds count commands
// and all FSM states are equal.
func (c *cluster) waitApplied(count int) {
	c.t.Helper()
	waitFor(c.t, 20*time.Second, fmt.Sprintf("every running FSM to hold %d equal commands", count), func() bool {
		var first *fsmState
		for i, nd := range c.nodes {
			if nd == nil {
				continue
			}
			st := c.fsms[i].state()
			if st.Count != count {
				return false
			}
			if first == nil {
				first = &st
			} else if st.Hash != first.Hash {
				c.t.Fatalf("FSM hash of %s differs: %+v vs %+v", nd.ID(), st, *first)
			}
		}
		return true
	})
}

// checkLogsEqual requires the running nodes to agree on the last index and
// compares their Raft logs entry by entry over the range every one of them
// holds in its log store above its last snapshot (what a snapshot covers is
// compared through the FSM hashes by waitApplied).
func (c *cluster) checkLogsEqual() {
	c.t.Helper()
	var running []*Node
	for _, nd := range c.nodes {
		if nd != nil {
			running = append(running, nd)
		}
	}
	lo, hi := uint64(0), ^uint64(0)
	for _, nd := range running {
		if nd.Raft().LastIndex() != running[0].Raft().LastIndex() {
			c.t.Fatalf("last index of %s = %d, of %s = %d", nd.ID(), nd.Raft().LastIndex(),
				running[0].ID(), running[0].Raft().LastIndex())
		}
		first, err := nd.logs.FirstIndex()
		if err != nil {
			c.t.Fatal(err)
		}
		last, err := nd.logs.LastIndex()
		if err != nil {
			c.t.Fatal(err)
		}
		lo = max(lo, first, nd.Stats().LastSnapshotIndex+1)
		hi = min(hi, last)
	}
	if lo > hi {
		c.t.Fatalf("no common log range (%d..%d)", lo, hi)
	}
	for idx := lo; idx <= hi; idx++ {
		var want raft.Log
		if err := running[0].logs.GetLog(idx, &want); err != nil {
			c.t.Fatalf("%s log %d: %v", running[0].ID(), idx, err)
		}
		for _, nd := range running[1:] {
			var got raft.Log
			if err := nd.logs.GetLog(idx, &got); err != nil {
				c.t.Fatalf("%s log %d: %v", nd.ID(), idx, err)
			}
			if got.Term != want.Term || got.Type != want.Type || !bytes.Equal(got.Data, want.Data) {
				c.t.Fatalf("log %d differs: %s has term %d type %v %q, %s has term %d type %v %q", idx,
					running[0].ID(), want.Term, want.Type, want.Data, nd.ID(), got.Term, got.Type, got.Data)
			}
		}
	}
	c.t.Logf("logs of %d nodes equal over %d..%d", len(running), lo, hi)
}

// waitCaughtUp waits until every running node has applied the leader's last
// index.
func (c *cluster) waitCaughtUp(leader int) {
	c.t.Helper()
	target := c.nodes[leader].Raft().LastIndex()
	waitFor(c.t, 20*time.Second, fmt.Sprintf("every node to apply index %d", target), func() bool {
		for _, nd := range c.nodes {
			if nd != nil && (nd.Raft().AppliedIndex() < target || nd.Raft().LastIndex() < target) {
				return false
			}
		}
		return true
	})
}
