// Command megaflow-worker runs one worker of a MegaFlow cluster: it joins
// the heads' gossip pool, keeps a stream to the head leader and runs each
// assigned task attempt in its own container (Docker) or process group.
//
//	megaflow-worker --node-id w1 --data-dir /var/lib/megaflow/w1 \
//	  --gossip-addr 10.0.0.11:7946 --join 10.0.0.1:7946,10.0.0.2:7946 \
//	  --runtime docker --labels zone=a,disk=ssd
//
// or with the same settings in a file (deploy/config/worker.yaml):
//
//	megaflow-worker --config /etc/megaflow/worker.yaml
//
// Without --node-id the worker takes the id kept in <data-dir>/node-id, or
// on its first start its hostname, which it keeps there (nodeid.go): a
// container's short id, so that `docker-compose up --scale worker=N`
// gives N workers of their own ids (deploy/compose).
//
// On SIGINT or SIGTERM the worker leaves the pool and exits; its containers
// keep running, and the worker restarted with the same --node-id takes them
// over (the process runtime's processes are stopped instead: nothing could
// take them over).
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/internal/artifact/backends"
	"github.com/megaflow/megaflow/internal/blob/spool"
	"github.com/megaflow/megaflow/internal/daemonconfig"
	"github.com/megaflow/megaflow/internal/gossip"
	"github.com/megaflow/megaflow/internal/logging"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/version"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/docker"
	"github.com/megaflow/megaflow/runtime/process"
	"github.com/megaflow/megaflow/worker"
	"github.com/megaflow/megaflow/worker/attempt"
)

func main() {
	if err := newCommand(os.Stderr).Execute(); err != nil {
		os.Exit(1)
	}
}

// flags are the command line values that do not go straight into the
// worker's Config.
type flags struct {
	join, heads, labels string
	runtime             string
	dockerHost          string
	logFormat, logLevel string
	cpuMillis, memBytes int64
	gpus                int32
	nvml                bool
	shutdownGrace       time.Duration
	artifacts           string
	spoolMaxBytes       int64
	servicePorts        string
	initPath            string
	tls                 tlsconfig.Files
	gossipKey           string
}

