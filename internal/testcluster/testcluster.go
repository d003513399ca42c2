// Package testcluster starts real MegaFlow heads and workers in one process for tests:
// real Raft TCP transports, real BoltDB files in temporary directories, real
// gossip and gRPC on loopback. Heads can be killed (as a crash would) and
// restarted on their data directories. Only tests import it.
package testcluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/lease"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker"
)

// Options tunes a test cluster.
type Options struct {
	// Heads is how many heads to start (default 3).
	Heads int
	// Configure, when set, edits each head's config before it starts.
	Configure func(*head.Config)
	// Verbose sends the heads' logs to stderr (also with MEGAFLOW_TEST_LOG=1).
	Verbose bool
	// NoReplayCheck, when not empty, turns off the replay check of Stop
	// (replay.go) and says why, for tests that destroy a head's data on
	// purpose; the reason is logged.
	NoReplayCheck string
}

// Member is one head slot of the cluster: its fixed addresses and data
// directory survive kills and restarts.
type Member struct {
	ID         string
	DataDir    string
	RaftAddr   string
	GRPCAddr   string
	GossipAddr string

	slot slot[*head.Head]
}

// Head returns the running head, or nil while it is killed.
func (m *Member) Head() *head.Head {
	return m.slot.get()
}

// Cluster is a set of heads started together.
type Cluster struct {
	t       testing.TB
	opts    Options
	Members []*Member
	Workers []*WorkerMember
}

// New starts a cluster whose heads bootstrap together, and waits for a
// leader. It registers cleanup with t.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Heads == 0 {
		opts.Heads = 3
	}
	c := &Cluster{t: t, opts: opts}
	root := t.TempDir()
	for i := range opts.Heads {
		c.Members = append(c.Members, &Member{
			ID:         fmt.Sprintf("h%d", i+1),
			DataDir:    filepath.Join(root, fmt.Sprintf("h%d", i+1)),
			RaftAddr:   FreeAddr(t),
			GRPCAddr:   FreeAddr(t),
			GossipAddr: FreeAddr(t),
		})
	}
	for _, m := range c.Members {
		c.start(m, opts.Heads)
	}
	t.Cleanup(c.Stop)
	c.WaitLeader(30 * time.Second)
	return c
}

// FreeAddr returns a loopback address whose port was free, for TCP and
// UDP (gossip uses both), a moment ago. Ports come from 15000-29999: below
// the kernel's ephemeral range (32768+ on Linux), so that a killed head's
// port is not handed to some outgoing connection before its restart, and
// below the workers' default service ports (30000+).
func FreeAddr(t testing.TB) string {
	t.Helper()
	for range 1000 {
		addr := fmt.Sprintf("127.0.0.1:%d", ports.next())
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		return addr
	}
	t.Fatalf("free port: none of 1000 tries in %d-%d was free", portLow, portLow+portSpan-1)
	return ""
}

// The range FreeAddr walks: 15000-29999.
const (
	portLow  = 15000
	portSpan = 15000
)

// ports is this test process's walk over the range. A cluster's addresses
// are all picked before its heads bind them, so a pick that is random each
// time can hand the same free port to two members of one cluster (about one
// 3-head start in 400: "bind: address already in use" in CI). The walk
// starts at a random port (test processes of other packages run beside
// this one) and moves one port per call, so one process is never handed a
// port twice within 15,000 calls.
var ports portWalk

// portWalk is a position in the range; safe for concurrent use.
type portWalk struct {
	mu      sync.Mutex
	started bool
	at      int
}

// next returns the next port of the walk.
func (w *portWalk) next() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started {
		w.at, w.started = rand.IntN(portSpan), true
	}
	p := portLow + w.at
	w.at = (w.at + 1) % portSpan
	return p
}

func (c *Cluster) config(m *Member, expect int) head.Config {
	cfg := head.DefaultConfig()
	cfg.NodeID = m.ID
	cfg.DataDir = m.DataDir
	cfg.RaftAddr = m.RaftAddr
	cfg.GRPCAddr = m.GRPCAddr
	cfg.GossipAddr = m.GossipAddr
	cfg.BootstrapExpect = expect
	cfg.Fast = true
	// A short lease: a killed worker's attempts are re-queued within 4 s
	// (workers heartbeat every 500 ms here).
	cfg.Lease = lease.Config{Duration: 3 * time.Second, Margin: time.Second}
	for _, o := range c.Members {
		if o != m {
			cfg.Join = append(cfg.Join, o.GossipAddr)
		}
	}
	var w io.Writer = io.Discard
	if c.opts.Verbose || os.Getenv("MEGAFLOW_TEST_LOG") == "1" {
		w = os.Stderr
	}
	cfg.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if c.opts.Configure != nil {
		c.opts.Configure(&cfg)
	}
	return cfg
}

