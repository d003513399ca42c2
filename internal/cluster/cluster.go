// Package cluster runs a MegaFlow cluster in one process: real heads (Raft
// over TCP loopback, BoltDB under a data directory, gossip, gRPC; or, with
// Options.RaftInMemory, Raft on an in-memory network and stores) and real
// workers on the runtime the caller gives. It is the one in-process
// cluster: `megaflow up` and `megaflow demo` start one head and one worker
// with it, the benchmark harness three heads and simulated workers, and
// the tests wrap it with testing.TB helpers (internal/testcluster). Heads
// and workers can be killed as a crash would and started again on their
// data directories and addresses.
//
// A Cluster owns the goroutine that runs each daemon; Stop ends them all.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker"
)

// Options configures a Cluster.
type Options struct {
	// Dir holds each member's data directory (Dir/<id>) unless
	// ConfigureHead or WorkerOptions.DataDir says otherwise. Required.
	Dir string
	// Heads is how many heads bootstrap together (default 3, at most 7).
	Heads int
	// Logger receives the daemons' logs (each with "head" or "worker" and
	// its id) and, unless RunError is set, the Run errors of daemons that
	// end on their own or do not end when killed. Nil discards them.
	Logger *slog.Logger
	// RunError, when set, receives instead of Logger the error of a head's
	// or a worker's Run that ended on its own (not by Kill, Stop or their
	// worker forms: "Run ended on its own: ..."), with the daemon's name
	// ("head h1", "worker w2"), on the daemon's goroutine, which the
	// cluster's Kill and Stop methods wait for; and, on the goroutine of
	// the Kill or Stop method that waited, an error saying that the
	// killed or stopped daemon's Run has not returned within a minute
	// (the method then goes on; Stop and StopWorker also return it).
	RunError func(daemon string, err error)
	// ConfigureHead, when set, edits head i's config (0-based) after the
	// cluster's defaults: id h<i+1>, data directory Dir/<id>, free
	// loopback addresses, BootstrapExpect Heads, Join the other heads'
	// gossip addresses (the Logger, unless it sets one, is set after it:
	// head.New adds the head's id to each line). It may change the id, the data
	// directory and the addresses (a port of 0 is taken from the bound
	// head); in a cluster of more than one head it must not change the
	// gossip address, which the others join. It runs on every start,
	// restarts included.
	ConfigureHead func(i int, cfg *head.Config)
	// LeaderTimeout bounds Start's wait for a leader (default 30 s).
	LeaderTimeout time.Duration
	// StopTimeout bounds each daemon's clean shutdown in Stop, StopWorker
	// and the clean stops of tests (default 10 s): a worker's shutdown
	// includes its runtime's stop grace for the tasks it still runs.
	StopTimeout time.Duration
	// RaftInMemory runs the heads' Raft without sockets or Raft files, for
	// tests: each head gets a hashicorp/raft InmemTransport at the
	// address "inmem-<id>" (Member.RaftAddr, kept across kills and
	// restarts) on a network the cluster owns, and an in-memory log,
	// stable and snapshot store that belongs to its member and survives
	// Kill and Restart with everything written to it, as an fsynced disk
	// would (Member.RaftStores). A head that is killed or stopped is cut
	// off from the others at once, in both directions, as a dead process's
	// port refuses connections; a restarted or added head is connected to
	// every running one. It overrides the Raft transport and stores that
	// ConfigureHead sets; the data directory still holds everything else
	// (gossip seeds, the worker table's files). False, the default, is
	// Raft over TCP loopback with BoltDB and file snapshots under each
	// data directory, as `megaflow up` and the benchmarks run.
	RaftInMemory bool
}

// Member is one head slot of the cluster: its id, data directory and
// addresses survive kills and restarts.
type Member struct {
	ID         string
	DataDir    string
	RaftAddr   string
	GRPCAddr   string
	GossipAddr string

	index   int
	started bool // it ran once: restarts keep its id, directory and addresses
	slot    slot[*head.Head]
	// With Options.RaftInMemory: the head's Raft log and stable store and
	// its snapshot store, made at its first start and kept across restarts.
	raftStore *raft.InmemStore
	raftSnaps *memSnapshots
}