func newCommand(out io.Writer) *cobra.Command {
	cfg := worker.DefaultConfig()
	var f flags
	cmd := &cobra.Command{
		Use:     "megaflow-worker",
		Short:   "Run a MegaFlow worker: it runs task attempts in containers",
		Version: version.Get().String(),
		Long: `megaflow-worker runs one worker of a MegaFlow cluster. It joins the heads'
gossip pool (--join), finds the leader among the heads (or the --heads gRPC
addresses), and runs every attempt the leader assigns in its own container
(--runtime docker) or process group (--runtime process). Each attempt's
output goes to <data-dir>/logs/<graph>+<task>/<attempt>.log.

Without --node-id the worker uses the id kept in <data-dir>/node-id, or on
its first start the hostname (a container's short id), which it keeps there.

On SIGINT or SIGTERM the worker leaves the pool and exits; running containers
are left running, and the worker restarted with the same --node-id announces
them to the leader and takes over those the leader still wants. The process
runtime's processes are stopped instead (nothing could take them over).

Service tasks (kind service) get a host port from --service-ports in PORT;
once their readiness probe passes, their endpoint
http://<advertise-host>:<port> is published under their service name.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), out, cfg, f)
		},
	}
	cmd.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	fl := cmd.Flags()
	fl.StringVar(&cfg.NodeID, "node-id", "", "unique, stable id of this worker (default: the id kept in <data-dir>/node-id, else the hostname, which is then kept there; with --tls-cert it must be the id the certificate names)")
	fl.StringVar(&cfg.DataDir, "data-dir", "", "directory for the attempts' log files (required)")
	fl.StringVar(&cfg.GossipAddr, "gossip-addr", "127.0.0.1:7947", "host:port of this worker's gossip member")
	fl.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:9091", "host:port serving /metrics, /healthz and /readyz (empty: none)")
	fl.StringVar(&cfg.SandboxAddr, "sandbox-addr", "", "host:port serving the sandboxes' exec and files to the heads; with neither TLS nor --acl it is unauthenticated: bind it where only heads reach (empty: none; docs/sandboxes.md)")
	fl.StringVar(&f.join, "join", "", "comma-separated gossip addresses of heads to join")
	fl.StringVar(&f.heads, "heads", "", "comma-separated gRPC addresses of heads (default: found in gossip)")
	fl.StringVar(&f.runtime, "runtime", "docker", "container runtime: docker or process")
	fl.StringVar(&f.dockerHost, "docker-host", "", "Docker Engine address (default: DOCKER_HOST or the local socket)")
	fl.StringVar(&f.labels, "labels", "", "comma-separated worker labels k=v, matched by tasks' node selectors")
	fl.Int64Var(&f.cpuMillis, "cpu-millis", 0, "CPU offered in millicores (0: all cores of the machine)")
	fl.Int64Var(&f.memBytes, "memory-bytes", 0, "memory offered in bytes (0: the machine's MemTotal)")
	fl.Int32Var(&f.gpus, "gpus", 0, "GPUs offered when NVML finds none (tasks asking for GPUs need devices found by NVML)")
	fl.BoolVar(&f.nvml, "nvml", true, "find GPUs through NVML and offer the healthy ones, scheduled by UUID")
	fl.IntVar(&cfg.MaxConcurrentStarts, "max-concurrent-starts", cfg.MaxConcurrentStarts, "container starts in flight at most")
	fl.StringVar(&cfg.ClusterName, "cluster-name", cfg.ClusterName, "cluster label of this worker's containers")
	fl.DurationVar(&cfg.StopGrace, "stop-grace", cfg.StopGrace, "time between SIGTERM and SIGKILL when an attempt is stopped")
	fl.DurationVar(&cfg.ReconcileInterval, "reconcile-interval", cfg.ReconcileInterval, "how often containers are reconciled")
	fl.DurationVar(&cfg.SnapshotGrace, "snapshot-grace", cfg.SnapshotGrace, "how old a snapshot image that no snapshot of the table names must be before reconciliation removes it")
	fl.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", cfg.HeartbeatInterval, "how often a heartbeat (a lease renewal) goes to the leader; keep it well under the heads' --worker-lease")
	fl.IntVar(&cfg.PoolMin, "pool-min", cfg.PoolMin, "warm containers kept per (image, tenant) for persistent tasks and sandbox creates, even when idle")
	fl.IntVar(&cfg.PoolMax, "pool-max", cfg.PoolMax, "warm containers at most per (image, tenant) for persistent tasks")
	fl.DurationVar(&cfg.PoolIdle, "pool-idle", cfg.PoolIdle, "how long an idle warm container beyond --pool-min, or an idle session's container, is kept")
	fl.StringVar(&cfg.AdvertiseHost, "advertise-host", "", "host in the endpoints of this worker's service tasks, reachable from other workers and containers (default: the --gossip-addr host, or the first non-loopback IPv4 address when that is 0.0.0.0)")
	fl.StringVar(&f.servicePorts, "service-ports", fmt.Sprintf("%d-%d", cfg.ServicePortMin, cfg.ServicePortMax), "host port range MIN-MAX given to service tasks")
	fl.DurationVar(&cfg.ServiceLivenessInterval, "service-liveness-interval", cfg.ServiceLivenessInterval, "how often a ready service task's probe runs again")
	fl.IntVar(&cfg.ServiceLivenessFailures, "service-liveness-failures", cfg.ServiceLivenessFailures, "failed probes in a row after which a ready service task is stopped and restarted")
	fl.DurationVar(&cfg.ServiceReadyTimeout, "service-ready-timeout", cfg.ServiceReadyTimeout, "how long a service task may take to pass its readiness probe before it is stopped and restarted")
	fl.DurationVar(&f.shutdownGrace, "shutdown-timeout", 30*time.Second, "how long a clean shutdown may take")
	fl.StringVar(&f.artifacts, "artifacts", "", "artifact store for logs, output files and large results: file:///path or s3://bucket/prefix?endpoint=...&region=...&path_style=true (default file://<data-dir>/artifacts; a cluster of several machines needs shared storage such as S3, the same as the heads')")
	fl.Int64Var(&f.spoolMaxBytes, "spool-max-bytes", 1<<30, "local upload spool (<data-dir>/spool) bound in bytes: uploads wait there while the store is down")
	fl.StringVar(&f.initPath, "init-path", "", "megaflow-init binary, the init of every task that stops it when this worker's lease lapses (default: next to this executable, then $PATH; required with --runtime docker)")
	fl.StringVar(&f.tls.CA, "tls-ca", "", "CA certificate (PEM) of the cluster: turns on mutual TLS for the stream to the heads and the sandbox server, with --tls-cert and --tls-key (docs/security.md; reloaded on SIGHUP)")
	fl.StringVar(&f.tls.Cert, "tls-cert", "", "this worker's certificate (PEM, from megaflow tls cert create --worker --node-id <this worker's --node-id>: the heads refuse another worker's)")
	fl.StringVar(&f.tls.Key, "tls-key", "", "the private key of --tls-cert (PEM)")
	fl.StringVar(&f.gossipKey, "gossip-key", "", "encrypt and authenticate gossip with this key: 32 random bytes in base64, the heads' key (megaflow tls gossip-key)")
	fl.StringVar(&cfg.Token, "token", os.Getenv("MEGAFLOW_TOKEN"), "API token of role worker (megaflow token create --role worker), needed on a cluster with ACLs on and no TLS (env MEGAFLOW_TOKEN; docs/security.md)")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	_ = cmd.MarkFlagRequired("data-dir")
	daemonconfig.Register(cmd)
	return cmd
}

// run builds the runtime and the worker from the flags and runs it until
// ctx ends or a signal comes.
func run(ctx context.Context, out io.Writer, cfg worker.Config, f flags) error {
	logger, err := logging.New(out, f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	if err := applyFlags(&cfg, f); err != nil {
		return err
	}
	cfg.Logger = logger
	if cfg.NodeID == "" && cfg.DataDir != "" {
		id, from, err := defaultNodeID(cfg.DataDir, os.Hostname)
		if err != nil {
			return fmt.Errorf("megaflow-worker: %w", err)
		}
		cfg.NodeID = id
		logger.Info("no --node-id: using the worker id from the "+from, "node_id", id, "file", filepath.Join(cfg.DataDir, nodeIDFile))
	}
	if f.nvml {
		devs, why := discoverGPUs()
		if len(devs) > 0 {
			cfg.GPUs = devs
			cfg.Capacity.GPUs = int32(len(devs))
			cfg.GPUCheck = gpuCheck
			health, stopWatch := watchGPUs(devs, logger)
			defer stopWatch()
			cfg.GPUHealth = health
			cfg.Collectors = append(cfg.Collectors, gpuCollector(devs))
		} else if why != "" {
			logger.Info("no GPUs offered", "why", why)
		}
	}
	rt, closeRT, err := newRuntime(f.runtime, f.dockerHost, filepath.Join(cfg.DataDir, "process"), logger)
	if err != nil {
		return err
	}
	defer closeRT()
	cfg.Runtime = rt
	initPath, err := worker.FindInit(f.initPath)
	switch {
	case err == nil:
		cfg.InitPath = initPath
	case f.runtime == "docker" || f.initPath != "":
		return fmt.Errorf("megaflow-worker: %w", err)
	default:
		logger.Warn("running process tasks without megaflow-init: they outlive this worker if it crashes or freezes", "err", err)
	}
	if f.gossipKey != "" {
		if cfg.GossipKey, err = gossip.DecodeKey(f.gossipKey); err != nil {
			return fmt.Errorf("megaflow-worker: --gossip-key: %w", err)
		}
	}
	if f.tls.Enabled() {
		if cfg.TLS, err = tlsconfig.Load(f.tls, tlsconfig.RoleWorker); err != nil {
			return fmt.Errorf("megaflow-worker: %w", err)
		}
		stopReload := tlsconfig.ReloadOnSIGHUP(cfg.TLS, logger)
		defer stopReload()
		if cfg.GossipKey == nil {
			logger.Warn("TLS is on but gossip is not encrypted: pass --gossip-key (docs/security.md)")
		}
	}
	closeArtifacts, err := openArtifacts(&cfg, f, logger)
	if err != nil {
		return err
	}
	defer closeArtifacts()
	w, err := worker.New(cfg)
	if err != nil {
		return fmt.Errorf("megaflow-worker: %w", err)
	}
	c := w.Capacity()
	fmt.Fprintf(out, "megaflow-worker %s: runtime %s; offering %d millicores, %s memory, %d GPUs; at most %d starts at once\n",
		cfg.NodeID, rt.Name(), c.CPUMillis, attempt.FormatBytes(c.MemoryBytes), c.GPUs, cfg.MaxConcurrentStarts)
	if rt.Name() == "process" {
		fmt.Fprintln(out, "megaflow-worker: the process runtime isolates nothing and enforces no CPU or memory limit; "+
			"its processes are stopped when the worker stops (a restarted worker could not take them over)")
	}
	if p, ok := rt.(interface{ Ping(context.Context) error }); ok {
		pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := p.Ping(pctx); err != nil {
			logger.Warn("container runtime not reachable yet; the worker retries", "runtime", rt.Name(), "err", err)
		}
		cancel()
	}
	if ctx == nil {
		ctx = context.Background()
	}
	// A signal stops the worker through Shutdown while Run still runs:
	// the attempts it ends and the events it holds reach the leader over
	// the stream still up (cancelling Run's context first closed the
	// stream, and an attempt that had just completed ran again). ctx ending
	// stops Run itself, as before.
	sig, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	runDone := make(chan error, 1)
	go func() { runDone <- w.Run(ctx) }() // owned here: received below on every path
	var runErr error
	ran := false
	select {
	case runErr = <-runDone:
		ran = true
	case <-sig.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdownGrace)
	defer cancel()
	err = w.Shutdown(sctx) // ends Run, waiting for it until sctx ends
	if !ran {
		select {
		case runErr = <-runDone:
		case <-sctx.Done():
			runErr = fmt.Errorf("megaflow-worker: Run did not return within --shutdown-timeout %s", f.shutdownGrace)
		}
	}
	if err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

// openArtifacts opens the artifact store and the worker's upload spool in
// <data-dir>/spool (uploads left there by a previous run resume) and
// returns the function that closes both.
func openArtifacts(cfg *worker.Config, f flags, logger *slog.Logger) (func(), error) {
	store, err := backends.Open(context.Background(), f.artifacts, cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("--artifacts: %w", err)
	}
	dir, err := filepath.Abs(filepath.Join(cfg.DataDir, "spool"))
	if err != nil {
		store.Close()
		return nil, err
	}
	sc := spool.DefaultConfig(dir)
	sc.MaxBytes, sc.Logger = f.spoolMaxBytes, logger
	sp, err := spool.New(sc, store)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("--spool-max-bytes: %w", err)
	}
	cfg.Artifacts, cfg.Spool = store, sp
	return func() { sp.Close(); store.Close() }, nil
}

// applyFlags moves the list and capacity flags into cfg.
func applyFlags(cfg *worker.Config, f flags) error {
	cfg.Join = splitList(f.join)
	cfg.Heads = splitList(f.heads)
	labels, err := parseLabels(f.labels)
	if err != nil {
		return err
	}
	cfg.Labels = labels
	cfg.Version = version.Get().Short()
	if f.cpuMillis < 0 || f.memBytes < 0 || f.gpus < 0 {
		return fmt.Errorf("--cpu-millis, --memory-bytes and --gpus must not be negative")
	}
	cfg.Capacity = worker.Capacity{CPUMillis: f.cpuMillis, MemoryBytes: f.memBytes, GPUs: f.gpus}
	if f.servicePorts != "" {
		lo, hi, ok := strings.Cut(f.servicePorts, "-")
		min, err1 := strconv.Atoi(strings.TrimSpace(lo))
		max, err2 := strconv.Atoi(strings.TrimSpace(hi))
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("--service-ports %q: want MIN-MAX, e.g. 30000-32767", f.servicePorts)
		}
		cfg.ServicePortMin, cfg.ServicePortMax = min, max
	}
	return nil
}

// newRuntime builds the named container runtime and a function that
// releases it.
func newRuntime(name, dockerHost, processDir string, logger *slog.Logger) (contract.Runtime, func(), error) {
	switch name {
	case "docker":
		rt, err := docker.New(docker.Config{Host: dockerHost, Logger: logger})
		if err != nil {
			return nil, nil, fmt.Errorf("--runtime docker: %w", err)
		}
		return rt, func() { _ = rt.Close() }, nil
	case "process":
		rt, err := process.New(process.Config{Logger: logger, StateDir: processDir})
		if err != nil {
			return nil, nil, fmt.Errorf("--runtime process: %w", err)
		}
		return rt, func() { _ = rt.Close() }, nil
	}
	return nil, nil, fmt.Errorf("--runtime %q: want docker or process", name)
}

// splitList splits a comma-separated flag, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// parseLabels parses "k=v,k2=v2".
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range splitList(s) {
		k, v, ok := strings.Cut(p, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("--labels: %q is not k=v", p)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("--labels: %q given twice", k)
		}
		out[k] = v
	}
	return out, nil
}
