// Package testcluster wraps the in-process cluster (internal/cluster) for
// tests: real heads running hashicorp/raft on an in-memory network with
// in-memory log, stable and snapshot stores (cluster.Options.RaftInMemory;
// Options.RaftOnDisk gives the Raft TCP transports and BoltDB and snapshot
// files of production instead), real gossip and gRPC on loopback, data
// directories in the test's temporary directories, the tests' short
// timeouts, failures through testing.TB, and a replay check of every
// head's Raft stores at the end. Heads can be killed (as a crash would)
// and restarted on their data directories and Raft stores. Only tests
// import it.
//
// # Waiting tests run in parallel
//
// A test that mostly waits (out a lease, a fault, a timeout, tasks of
// seconds) while using little CPU calls t.Parallel at its start. The
// testing package holds such tests until every serial test of the
// package has ended, then runs them -parallel (GOMAXPROCS) at a time,
// beside each other only: no CPU-heavy test (thousands of tasks, many
// containers at once) shares the machine with them, so the test
// clusters' fast Raft timing (a 300 ms leader lease) sees no more load
// than before. A test that needs one leader throughout (it would retry or
// fail on a leader change) sets head.Config.Fast to false: Raft's
// production timing. Tests that compute, or that check timing closely,
// stay serial.
package testcluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/cluster"
	"github.com/megaflow/megaflow/internal/lease"
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
	// RaftOnDisk runs Raft as production does, over TCP loopback with
	// BoltDB and file snapshots under each head's DataDir/raft, for tests
	// whose point is that path: a restart from raft.db, file snapshots,
	// reading or damaging the Raft files, cutting Raft's TCP connections.
	// False, the default, runs Raft in memory
	// (cluster.Options.RaftInMemory), which is faster and otherwise the
	// same Raft: kills and restarts keep what each head wrote.
	RaftOnDisk bool
}

// Member is one head slot of the cluster (cluster.Member).
type Member = cluster.Member

// WorkerMember is one worker slot (cluster.WorkerMember).
type WorkerMember = cluster.WorkerMember

// WorkerOptions tunes a worker started by AddWorker (cluster.WorkerOptions).
// A zero Capacity is 8 cores and 16 GiB here.
type WorkerOptions = cluster.WorkerOptions

// Cluster is an in-process cluster (internal/cluster) started for a test,
// with the tests' timing: Raft's fast timeouts, a 3 s + 1 s worker lease,
// 500 ms heartbeats, 20 ms to 500 ms reconnects.
type Cluster struct {
	*cluster.Cluster
	t    testing.TB
	opts Options
}

// New starts a cluster whose heads bootstrap together, and waits for a
// leader that has committed the cluster id and the rules version (the
// writes a new cluster's leader makes on its own). It registers Stop as t's cleanup.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c := &Cluster{t: t, opts: opts}
	// The last info lines are printed if the test fails; all of them, to
	// stderr, with Verbose or MEGAFLOW_TEST_LOG=1.
	fl := new(failLog)
	t.Cleanup(func() { fl.print(t) })
	var logHandler slog.Handler = fl.handler()
	if opts.Verbose || os.Getenv("MEGAFLOW_TEST_LOG") == "1" {
		logHandler = slog.NewMultiHandler(logHandler, slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cc, err := cluster.Start(context.Background(), cluster.Options{
		Dir: t.TempDir(), Heads: opts.Heads, RaftInMemory: !opts.RaftOnDisk,
		Logger: slog.New(logHandler),
		// No daemon's Run returns an error unless something broke (a
		// head's gRPC server failed; a worker's Run was called twice),
		// and every Run returns once its daemon is killed or stopped:
		// otherwise the test fails, with the error in its log.
		RunError: func(daemon string, err error) { t.Errorf("%s: %v", daemon, err) },
		ConfigureHead: func(_ int, cfg *head.Config) {
			cfg.Fast = true
			// A short lease: a killed worker's attempts are re-queued within 4 s
			// (workers heartbeat every 500 ms here).
			cfg.Lease = lease.Config{Duration: 3 * time.Second, Margin: time.Second}
			if opts.Configure != nil {
				opts.Configure(cfg)
			}
		},
	})
	if err != nil {
		t.Fatalf("test cluster: %v", err)
	}
	c.Cluster = cc
	t.Cleanup(c.Stop)
	// A new leader commits the cluster id and this build's rules version
	// once, in the background, after its barrier: a test that measures
	// "nothing changed" from its first request must not see those writes
	// land in the middle.
	WaitFor(t, 30*time.Second, "the leader to commit the cluster id and rules version", func() bool {
		for _, h := range c.Running() {
			if v := h.FSM().View(); h.IsLeader() && v.ClusterID() != 0 && v.Rules() == fsm.RulesCurrent {
				return true
			}
		}
		return false
	})
	return c
}

// FreeAddr returns a loopback address whose port was free a moment ago
// (cluster.FreeAddr); it fails the test when none is.
func FreeAddr(t testing.TB) string {
	t.Helper()
	a, err := cluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Restart starts a killed member again on its data directory, Raft stores
// and addresses; it fails the test on an error.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if err := c.Cluster.Restart(i); err != nil {
		c.t.Fatal(err)
	}
}