// Head returns the running head, or nil while it is killed or stopped.
func (m *Member) Head() *head.Head { return m.slot.get() }

// RaftStores returns the member's in-memory Raft log store and snapshot
// store (Options.RaftInMemory), for a test to read once its head is
// stopped (consensus.ReplayStores); both are nil when the cluster keeps
// Raft on disk (under DataDir/raft) or the member never started. They
// are the live stores: reading them while the head runs races with it.
func (m *Member) RaftStores() (raft.LogStore, raft.SnapshotStore) {
	if m.raftStore == nil {
		return nil, nil
	}
	return m.raftStore, m.raftSnaps
}

// Cluster is a set of heads started together and the workers added to
// them.
type Cluster struct {
	opts   Options
	logger *slog.Logger
	// Members are the head slots, in start order.
	Members []*Member

	mu        sync.Mutex
	workers   []*WorkerMember
	workerSeq int

	net *inmemNet // the in-memory Raft network; nil unless Options.RaftInMemory
}

// Start starts opts.Heads heads that bootstrap together and waits until
// one leads (LeaderTimeout, or until ctx ends). On an error it stops what
// it started.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("cluster: Options.Dir is required: give a directory for the members' data")
	}
	if opts.Heads == 0 {
		opts.Heads = 3
	}
	if opts.Heads < 1 || opts.Heads > 7 {
		return nil, fmt.Errorf("cluster: Options.Heads %d: want 1 to 7", opts.Heads)
	}
	if opts.LeaderTimeout == 0 {
		opts.LeaderTimeout = 30 * time.Second
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 10 * time.Second
	}
	c := &Cluster{opts: opts, logger: opts.Logger}
	if c.logger == nil {
		c.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.RaftInMemory {
		c.net = newInmemNet()
	}
	for i := range opts.Heads {
		m, err := c.newMember(i, filepath.Join(opts.Dir, fmt.Sprintf("h%d", i+1)))
		if err != nil {
			return nil, err
		}
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		if err := c.start(m, opts.Heads); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if _, err := c.WaitLeader(ctx, opts.LeaderTimeout); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// newMember makes head slot i with data directory dir and its addresses:
// free loopback ports, and for Raft in memory "inmem-h<i+1>".
func (c *Cluster) newMember(i int, dir string) (*Member, error) {
	m := &Member{index: i, ID: fmt.Sprintf("h%d", i+1), DataDir: dir}
	addrs := []*string{&m.RaftAddr, &m.GRPCAddr, &m.GossipAddr}
	if c.net != nil {
		m.RaftAddr, addrs = "inmem-"+m.ID, addrs[1:]
	}
	for _, p := range addrs {
		var err error
		if *p, err = FreeAddr(); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// HeadConfig returns the config member m starts with: the cluster's
// defaults for it, then ConfigureHead. expect is its BootstrapExpect.
// With Options.RaftInMemory, each start then sets the Raft transport and
// stores (not set here: a transport serves one start).
func (c *Cluster) HeadConfig(m *Member, expect int) head.Config {
	cfg := head.DefaultConfig()
	cfg.NodeID = m.ID
	cfg.DataDir = m.DataDir
	cfg.RaftAddr, cfg.GRPCAddr, cfg.GossipAddr = m.RaftAddr, m.GRPCAddr, m.GossipAddr
	cfg.BootstrapExpect = expect
	for _, o := range c.Members {
		if o != m {
			cfg.Join = append(cfg.Join, o.GossipAddr)
		}
	}
	cfg.Logger = nil
	if c.opts.ConfigureHead != nil {
		c.opts.ConfigureHead(m.index, &cfg)
	}
	if cfg.Logger == nil {
		cfg.Logger = c.logger // head.New names the head in every line
	}
	return cfg
}

// start starts member m's head and records the id, directory and
// addresses it runs with; a restart keeps those (a ConfigureHead that asks
// for port 0 does not move a restarted head to new ports). It refuses a
// member whose head still runs.
func (c *Cluster) start(m *Member, expect int) error {
	if m.Head() != nil {
		return fmt.Errorf("head %s is running: kill or stop it before starting it again", m.ID)
	}
	cfg := c.HeadConfig(m, expect)
	if m.started {
		cfg.NodeID, cfg.DataDir = m.ID, m.DataDir
		cfg.RaftAddr, cfg.GRPCAddr, cfg.GossipAddr = m.RaftAddr, m.GRPCAddr, m.GossipAddr
	}
	if c.net != nil {
		if m.raftStore == nil {
			m.raftStore, m.raftSnaps = raft.NewInmemStore(), newMemSnapshots()
		}
		cfg.RaftAddr = m.RaftAddr // the transport's address; head.New ignores it
		cfg.RaftTransport = c.net.attach(raft.ServerAddress(m.RaftAddr))
		cfg.RaftLogStore, cfg.RaftStableStore, cfg.RaftSnapshotStore = m.raftStore, m.raftStore, m.raftSnaps
	}
	h, err := head.New(cfg)
	if err != nil {
		if c.net != nil { // Raft never started: its transport is still open
			tr := c.net.isolate(raft.ServerAddress(m.RaftAddr))
			refuse(tr)
			if tr != nil {
				_ = tr.Close()
			}
		}
		return err // it names the head
	}
	m.ID, m.DataDir = cfg.NodeID, cfg.DataDir
	m.RaftAddr, m.GRPCAddr, m.GossipAddr = h.RaftAddr(), h.GRPCAddr(), h.GossipAddr()
	m.started = true
	m.slot.run(c.runEnded, "head "+m.ID, h)
	return nil
}

// runEnded reports the error of a daemon's Run that ended on its own, or
// that did not end when killed or stopped: to Options.RunError, else to
// the logger.
func (c *Cluster) runEnded(daemon string, err error) {
	if c.opts.RunError != nil {
		c.opts.RunError(daemon, err)
		return
	}
	c.logger.Warn("daemon's Run failed", "daemon", daemon, "err", err)
}

// Kill stops member i as a crash would (no leadership transfer, no gossip
// leave), keeping its data directory (and, with Raft in memory, its Raft
// stores; its peers' RPCs to it fail from the start of the kill on).
func (c *Cluster) Kill(i int) {
	m := c.Members[i]
	if c.net == nil {
		m.slot.kill()
		return
	}
	tr := c.net.isolate(raft.ServerAddress(m.RaftAddr))
	m.slot.kill()
	refuse(tr)
}

// isolate cuts member m's stopped head off the in-memory Raft network, if
// the cluster has one, and answers what was sent to it.
func (c *Cluster) isolate(m *Member) {
	if c.net != nil {
		refuse(c.net.isolate(raft.ServerAddress(m.RaftAddr)))
	}
}

// Restart starts a killed or stopped member again on its data directory
// and addresses.
func (c *Cluster) Restart(i int) error { return c.start(c.Members[i], len(c.Members)) }

// AddHead starts one more head, with its data directory under dir, that
// joins the cluster's gossip pool without bootstrap-expect, so the leader
// must add it as a voter, and returns its member.
func (c *Cluster) AddHead(dir string) (*Member, error) {
	m, err := c.newMember(len(c.Members), dir)
	if err != nil {
		return nil, err
	}
	c.Members = append(c.Members, m)
	if err := c.start(m, 0); err != nil {
		c.Members = c.Members[:len(c.Members)-1]
		return nil, err
	}
	return m, nil
}

// StoppedHead is a head that Stop shut down cleanly, with its member.
type StoppedHead struct {
	Member *Member
	Head   *head.Head
	// Err is what its Shutdown or Run returned (nil: a clean stop).
	Err error
}

// Stop shuts every running worker, then every running head down cleanly
// (10 s at most each) and returns the heads it stopped, whose tables and
// data directories the caller may still read.
func (c *Cluster) Stop() []StoppedHead {
	c.mu.Lock()
	ws := c.workers
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range ws {
		wg.Add(1)
		go func() { // owned: Stop waits for it below
			defer wg.Done()
			_, _ = m.slot.stop(c.opts.StopTimeout)
			m.closeRuntime()
		}()
	}
	wg.Wait()
	var out []StoppedHead
	for _, m := range c.Members {
		h := m.Head()
		ran, err := m.slot.stop(c.opts.StopTimeout)
		// Cut off only now: its shutdown may hand leadership over. The
		// heads stopped after it then fail at once to reach it (a leader
		// would otherwise try to hand leadership to it and wait).
		c.isolate(m)
		if ran && h != nil {
			out = append(out, StoppedHead{Member: m, Head: h, Err: err})
		}
	}
	return out
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

// Leader returns the index of a running head that leads, or -1.
func (c *Cluster) Leader() int {
	for i, m := range c.Members {
		if h := m.Head(); h != nil && h.IsLeader() {
			return i
		}
	}
	return -1
}

// WaitLeader waits until exactly one running head leads (timeout at most,
// or until ctx ends) and returns its member index.
func (c *Cluster) WaitLeader(ctx context.Context, timeout time.Duration) (int, error) {
	idx := -1
	err := WaitUntil(ctx, timeout, "a single leader", func() bool {
		idx = -1
		n := 0
		for i, m := range c.Members {
			if h := m.Head(); h != nil && h.IsLeader() {
				idx, n = i, n+1
			}
		}
		return n == 1
	})
	return idx, err
}

// GRPCAddrs returns every member's gRPC address, running or not.
func (c *Cluster) GRPCAddrs() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.GRPCAddr
	}
	return out
}

// GossipAddrs returns every member's gossip address, running or not.
func (c *Cluster) GossipAddrs() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.GossipAddr
	}
	return out
}

// Dial returns a client of every head, the leader first when one leads
// (the client keeps to its first head while it answers; a follower would
// forward every write), retrying quickly (20 ms to 500 ms).
func (c *Cluster) Dial(ctx context.Context) (*client.Client, error) {
	addrs := c.GRPCAddrs()
	if l := c.Leader(); l > 0 {
		addrs[0], addrs[l] = addrs[l], addrs[0]
	}
	return client.Dial(ctx, addrs, client.WithBackoff(20*time.Millisecond, 500*time.Millisecond))
}

// WorkerOptions configures a worker that AddWorker starts.
type WorkerOptions struct {
	// ID is the worker's id (default w<n>, n its index from 1); unique in
	// the cluster.
	ID string
	// DataDir is its data directory (default Options.Dir/<id>).
	DataDir string
	// GossipAddr is its gossip address (default a free loopback port).
	GossipAddr string
	// Runtime runs its containers (a fake, process or docker runtime).
	// Required unless NewRuntime is set.
	Runtime contract.Runtime
	// NewRuntime, when set, makes a runtime for each start of the worker
	// (instead of Runtime), and KillWorker and StopWorker close the
	// stopped one's (when it is an io.Closer), as the death of a worker
	// process ends its runtime's goroutines: a restarted worker must take
	// its containers over from the engine alone.
	NewRuntime func() contract.Runtime
	// Capacity is what it offers (zero: worker.Config's default, the
	// machine).
	Capacity worker.Capacity
	// Labels are its placement labels.
	Labels map[string]string
	// Configure, when set, edits the worker's config last, on every start.
	Configure func(*worker.Config)
}

// WorkerMember is one worker slot: its id, data directory and gossip
// address survive kills and restarts.
type WorkerMember struct {
	ID         string
	DataDir    string
	GossipAddr string
	// SandboxAddr is where the worker serves its sandboxes' exec and files
	// to the heads (worker.Config.SandboxAddr): a free port AddWorker
	// picks, kept across restarts of the worker.
	SandboxAddr string

	opts WorkerOptions
	slot slot[*worker.Worker]
	mu   sync.Mutex
	rt   contract.Runtime // the running worker's, from NewRuntime
}

// Worker returns the running worker, or nil while it is killed or stopped.
func (m *WorkerMember) Worker() *worker.Worker { return m.slot.get() }

// Workers returns the cluster's worker slots, in the order they were added.
func (c *Cluster) Workers() []*WorkerMember {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*WorkerMember(nil), c.workers...)
}

