package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/obs"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker"
)

// daemon is a head or a worker run by a cluster.
type daemon interface {
	Run(ctx context.Context) error
	Shutdown(ctx context.Context) error
	Kill()
}

// running is one daemon and the goroutine running it, which the cluster owns.
type running struct {
	name   string
	d      daemon
	cancel context.CancelFunc
	done   chan struct{}
}

func start(name string, d daemon, log *slog.Logger) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{name: name, d: d, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		if err := d.Run(ctx); err != nil && ctx.Err() == nil {
			log.Warn("daemon ended", "name", name, "err", err)
		}
	}()
	return r
}

// stop shuts r down cleanly (at most 10 s) and waits for its goroutine.
func (r *running) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = r.d.Shutdown(ctx)
	cancel()
	r.cancel()
	<-r.done
}

// kill stops r as a crash would and waits for its goroutine.
func (r *running) kill() {
	r.d.Kill()
	r.cancel()
	<-r.done
}

// cluster is a MegaFlow cluster in this process: real heads (Raft over
// TCP loopback, BoltDB files under dir, gossip, gRPC) and real workers,
// whose runtimes the caller gives (the fake runtime with simulated
// instances). It is what internal/testcluster is for tests, without
// testing.TB. Stop ends everything it started.
type cluster struct {
	dir       string
	log       *slog.Logger
	heads     []*head.Head
	headRuns  []*running
	gossip    []string
	grpc      []string
	mu        sync.Mutex
	workers   map[string]*running
	workerSeq int
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// newCluster starts n heads that bootstrap together under dir and waits
// (until ctx ends) for a leader. edit, when set, edits each head's config.
func newCluster(ctx context.Context, dir string, n int, log *slog.Logger, edit func(*head.Config)) (*cluster, error) {
	c := &cluster{dir: dir, log: log, workers: map[string]*running{}}
	type addrs struct{ raft, grpc, gossip string }
	var as []addrs
	for range n {
		var a addrs
		var err error
		for _, p := range []*string{&a.raft, &a.grpc, &a.gossip} {
			if *p, err = freeAddr(); err != nil {
				return nil, err
			}
		}
		as = append(as, a)
		c.gossip = append(c.gossip, a.gossip)
		c.grpc = append(c.grpc, a.grpc)
	}
	for i, a := range as {
		cfg := head.DefaultConfig()
		cfg.NodeID = fmt.Sprintf("h%d", i+1)
		cfg.DataDir = filepath.Join(dir, cfg.NodeID)
		cfg.RaftAddr, cfg.GRPCAddr, cfg.GossipAddr = a.raft, a.grpc, a.gossip
		cfg.BootstrapExpect = n
		// hashicorp/raft's default timing, not the tests' Fast one: on a busy
		// shared machine 400 ms timeouts made leaders flap under 10,000 tasks.
		for j, o := range as {
			if j != i {
				cfg.Join = append(cfg.Join, o.gossip)
			}
		}
		cfg.Logger = log.With("head", cfg.NodeID)
		if edit != nil {
			edit(&cfg)
		}
		h, err := head.New(cfg)
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("start head %s: %w", cfg.NodeID, err)
		}
		c.heads = append(c.heads, h)
		c.headRuns = append(c.headRuns, start("head "+cfg.NodeID, h, log))
	}
	if _, err := c.waitLeader(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// term returns the Raft term of the leader (0 when none leads).
func (c *cluster) term() uint64 {
	if l := c.leader(); l >= 0 {
		return c.heads[l].Node().Raft().CurrentTerm()
	}
	return 0
}

// waitLeader waits until one head leads and returns its index.
func (c *cluster) waitLeader(ctx context.Context) (int, error) {
	err := waitUntil(ctx, 30*time.Second, "a head leader", func() bool { return c.leader() >= 0 })
	return c.leader(), err
}

func (c *cluster) leader() int {
	for i, h := range c.heads {
		if h.IsLeader() {
			return i
		}
	}
	return -1
}

// dial returns a client whose first head is the leader (the client keeps
// talking to its first head; followers would forward every write).
func (c *cluster) dial(ctx context.Context) (*client.Client, error) {
	addrs := append([]string(nil), c.grpc...)
	if l := c.leader(); l > 0 {
		addrs[0], addrs[l] = addrs[l], addrs[0]
	}
	return client.Dial(ctx, addrs, client.WithBackoff(20*time.Millisecond, 500*time.Millisecond))
}

// addWorker starts a worker on rt offering capacity; edit, when set, edits
// its config. It returns the worker's id.
func (c *cluster) addWorker(rt contract.Runtime, capacity worker.Capacity, edit func(*worker.Config)) (string, error) {
	c.mu.Lock()
	c.workerSeq++
	id := fmt.Sprintf("w%d", c.workerSeq)
	c.mu.Unlock()
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	cfg := worker.DefaultConfig()
	cfg.NodeID = id
	cfg.DataDir = filepath.Join(c.dir, id)
	cfg.GossipAddr = addr
	cfg.Join = c.gossip
	cfg.Runtime = rt
	cfg.Capacity = capacity
	cfg.ReconnectMin, cfg.ReconnectMax = 20*time.Millisecond, 500*time.Millisecond
	cfg.Logger = c.log.With("worker", id)
	if edit != nil {
		edit(&cfg)
	}
	w, err := worker.New(cfg)
	if err != nil {
		return "", fmt.Errorf("start worker %s: %w", id, err)
	}
	c.mu.Lock()
	c.workers[id] = start("worker "+id, w, c.log)
	c.mu.Unlock()
	return id, nil
}

// killWorker crashes worker id (no clean stop, no gossip leave).
func (c *cluster) killWorker(id string) {
	c.mu.Lock()
	r := c.workers[id]
	delete(c.workers, id)
	c.mu.Unlock()
	if r != nil {
		r.kill()
	}
}

// waitWorkers waits until the leader's table shows n alive workers.
func (c *cluster) waitWorkers(ctx context.Context, cl *client.Client, n int) error {
	return waitUntil(ctx, 3*time.Minute, fmt.Sprintf("%d alive workers", n), func() bool {
		ws, err := cl.ListWorkers(ctx, client.ReadOptions{})
		if err != nil {
			return false
		}
		alive := 0
		for _, w := range ws {
			if w.GetStatus() == wire.WorkerStatus_WORKER_STATUS_ALIVE {
				alive++
			}
		}
		return alive >= n
	})
}

// Stop shuts every worker, then every head, down cleanly.
func (c *cluster) Stop() {
	c.mu.Lock()
	ws := c.workers
	c.workers = map[string]*running{}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); r.stop() }()
	}
	wg.Wait()
	for _, r := range c.headRuns {
		r.stop()
	}
}