// Stop shuts every running worker and head down cleanly, then checks that
// each head that was running rebuilds, from its Raft stores alone, the
// table it had (checkReplay). New registers it as the test's cleanup; a
// test may call it earlier.
func (c *Cluster) Stop() {
	c.t.Helper()
	stopped := c.Cluster.Stop()
	for _, s := range stopped {
		if s.Err != nil {
			c.t.Logf("head %s: shutdown: %v", s.Member.ID, s.Err)
		}
	}
	c.checkReplay(stopped)
}

// WaitLeader waits until exactly one running head leads and returns its
// member index; it fails the test after timeout.
func (c *Cluster) WaitLeader(timeout time.Duration) int {
	c.t.Helper()
	i, err := c.Cluster.WaitLeader(context.Background(), timeout)
	if err != nil {
		c.t.Fatal(err)
	}
	return i
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
	if err := cluster.WaitUntil(context.Background(), timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}

// AddHead starts one more head that joins the cluster's gossip pool without
// bootstrap-expect, so the leader must add it, and returns its member.
func (c *Cluster) AddHead() *Member {
	c.t.Helper()
	m, err := c.Cluster.AddHead(filepath.Join(c.t.TempDir(), "head"))
	if err != nil {
		c.t.Fatal(err)
	}
	return m
}

// AddWorker starts a worker that joins the heads through gossip, with
// the tests' timing (Config.Fast, 500 ms heartbeats, 20 ms to 500 ms
// reconnects) before opts.Configure, and returns its slot.
func (c *Cluster) AddWorker(opts WorkerOptions) *WorkerMember {
	c.t.Helper()
	if opts.Capacity == (worker.Capacity{}) {
		opts.Capacity = worker.Capacity{CPUMillis: 8000, MemoryBytes: 16 << 30}
	}
	configure := opts.Configure
	opts.Configure = func(cfg *worker.Config) {
		cfg.Fast = true
		cfg.HeartbeatInterval = 500 * time.Millisecond
		cfg.ReconnectMin, cfg.ReconnectMax = 20*time.Millisecond, 500*time.Millisecond
		if configure != nil {
			configure(cfg)
		}
	}
	m, err := c.Cluster.AddWorker(opts)
	if err != nil {
		c.t.Fatal(err)
	}
	return m
}

// RestartWorker starts a killed or stopped worker again with the same id
// and data directory; it fails the test on an error.
func (c *Cluster) RestartWorker(i int) {
	c.t.Helper()
	if err := c.Cluster.RestartWorker(i); err != nil {
		c.t.Fatal(err)
	}
}

// StopWorker shuts worker i down cleanly (Worker.Shutdown: it leaves the
// gossip pool; the process runtime's processes are stopped).
func (c *Cluster) StopWorker(i int) { _ = c.Cluster.StopWorker(i) }

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