func (c *Cluster) start(m *Member, expect int) {
	c.t.Helper()
	h, err := head.New(c.config(m, expect))
	if err != nil {
		c.t.Fatalf("start head %s: %v", m.ID, err)
	}
	m.slot.run(c.t, "head "+m.ID, h)
}

// Kill stops member i as a crash would (no leadership transfer, no gossip
// leave), keeping its data directory.
func (c *Cluster) Kill(i int) { c.Members[i].slot.kill() }

// Restart starts a killed member again on its data directory and addresses.
func (c *Cluster) Restart(i int) {
	c.start(c.Members[i], len(c.Members))
}

// Stop shuts every running worker and head down cleanly, then checks that
// each head that was running rebuilds, from its data directory alone, the
// table it had (checkReplay). New registers it as the test's cleanup; a
// test may call it earlier.
func (c *Cluster) Stop() {
	c.t.Helper()
	c.stopWorkers()
	var stopped []stoppedHead
	for _, m := range c.Members {
		h := m.Head()
		ran, err := m.slot.stop()
		if !ran || h == nil {
			continue
		}
		if err != nil {
			c.t.Logf("head %s: shutdown: %v", m.ID, err)
		}
		stopped = append(stopped, stoppedHead{member: m, head: h})
	}
	c.checkReplay(stopped)
}

// Running returns the heads that are running.
func (c *Cluster) Running() []*head.Head {
	var out []*head.Head
	for _, m := range c.Members {
		if h := m.Head(); h != nil {
			out = append(out, h)
		}
	}
	return out
}

// WaitLeader waits until exactly one running head leads and returns its
// member index.
func (c *Cluster) WaitLeader(timeout time.Duration) int {
	c.t.Helper()
	idx := -1
	WaitFor(c.t, timeout, "a single leader", func() bool {
		idx = -1
		n := 0
		for i, m := range c.Members {
			if h := m.Head(); h != nil && h.IsLeader() {
				idx, n = i, n+1
			}
		}
		return n == 1
	})
	return idx
}

// GRPCAddrs returns every member's gRPC address, running or not.
func (c *Cluster) GRPCAddrs() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.GRPCAddr
	}
	return out
}