// waitUntil polls cond every 10 ms until it holds, ctx ends or timeout
// passes; the error names what it waited for.
func waitUntil(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
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

// newLogger returns the harness's logger for the system under test: its
// logs go to path (warnings and errors only unless verbose), so that the
// terminal shows only the harness's progress.
func newLogger(path string, verbose bool) (*slog.Logger, io.Closer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("create the log file: %w", err)
	}
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: level})), f, nil
}

// stageMeans is where a run's time went, from the leader's metrics: the
// mean time per attempt in the stages of
// megaflow_attempt_stage_duration_seconds and the mean time per command of
// megaflow_raft_apply_duration_seconds, in ms.
type stageMeans struct {
	queued, starting, running, apply float64
}

// stageMeans reads the leader's metrics into a stageMeans; zero when no
// head leads.
func (c *cluster) stageMeans() stageMeans {
	var out stageMeans
	for _, h := range c.heads {
		if !h.IsLeader() {
			continue
		}
		fams, err := h.Registry().Gather()
		if err != nil {
			return out
		}
		sum, n := map[string]float64{}, map[string]float64{}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				key := ""
				switch f.GetName() {
				case obs.Namespace + "_raft_apply_duration_seconds":
					key = "apply"
				case obs.Namespace + "_attempt_stage_duration_seconds":
					for _, l := range m.GetLabel() {
						if l.GetName() == "stage" {
							key = l.GetValue()
						}
					}
				}
				if key != "" {
					sum[key] += m.GetHistogram().GetSampleSum()
					n[key] += float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
		mean := func(k string) float64 {
			if n[k] == 0 {
				return 0
			}
			return 1000 * sum[k] / n[k]
		}
		return stageMeans{queued: mean("queued"), starting: mean("starting"), running: mean("running"), apply: mean("apply")}
	}
	return out
}