// AddWorker starts a worker that joins the heads through gossip and
// returns its slot.
func (c *Cluster) AddWorker(opts WorkerOptions) (*WorkerMember, error) {
	m := &WorkerMember{ID: opts.ID, DataDir: opts.DataDir, GossipAddr: opts.GossipAddr, opts: opts}
	if m.GossipAddr == "" {
		var err error
		if m.GossipAddr, err = FreeAddr(); err != nil {
			return nil, err
		}
	}
	var err error
	if m.SandboxAddr, err = FreeAddr(); err != nil {
		return nil, err
	}
	// The slot is taken before the start, so that concurrent AddWorkers
	// get distinct ids and indexes, and an id is never taken twice.
	c.mu.Lock()
	if m.ID == "" {
		m.ID = fmt.Sprintf("w%d", len(c.workers)+1)
	}
	for _, o := range c.workers {
		if o.ID == m.ID {
			c.mu.Unlock()
			return nil, fmt.Errorf("cluster: a worker %s exists already: give another WorkerOptions.ID", m.ID)
		}
	}
	c.workers = append(c.workers, m)
	c.mu.Unlock()
	if m.DataDir == "" {
		m.DataDir = filepath.Join(c.opts.Dir, m.ID)
	}
	if err := c.startWorker(m); err != nil {
		c.mu.Lock()
		c.workers = slices.DeleteFunc(c.workers, func(o *WorkerMember) bool { return o == m })
		c.mu.Unlock()
		return nil, err
	}
	return m, nil
}

