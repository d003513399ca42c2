// Command megaflow-head runs one head of a MegaFlow cluster: a Raft member
// holding the replicated task table, serving the client API over gRPC and
// finding its peers by gossip.
//
//	megaflow-head --node-id h1 --data-dir /var/lib/megaflow/h1 \
//	  --raft-addr 10.0.0.1:7000 --grpc-addr 10.0.0.1:7070 --gossip-addr 10.0.0.1:7946 \
//	  --bootstrap-expect 3 --join 10.0.0.2:7946,10.0.0.3:7946
//
// or with the same settings in a file (deploy/config/head.yaml):
//
//	megaflow-head --config /etc/megaflow/head.yaml
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/artifact/backends"
	"github.com/megaflow/megaflow/internal/daemonconfig"
	"github.com/megaflow/megaflow/internal/gossip"
	"github.com/megaflow/megaflow/internal/logging"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/version"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	cfg := head.DefaultConfig()
	var join, logFormat, logLevel, queueWeights, queueStrategies string
	var workerGrace time.Duration
	var artifactsURL string
	var tlsFiles tlsconfig.Files
	var gossipKey string
	var startupProfile string
	cmd := &cobra.Command{
		Use:   "megaflow-head",
		Short: "Run a MegaFlow head: a Raft member holding the task table",
		Long: `megaflow-head runs one head of a MegaFlow cluster. Heads find each other
through gossip; once --bootstrap-expect heads see each other they bootstrap a
Raft cluster together. A head started later with --join and no
--bootstrap-expect is added by the leader. A head restarted on the same
--data-dir rejoins with its state.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		Version:      headVersion(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			started := time.Now()
			stopProfile, err := startCPUProfile(startupProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			logger, err := logging.New(os.Stderr, logFormat, logLevel)
			if err != nil {
				return err
			}
			cfg.Logger = logger
			if workerGrace > 0 {
				cfg.Lease.Duration, cfg.Lease.Margin = workerGrace*2/3, workerGrace/3
			}
			if err := cfg.Scheduler.ParseQueuePolicies(queueWeights, queueStrategies); err != nil {
				return err
			}
			for _, j := range strings.Split(join, ",") {
				if j = strings.TrimSpace(j); j != "" {
					cfg.Join = append(cfg.Join, j)
				}
			}
			store, err := backends.Open(cmd.Context(), artifactsURL, cfg.DataDir)
			if err != nil {
				return fmt.Errorf("megaflow-head: --artifacts: %w", err)
			}
			defer store.Close()
			cfg.Artifacts = store
			cfg.Version = version.Get().Short()
			if gossipKey != "" {
				if cfg.GossipKey, err = gossip.DecodeKey(gossipKey); err != nil {
					return fmt.Errorf("megaflow-head: --gossip-key: %w", err)
				}
			}
			if tlsFiles.Enabled() {
				if cfg.TLS, err = tlsconfig.Load(tlsFiles, tlsconfig.RoleHead); err != nil {
					return fmt.Errorf("megaflow-head: %w", err)
				}
				stopReload := tlsconfig.ReloadOnSIGHUP(cfg.TLS, logger)
				defer stopReload()
				if cfg.GossipKey == nil {
					logger.Warn("TLS is on but gossip is not encrypted: pass --gossip-key (docs/security.md)")
				}
			} else {
				logger.Warn("TLS is off: every link of this head is plaintext and unauthenticated (docs/security.md)")
			}
			h, err := head.New(cfg)
			if err != nil {
				return fmt.Errorf("megaflow-head: %w", err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			readyDone := make(chan struct{})
			go func() {
				defer close(readyDone)
				if waitReady(ctx, h) {
					logger.Info("head ready", "since_process_start", time.Since(started).Round(time.Millisecond), "applied_index", h.AppliedIndex())
					stopProfile()
				}
			}()
			runErr := h.Run(ctx)
			stop()
			<-readyDone
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := h.Shutdown(shutdownCtx); err != nil && runErr == nil {
				runErr = err
			}
			return runErr
		},
	}
	cmd.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	f := cmd.Flags()
	f.StringVar(&cfg.NodeID, "node-id", "", "unique id of this head (required)")
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory for the Raft log and snapshots (required)")
	f.StringVar(&cfg.RaftAddr, "raft-addr", "127.0.0.1:7000", "host:port of the Raft transport")
	f.StringVar(&cfg.GRPCAddr, "grpc-addr", "127.0.0.1:7070", "host:port of the gRPC API")
	f.StringVar(&cfg.GossipAddr, "gossip-addr", "127.0.0.1:7946", "host:port of the gossip pool")
	f.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:9090", "host:port serving /metrics, /healthz, /readyz and the dashboard (empty: none)")
	f.IntVar(&cfg.BootstrapExpect, "bootstrap-expect", 0, "bootstrap a new cluster once this many heads see each other (0: join an existing one)")
	f.StringVar(&join, "join", "", "comma-separated gossip addresses of heads to join")
	f.Float64Var(&cfg.RateLimit, "rate-limit", cfg.RateLimit, "API calls per second each tenant may make to this head (0: no limit)")
	f.StringVar(&queueWeights, "queue-weights", "", "weighted fair share between queues, e.g. train=2,eval=1,synth=1,default=1 (default: 1 each)")
	f.StringVar(&queueStrategies, "queue-strategies", "", "placement per queue, spread or binpack, e.g. eval=binpack (default: spread)")
	f.IntVar(&cfg.RateBurst, "rate-burst", cfg.RateBurst, "calls a tenant may make at once above --rate-limit (0: the rate, rounded up)")
	f.DurationVar(&cfg.MaxQueueWait, "max-queue-wait", cfg.MaxQueueWait, "fail a task queued this long with an infeasible reason (no worker can ever run it, or over its tenant's quota) (0: never)")
	f.IntVar(&cfg.MaxSnapshots, "max-snapshots", cfg.MaxSnapshots, "sandbox snapshots one tenant may hold (0: 64)")
	f.DurationVar(&cfg.Lease.Duration, "worker-lease", cfg.Lease.Duration, "worker lease: a worker with no heartbeat acked for this long stops its attempts (and its tasks' init kills them when the worker is gone)")
	f.DurationVar(&cfg.Lease.Margin, "worker-lease-margin", cfg.Lease.Margin, "how long after --worker-lease the leader waits before it re-queues the attempts of a worker it has not heard from")
	f.DurationVar(&workerGrace, "worker-grace", 0, "deprecated: sets --worker-lease to 2/3 and --worker-lease-margin to 1/3 of this (the time before a silent worker's attempts are re-queued)")
	_ = f.MarkHidden("worker-grace")
	f.StringVar(&artifactsURL, "artifacts", "", "artifact store the workers upload to, read by megaflow logs/artifacts: file:///path or s3://bucket/prefix?endpoint=...&region=...&path_style=true (default file://<data-dir>/artifacts; a cluster of several machines needs shared storage such as S3)")
	f.DurationVar(&cfg.ArtifactRetention, "artifact-retention", 0, "delete the artifacts of a finished graph this long after it ended (0: keep them until the graph is deleted; a graph's label megaflow.io/artifact-retention overrides it)")
	f.DurationVar(&cfg.GraphRetention, "graph-retention", cfg.GraphRetention, "archive a finished graph this long after it ended: its tasks leave the head's memory, its summary stays "+
		"(megaflow status, megaflow graphs --all) (0: keep it live until deleted; a graph's label megaflow.io/graph-retention overrides it)")
	f.DurationVar(&cfg.ArchiveRetention, "archive-retention", cfg.ArchiveRetention, "drop an archived graph's summary this long after it was archived (0: keep it until deleted)")
	f.StringVar(&tlsFiles.CA, "tls-ca", "", "CA certificate (PEM) of the cluster: turns on mutual TLS for gRPC, Raft, forwarding and sandbox calls, with --tls-cert and --tls-key (docs/security.md; reloaded on SIGHUP)")
	f.StringVar(&tlsFiles.Cert, "tls-cert", "", "this head's certificate (PEM, from megaflow tls cert create --head --node-id <this head's --node-id>)")
	f.StringVar(&tlsFiles.Key, "tls-key", "", "the private key of --tls-cert (PEM)")
	f.StringVar(&gossipKey, "gossip-key", "", "encrypt and authenticate gossip with this key: 32 random bytes in base64, the same on every head and worker (megaflow tls gossip-key)")
	f.BoolVar(&cfg.ACL, "acl", false, "authorize every API call by token (docs/security.md): bootstrap the first admin token with megaflow acl bootstrap; every head of the cluster needs it")
	f.DurationVar(&cfg.ACLMaxStaleness, "acl-max-staleness", head.DefaultACLMaxStaleness, "with --acl, a follower that has not heard from the leader for this long refuses token calls (the bound on a missed revocation)")
	f.BoolVar(&cfg.Pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ on --http-addr (CPU and heap profiles, goroutines, traces); with --acl it needs an admin token")
	f.Uint64Var(&cfg.SnapshotThreshold, "raft-snapshot-threshold", cfg.SnapshotThreshold, "take a Raft snapshot once this many log entries follow the last one (checked every --raft-snapshot-interval): a restarted head replays at most about this many entries on top of its snapshot")
	f.DurationVar(&cfg.SnapshotInterval, "raft-snapshot-interval", cfg.SnapshotInterval, "how often Raft checks --raft-snapshot-threshold (with up to as much again of jitter)")
	f.DurationVar(&cfg.SnapshotReplayBudget, "raft-snapshot-replay-budget", cfg.SnapshotReplayBudget, "take a Raft snapshot once the log entries applied since the last one took this long to apply, so that a restart replays about this much on top of its snapshot (0: only --raft-snapshot-threshold)")
	f.DurationVar(&cfg.SnapshotMinGap, "raft-snapshot-min-gap", cfg.SnapshotMinGap, "least time between two snapshots for --raft-snapshot-replay-budget (also at least 10 times the last one's duration)")
	f.Uint64Var(&cfg.TrailingLogs, "raft-trailing-logs", cfg.TrailingLogs, "log entries a snapshot leaves in the Raft log, so a follower that lags by fewer catches up without a whole snapshot")
	f.StringVar(&startupProfile, "startup-cpu-profile", "", "write a CPU profile from the process's start until the head is first ready (/readyz) to this file: what a restart spends its time on")
	_ = f.MarkHidden("startup-cpu-profile")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	_ = cmd.MarkFlagRequired("node-id")
	_ = cmd.MarkFlagRequired("data-dir")
	daemonconfig.Register(cmd)
	cmd.AddCommand(exportSnapshotCmd())
	return cmd
}

// startCPUProfile starts a CPU profile into path ("": none) and returns the
// function that stops it and closes the file, once (later calls do
// nothing).
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("megaflow-head: --startup-cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("megaflow-head: --startup-cpu-profile: %w", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		})
	}, nil
}

// waitReady polls h's readiness every 50 ms until it is ready (true) or
// ctx ends (false).
func waitReady(ctx context.Context, h *head.Head) bool {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if h.Ready() == nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// exportSnapshotCmd is `megaflow-head export-snapshot`: the table of a
// stopped head, from its data directory, as a snapshot file that
// `megaflow operator snapshot restore` takes.
func exportSnapshotCmd() *cobra.Command {
	var dataDir, out string
	cmd := &cobra.Command{
		Use:   "export-snapshot --data-dir DIR --out FILE",
		Short: "Write the task table of a stopped head's data directory to a snapshot file",
		Long: `Write the task table a stopped head left in its data directory (its newest
Raft snapshot and every log entry after it, committed or not, as a restart
would replay them) to FILE, in the format 'megaflow operator snapshot save'
writes and 'megaflow operator snapshot restore' takes: the way back for a
cluster that lost its quorum (docs/operations.md). The head must be stopped.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tmp, err := os.CreateTemp(filepath.Dir(out), filepath.Base(out)+".*.tmp")
			if err != nil {
				return err
			}
			defer os.Remove(tmp.Name())
			defer tmp.Close()
			info, err := head.ExportSnapshot(dataDir, tmp)
			if err != nil {
				return err
			}
			if err := tmp.Sync(); err != nil {
				return err
			}
			if err := tmp.Close(); err != nil {
				return err
			}
			if err := os.Rename(tmp.Name(), out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "exported %s to %s: index %d, %d graphs (%d archived), %d tasks, %d workers, rules %d, cluster %s, %d bytes, sha256 %s\n",
				dataDir, out, info.GetIndex(), info.GetGraphs(), info.GetArchivedGraphs(), info.GetTasks(), info.GetWorkers(), info.GetRules(), info.GetClusterId(), info.GetSizeBytes(), info.GetSha256())
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the stopped head's --data-dir (required)")
	cmd.Flags().StringVar(&out, "out", "", "snapshot file to write (required)")
	_ = cmd.MarkFlagRequired("data-dir")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

// headVersion is what --version prints after the program's name: the
// build (version.Info.String) and the highest FSM rules version it
// applies, e.g. "v0.5.0 (commit 1a2b3c4d5e6f, built
// 2026-12-01T10:00:00Z, go1.26.8), rules 4". A head stops at an
// OpSetRules above it (fsm.ErrRulesTooNew), and that message points here.
func headVersion() string {
	return version.Get().String() + ", rules " + strconv.FormatUint(fsm.RulesCurrent, 10)
}
