package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	localcluster "github.com/megaflow/megaflow/internal/cluster"
	"github.com/megaflow/megaflow/internal/obs"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker"
)

// cluster is the harness's in-process cluster (internal/cluster): three
// real heads (Raft over TCP loopback, BoltDB files under dir, gossip,
// gRPC) on hashicorp/raft's default timing, and real workers whose
// runtimes the harness gives (the fake runtime with simulated instances).
type cluster struct {
	*localcluster.Cluster
}

// newCluster starts n heads that bootstrap together under dir and waits
// (until ctx ends, 30 s at most) for a leader. edit, when set, edits each
// head's config. The heads keep hashicorp/raft's default timing, not the
// tests' Fast one: on a busy shared machine 400 ms timeouts made leaders
// flap under 10,000 tasks.
func newCluster(ctx context.Context, dir string, n int, log *slog.Logger, edit func(*head.Config)) (*cluster, error) {
	c, err := localcluster.Start(ctx, localcluster.Options{Dir: dir, Heads: n, Logger: log,
		ConfigureHead: func(_ int, cfg *head.Config) {
			if edit != nil {
				edit(cfg)
			}
		}})
	if err != nil {
		return nil, err
	}
	return &cluster{c}, nil
}

// term returns the Raft term of the leader (0 when none leads).
func (c *cluster) term() uint64 {
	if l := c.Leader(); l >= 0 {
		if h := c.Members[l].Head(); h != nil {
			return h.Node().Raft().CurrentTerm()
		}
	}
	return 0
}

// dial returns a client whose first head is the leader.
func (c *cluster) dial(ctx context.Context) (*client.Client, error) { return c.Dial(ctx) }

// addWorker starts a worker on rt offering capacity, reconnecting fast
// (20 ms to 500 ms); edit, when set, edits its config. It returns the
// worker's id.
func (c *cluster) addWorker(rt contract.Runtime, capacity worker.Capacity, edit func(*worker.Config)) (string, error) {
	m, err := c.AddWorker(localcluster.WorkerOptions{Runtime: rt, Capacity: capacity, Configure: func(cfg *worker.Config) {
		cfg.ReconnectMin, cfg.ReconnectMax = 20*time.Millisecond, 500*time.Millisecond
		if edit != nil {
			edit(cfg)
		}
	}})
	if err != nil {
		return "", err
	}
	return m.ID, nil
}

// waitWorkers waits until the leader's table shows n alive workers.
func (c *cluster) waitWorkers(ctx context.Context, cl *client.Client, n int) error {
	return waitUntil(ctx, 3*time.Minute, fmt.Sprintf("%d alive workers", n), func() bool {
		return aliveWorkers(ctx, cl, 0) >= n
	})
}

// aliveWorkers returns how many workers the table shows alive, or -1 when
// ListWorkers fails; timeout bounds the call (0: ctx alone).
func aliveWorkers(ctx context.Context, cl *client.Client, timeout time.Duration) int {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	ws, err := cl.ListWorkers(ctx, client.ReadOptions{})
	if err != nil {
		return -1
	}
	alive := 0
	for _, w := range ws {
		if w.GetStatus() == wire.WorkerStatus_WORKER_STATUS_ALIVE {
			alive++
		}
	}
	return alive
}

// Stop shuts every worker, then every head, down cleanly.
func (c *cluster) Stop() { c.Cluster.Stop() }

// waitUntil polls cond every 10 ms until it holds, ctx ends or timeout
// passes; the error names what it waited for.
func waitUntil(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	return localcluster.WaitUntil(ctx, timeout, what, cond)
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
	// commands counts the commands the leader proposed and applied
	// (the samples of megaflow_raft_apply_duration_seconds).
	commands float64
}

// stageMeans reads the leader's metrics into a stageMeans; zero when no
// head leads.
func (c *cluster) stageMeans() stageMeans {
	var out stageMeans
	for _, h := range c.Running() {
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
		return stageMeans{queued: mean("queued"), starting: mean("starting"), running: mean("running"), apply: mean("apply"), commands: n["apply"]}
	}
	return out
}