// WorkerConfig returns the config worker m starts with: worker defaults,
// the member's id, directory and address, joining every head's gossip
// address, then WorkerOptions.Configure.
func (c *Cluster) WorkerConfig(m *WorkerMember) worker.Config {
	cfg := worker.DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.GossipAddr = m.ID, m.DataDir, m.GossipAddr
	cfg.SandboxAddr = m.SandboxAddr
	cfg.Runtime = m.opts.Runtime
	if m.opts.Capacity != (worker.Capacity{}) {
		cfg.Capacity = m.opts.Capacity
	}
	cfg.Labels = m.opts.Labels
	cfg.Join = c.GossipAddrs()
	cfg.Logger = c.logger // worker.New names the worker in every line
	if m.opts.Configure != nil {
		m.opts.Configure(&cfg)
	}
	return cfg
}

// startWorker starts worker m and records the gossip address it bound. It
// refuses a member whose worker still runs.
func (c *Cluster) startWorker(m *WorkerMember) error {
	if m.Worker() != nil {
		return fmt.Errorf("worker %s is running: kill or stop it before starting it again", m.ID)
	}
	if m.opts.NewRuntime != nil {
		rt := m.opts.NewRuntime()
		m.mu.Lock()
		m.rt = rt
		m.mu.Unlock()
		m.opts.Runtime = rt
	}
	w, err := worker.New(c.WorkerConfig(m))
	if err != nil {
		m.closeRuntime()
		return fmt.Errorf("start worker %s: %w", m.ID, err)
	}
	m.GossipAddr = w.GossipAddr()
	m.slot.run(c.runEnded, "worker "+m.ID, w)
	return nil
}

// KillWorker stops worker i as a crash would; its containers keep running.
func (c *Cluster) KillWorker(i int) {
	m := c.Workers()[i]
	m.slot.kill()
	m.closeRuntime()
}

// StopWorker shuts worker i down cleanly (Worker.Shutdown: it leaves the
// gossip pool) and returns the error of its Shutdown or Run.
func (c *Cluster) StopWorker(i int) error {
	m := c.Workers()[i]
	_, err := m.slot.stop(c.opts.StopTimeout)
	m.closeRuntime()
	return err
}

// RestartWorker starts a killed or stopped worker again with the same id,
// data directory and gossip address.
func (c *Cluster) RestartWorker(i int) error { return c.startWorker(c.Workers()[i]) }

// closeRuntime closes the runtime NewRuntime made for the worker's last
// start, once that worker stopped.
func (m *WorkerMember) closeRuntime() {
	m.mu.Lock()
	rt := m.rt
	m.rt = nil
	m.mu.Unlock()
	if cl, ok := rt.(io.Closer); ok && m.opts.NewRuntime != nil {
		_ = cl.Close()
	}
}

// WaitUntil polls cond every 10 ms until it holds, ctx ends or timeout
// passes; the error names what it waited for.
func WaitUntil(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}