// Client returns a client library connection to every head, closed at the
// end of the test.
func (c *Cluster) Client() *client.Client {
	c.t.Helper()
	cl, err := client.Dial(context.Background(), c.GRPCAddrs(), client.WithBackoff(20*time.Millisecond, 500*time.Millisecond))
	if err != nil {
		c.t.Fatalf("dial: %v", err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// WaitApplied waits until every running head has applied at least index.
func (c *Cluster) WaitApplied(index uint64, timeout time.Duration) {
	c.t.Helper()
	WaitFor(c.t, timeout, fmt.Sprintf("every head applied index %d", index), func() bool {
		for _, h := range c.Running() {
			if h.AppliedIndex() < index {
				return false
			}
		}
		return true
	})
}

// WaitFor polls cond until it holds or timeout passes, then fails the test
// naming what it waited for. It never sleeps longer than 10 ms at a time.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// AddHead starts one more head that joins the cluster's gossip pool without
// bootstrap-expect, so the leader must add it, and returns its member.
func (c *Cluster) AddHead() *Member {
	c.t.Helper()
	m := &Member{
		ID:         fmt.Sprintf("h%d", len(c.Members)+1),
		DataDir:    filepath.Join(c.t.TempDir(), "head"),
		RaftAddr:   FreeAddr(c.t),
		GRPCAddr:   FreeAddr(c.t),
		GossipAddr: FreeAddr(c.t),
	}
	c.Members = append(c.Members, m)
	c.start(m, 0)
	return m
}

// WorkerOptions tunes a worker started by AddWorker.
type WorkerOptions struct {
	// Runtime runs the worker's containers (a fake, process or docker
	// runtime). Required unless NewRuntime is set.
	Runtime contract.Runtime
	// NewRuntime, when set, makes a runtime for each start of the worker
	// (instead of Runtime), and KillWorker closes the killed one's (when it
	// is an io.Closer), as the death of a worker process ends its
	// runtime's goroutines (the Docker runtime's copies of container
	// output): a restarted worker must take its containers over from the
	// engine alone.
	NewRuntime func() contract.Runtime
	// Capacity defaults to 8 cores and 16 GiB.
	Capacity worker.Capacity
	Labels   map[string]string
	// Configure, when set, edits the worker's config before it starts.
	Configure func(*worker.Config)
}

// WorkerMember is one worker slot: its id, data directory and gossip
// address survive kills and restarts.
type WorkerMember struct {
	ID         string
	DataDir    string
	GossipAddr string
	opts       WorkerOptions

	slot slot[*worker.Worker]
	rt   contract.Runtime // the running worker's, from NewRuntime
}

// Worker returns the running worker, or nil while it is killed.
func (m *WorkerMember) Worker() *worker.Worker {
	return m.slot.get()
}

// AddWorker starts a worker that joins the heads through gossip and
// returns its slot.
func (c *Cluster) AddWorker(opts WorkerOptions) *WorkerMember {
	c.t.Helper()
	m := &WorkerMember{
		ID:         fmt.Sprintf("w%d", len(c.Workers)+1),
		DataDir:    filepath.Join(c.t.TempDir(), "worker"),
		GossipAddr: FreeAddr(c.t),
		opts:       opts,
	}
	c.Workers = append(c.Workers, m)
	c.startWorker(m)
	return m
}

func (c *Cluster) startWorker(m *WorkerMember) {
	c.t.Helper()
	cfg := worker.DefaultConfig()
	cfg.NodeID = m.ID
	cfg.DataDir = m.DataDir
	cfg.GossipAddr = m.GossipAddr
	cfg.Runtime = m.opts.Runtime
	if m.opts.NewRuntime != nil {
		m.rt = m.opts.NewRuntime()
		cfg.Runtime = m.rt
	}
	cfg.Capacity = m.opts.Capacity
	if cfg.Capacity == (worker.Capacity{}) {
		cfg.Capacity = worker.Capacity{CPUMillis: 8000, MemoryBytes: 16 << 30}
	}
	cfg.Labels = m.opts.Labels
	cfg.Fast = true
	cfg.HeartbeatInterval = 500 * time.Millisecond
	cfg.ReconnectMin, cfg.ReconnectMax = 20*time.Millisecond, 500*time.Millisecond
	for _, h := range c.Members {
		cfg.Join = append(cfg.Join, h.GossipAddr)
	}
	var w io.Writer = io.Discard
	if c.opts.Verbose || os.Getenv("MEGAFLOW_TEST_LOG") == "1" {
		w = os.Stderr
	}
	cfg.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if m.opts.Configure != nil {
		m.opts.Configure(&cfg)
	}
	wk, err := worker.New(cfg)
	if err != nil {
		c.t.Fatalf("start worker %s: %v", m.ID, err)
	}
	m.slot.run(c.t, "worker "+m.ID, wk)
}

// KillWorker stops worker i as a crash would; its containers keep running.
func (c *Cluster) KillWorker(i int) {
	m := c.Workers[i]
	m.slot.kill()
	m.closeRuntime()
}

// closeRuntime closes the runtime NewRuntime made for the worker's last
// start, once that worker stopped.
func (m *WorkerMember) closeRuntime() {
	if cl, ok := m.rt.(io.Closer); ok && m.opts.NewRuntime != nil {
		_ = cl.Close()
	}
	m.rt = nil
}

// StopWorker shuts worker i down cleanly (Worker.Shutdown: it leaves the
// gossip pool; the process runtime's processes are stopped).
func (c *Cluster) StopWorker(i int) {
	_, _ = c.Workers[i].slot.stop()
	c.Workers[i].closeRuntime()
}

// RestartWorker starts a killed worker again with the same id and data
// directory.
func (c *Cluster) RestartWorker(i int) { c.startWorker(c.Workers[i]) }

func (c *Cluster) stopWorkers() {
	for _, m := range c.Workers {
		_, _ = m.slot.stop()
		m.closeRuntime()
	}
}

// Tasks lists every task of a graph through cl, read through the leader,
// all pages; it fails the test on an error.
func Tasks(ctx context.Context, t testing.TB, cl *client.Client, graph string) []*client.Task {
	t.Helper()
	var out []*client.Task
	token := ""
	for {
		page, next, err := cl.ListTasks(ctx, client.TaskFilter{GraphID: graph, PageSize: 1000, PageToken: token,
			Read: client.ReadOptions{RequireLeader: true}})
		if err != nil {
			t.Fatalf("list tasks of %s: %v", graph, err)
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		token = next
	}
}
