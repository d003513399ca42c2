package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/artifact/backends"
	"github.com/megaflow/megaflow/internal/blob/spool"
	"github.com/megaflow/megaflow/internal/cluster"
	"github.com/megaflow/megaflow/internal/dirlock"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/logging"
	"github.com/megaflow/megaflow/internal/version"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/docker"
	"github.com/megaflow/megaflow/runtime/process"
	"github.com/megaflow/megaflow/worker"
)

// localOptions configure an embedded local cluster: one head and one
// worker in this process.
type localOptions struct {
	// DataDir holds the head's Raft data (DataDir/head), the worker's
	// attempt logs (DataDir/worker) and both daemons' log (DataDir/megaflow.log).
	DataDir string
	// Runtime is "auto" (docker when an engine answers, else process),
	// "docker" or "process".
	Runtime string
	// GRPCAddr, RaftAddr, GossipAddr are the head's addresses;
	// WorkerGossipAddr the worker's. Port 0 picks a free port.
	GRPCAddr, RaftAddr, GossipAddr, WorkerGossipAddr string
	// HTTPAddr is the head's HTTP listener (/metrics, /healthz, /readyz,
	// the dashboard); empty: none.
	HTTPAddr string
	// CPUMillis and MemoryBytes are what the worker offers (0: the machine).
	CPUMillis, MemoryBytes int64
	// PoolMax caps the warm containers per (image, tenant, limits).
	PoolMax int
	// MaxConcurrentStarts caps the worker's container starts in flight.
	MaxConcurrentStarts int
	// LogLevel of the log file: debug, info, warn or error.
	LogLevel string
	// GraphRetention and ArchiveRetention set the head's
	// (head.Config.GraphRetention, ArchiveRetention); nil: the head's
	// defaults.
	GraphRetention, ArchiveRetention *time.Duration
	// MaxQueueWait sets the head's (head.Config.MaxQueueWait: a task no
	// worker can ever run fails after waiting this long); nil: the head's
	// default, 0 (it waits for ever).
	MaxQueueWait *time.Duration
	// ACL turns API tokens on (head.Config.ACL): the first start
	// bootstraps an admin token and makes a worker token for the local
	// worker, kept in DataDir/acl-tokens.json (mode 0600) for later starts.
	ACL bool
}

// validate checks what can be checked before anything is written: every
// error names its flag and says what it accepts.
func (o *localOptions) validate() error {
	switch {
	case o.DataDir == "":
		return errs.New(errs.InvalidArgument, "--data-dir is empty: give a directory for the cluster's data")
	case o.Runtime != "auto" && o.Runtime != "docker" && o.Runtime != "process":
		return errs.New(errs.InvalidArgument, "--runtime %q: want auto, docker or process", o.Runtime)
	case o.CPUMillis < 0:
		return errs.New(errs.InvalidArgument, "--cpu-millis %d: give the millicores the worker offers, or 0 for all cores", o.CPUMillis)
	case o.MemoryBytes < 0:
		return errs.New(errs.InvalidArgument, "--memory-bytes %d: give the bytes the worker offers, or 0 for the machine's memory", o.MemoryBytes)
	case o.PoolMax < 0:
		return errs.New(errs.InvalidArgument, "--pool-max %d: must be 0 (the worker's default) or more", o.PoolMax)
	case o.MaxConcurrentStarts < 0:
		return errs.New(errs.InvalidArgument, "--max-concurrent-starts %d: must be 0 (the worker's default) or more", o.MaxConcurrentStarts)
	case o.GraphRetention != nil && *o.GraphRetention < 0:
		return errs.New(errs.InvalidArgument, "--graph-retention %v: give how long a finished graph stays live, or 0 to keep it", *o.GraphRetention)
	case o.MaxQueueWait != nil && *o.MaxQueueWait < 0:
		return errs.New(errs.InvalidArgument, "--max-queue-wait %v: give how long a task no worker can run may wait before it fails, or 0 to wait for ever", *o.MaxQueueWait)
	case o.ArchiveRetention != nil && *o.ArchiveRetention < 0:
		return errs.New(errs.InvalidArgument, "--archive-retention %v: give how long an archived summary stays, or 0 to keep it", *o.ArchiveRetention)
	}
	if _, err := logging.New(io.Discard, "text", o.LogLevel); err != nil {
		return errs.New(errs.InvalidArgument, "--log-level: %v", err)
	}
	if o.HTTPAddr != "" {
		if _, _, err := net.SplitHostPort(o.HTTPAddr); err != nil {
			return errs.New(errs.InvalidArgument, "--http-addr %q is not host:port (e.g. 127.0.0.1:8080; empty for no HTTP): %v", o.HTTPAddr, err)
		}
	}
	return nil
}

// localCluster is a running embedded cluster. Stop ends it.
type localCluster struct {
	head    *head.Head
	worker  *worker.Worker
	runtime string
	rt      contract.Runtime
	why     string // how the runtime was chosen
	logPath string

	logFile *os.File
	// cluster runs the head and the worker (internal/cluster).
	cluster *cluster.Cluster
	// closeRT closes the runtime; closeArtifacts the worker's spool and
	// the artifact store.
	closeRT, closeArtifacts func()
	// lock keeps other processes off DataDir until Stop.
	lock *dirlock.Lock
	// adminToken is the admin token's secret with ACLs on; "" without.
	adminToken string
}

// chooseRuntime builds the runtime named by name ("auto" tries docker
// first) and says why it was chosen.
func chooseRuntime(ctx context.Context, name, processDir string, logger *slog.Logger) (contract.Runtime, func(), string, error) {
	if name != "auto" && name != "docker" && name != "process" {
		return nil, nil, "", errs.New(errs.InvalidArgument, "--runtime %q: want auto, docker or process", name)
	}
	if name != "process" {
		rt, err := openDocker(ctx, logger)
		if err == nil {
			return rt, func() { _ = rt.Close() }, "a Docker Engine answered: each task runs in a container", nil
		}
		if name == "docker" {
			return nil, nil, "", fmt.Errorf("--runtime docker: no Docker Engine answers (%v); start it, set DOCKER_HOST, or use --runtime process", err)
		}
		rt2, perr := process.New(process.Config{Logger: logger, StateDir: processDir})
		if perr != nil {
			return nil, nil, "", perr
		}
		return rt2, func() { _ = rt2.Close() }, fmt.Sprintf("no Docker Engine answered (%v): tasks run as plain processes, without isolation or limits", err), nil
	}
	rt, err := process.New(process.Config{Logger: logger, StateDir: processDir})
	if err != nil {
		return nil, nil, "", err
	}
	return rt, func() { _ = rt.Close() }, "--runtime process: tasks run as plain processes, without isolation or limits", nil
}

// openDocker returns a Docker runtime (DOCKER_HOST, or the local socket)
// whose engine answered a ping within 3 s, or the error saying why not.
// The caller closes it.
func openDocker(ctx context.Context, logger *slog.Logger) (*docker.Runtime, error) {
	rt, err := docker.New(docker.Config{Logger: logger})
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := rt.Ping(pctx); err != nil {
		_ = rt.Close()
		return nil, err
	}
	return rt, nil
}

// startLocal starts one head (a single-voter Raft cluster) and one worker
// in this process, waits until the head leads and the worker is alive in
// its table (60 s at most), and returns them running. The daemons log to
// DataDir/megaflow.log.
func startLocal(ctx context.Context, o localOptions) (_ *localCluster, err error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	lc := &localCluster{logPath: filepath.Join(o.DataDir, "megaflow.log")}
	// A second `megaflow up` on this directory stops here, naming the
	// first one's pid, before it touches the log, the runtime's state or
	// the artifacts.
	if lc.lock, err = dirlock.Acquire(o.DataDir, "megaflow up"); err != nil {
		return nil, err
	}
	if lc.logFile, err = os.OpenFile(lc.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err != nil {
		_ = lc.lock.Release()
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	defer func() {
		if err != nil {
			lc.logFile.Close()
			_ = lc.lock.Release()
		}
	}()
	logger, err := logging.New(lc.logFile, "text", o.LogLevel)
	if err != nil {
		return nil, errs.New(errs.InvalidArgument, "--log-level: %v", err)
	}
	rt, closeRT, why, err := chooseRuntime(ctx, o.Runtime, filepath.Join(o.DataDir, "process"), logger)
	if err != nil {
		return nil, err
	}
	lc.runtime, lc.rt, lc.why = rt.Name(), rt, why

	// One artifact store for both daemons (<data-dir>/artifacts), so that
	// megaflow logs and artifacts read back what the worker stored; the
	// worker's uploads go through a disk spool (<data-dir>/worker/spool).
	store, err := backends.Open(ctx, "", o.DataDir)
	if err != nil {
		closeRT()
		return nil, fmt.Errorf("artifact store: %w", err)
	}
	sc := spool.DefaultConfig(filepath.Join(o.DataDir, "worker", "spool"))
	sc.Logger = logger.With("daemon", "worker")
	sp, err := spool.New(sc, store)
	if err != nil {
		store.Close()
		closeRT()
		return nil, fmt.Errorf("artifact spool: %w", err)
	}
	closeArtifacts := func() { sp.Close(); store.Close() }
	closeAll := func() { closeRT(); closeArtifacts() }

	// The in-process cluster (internal/cluster): one head, a single-voter
	// Raft cluster under DataDir/head, and one worker under DataDir/worker.
	c, err := cluster.Start(ctx, cluster.Options{Dir: o.DataDir, Heads: 1, Logger: logger, LeaderTimeout: 60 * time.Second,
		StopTimeout: 30 * time.Second, // the worker's shutdown includes its tasks' stop grace (10 s)
		ConfigureHead: func(_ int, hc *head.Config) {
			hc.NodeID, hc.DataDir = "local-head", filepath.Join(o.DataDir, "head")
			hc.GRPCAddr, hc.RaftAddr, hc.GossipAddr = o.GRPCAddr, o.RaftAddr, o.GossipAddr
			hc.HTTPAddr = o.HTTPAddr
			hc.Join = nil
			hc.BootstrapExpect = 1
			hc.Version = version.Get().Short()
			hc.Artifacts = store
			if o.GraphRetention != nil {
				hc.GraphRetention = *o.GraphRetention
			}
			if o.ArchiveRetention != nil {
				hc.ArchiveRetention = *o.ArchiveRetention
			}
			if o.MaxQueueWait != nil {
				hc.MaxQueueWait = *o.MaxQueueWait
			}
			hc.ACL = o.ACL
		}})
	if err != nil {
		closeAll()
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("interrupted before the local cluster was ready (%w)", ctx.Err())
		case errors.Is(err, syscall.EADDRINUSE):
			// The head's gossip address too: internal/gossip puts back the
			// errno that memberlist's error text loses.
			return nil, fmt.Errorf("%w: another process listens there; stop it, or give this cluster free addresses with --grpc-addr, --raft-addr and --gossip-addr", err)
		}
		return nil, fmt.Errorf("the local cluster's head did not start: %w (see %s)", err, lc.logPath)
	}
	h := c.Members[0].Head()
	var toks localTokens
	if o.ACL {
		// Tokens need the rules the new leader commits after its barrier.
		err = cluster.WaitUntil(ctx, 30*time.Second, "the head to apply this build's rules", func() bool { return h.FSM().View().Rules() >= fsm.RulesCurrent })
		if err == nil {
			toks, err = loadLocalTokens(ctx, filepath.Join(o.DataDir, "acl-tokens.json"), h.GRPCAddr())
		}
		if err != nil {
			c.Stop()
			closeAll()
			return nil, fmt.Errorf("acl: %w", err)
		}
		lc.adminToken = toks.Admin
	}
	workerID, err := localWorkerID(filepath.Join(o.DataDir, "worker"))
	if err != nil {
		c.Stop()
		closeAll()
		return nil, fmt.Errorf("worker: %w", err)
	}
	wm, err := c.AddWorker(cluster.WorkerOptions{ID: workerID, DataDir: filepath.Join(o.DataDir, "worker"), GossipAddr: o.WorkerGossipAddr,
		Runtime: rt, Capacity: worker.Capacity{CPUMillis: o.CPUMillis, MemoryBytes: o.MemoryBytes},
		Configure: func(wc *worker.Config) {
			wc.Heads = []string{h.GRPCAddr()}
			wc.Token = toks.Worker
			wc.Version = version.Get().Short()
			wc.Artifacts, wc.Spool = store, sp
			if o.PoolMax > 0 {
				wc.PoolMax = o.PoolMax
			}
			if o.MaxConcurrentStarts > 0 {
				wc.MaxConcurrentStarts = o.MaxConcurrentStarts
			}
			if p, err := worker.FindInit(""); err == nil {
				wc.InitPath = p
			} else {
				wc.Logger.Warn("tasks run without megaflow-init: they outlive the worker if it crashes", "err", err)
			}
		}})
	if err != nil {
		c.Stop()
		closeAll()
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("worker: %w: another process listens there; stop it, or give the worker a free address with --worker-gossip-addr", err)
		}
		return nil, fmt.Errorf("worker: %w", err)
	}
	lc.cluster, lc.head, lc.worker = c, h, wm.Worker()
	lc.closeRT, lc.closeArtifacts = closeRT, closeArtifacts

	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := lc.waitReady(wctx); err != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = lc.Stop(sctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted before the local cluster was ready (%w)", ctx.Err())
		}
		return nil, fmt.Errorf("the local cluster did not come up: %w (see %s)", err, lc.logPath)
	}
	return lc, nil
}

// waitReady waits until the head leads, its table applies this build's
// rules (fsm.RulesCurrent: admission policies can be set at once) and it
// lists the worker alive.
func (lc *localCluster) waitReady(ctx context.Context) error {
	c, err := client.Dial(ctx, []string{lc.head.GRPCAddr()}, client.WithBackoff(20*time.Millisecond, 200*time.Millisecond), client.WithToken(lc.adminToken))
	if err != nil {
		return err
	}
	defer c.Close()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		ws, err := c.ListWorkers(ctx, client.ReadOptions{RequireLeader: true})
		if r := lc.head.FSM().View().Rules(); err == nil && r < fsm.RulesCurrent {
			err = fmt.Errorf("the table is at rules %d, not yet %d", r, fsm.RulesCurrent)
		}
		if err == nil {
			for _, w := range ws {
				if w.GetInfo().GetId() == lc.worker.ID() && w.GetStatus().String() == "WORKER_STATUS_ALIVE" {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errors.New("the worker is not alive in the head's table")
			}
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// Stop shuts the worker, then the head down cleanly (30 s at most each:
// the cluster's StopTimeout; ctx is not used), waits for both, and closes
// the runtime, the artifact store and the log.
func (lc *localCluster) Stop(ctx context.Context) error {
	err := lc.cluster.StopWorker(0)
	for _, s := range lc.cluster.Stop() {
		err = errors.Join(err, s.Err)
	}
	lc.closeRT()
	lc.closeArtifacts() // after both daemons stopped
	err = errors.Join(err, lc.logFile.Close())
	return errors.Join(err, lc.lock.Release())
}

// describe prints what runs where.
func (lc *localCluster) describe(w io.Writer) {
	c := lc.worker.Capacity()
	fmt.Fprintf(w, "local cluster: head %s leads, gRPC %s (gossip %s); worker %s offers %.1f cores, %s memory\n",
		lc.head.ID(), lc.head.GRPCAddr(), lc.head.GossipAddr(), lc.worker.ID(), float64(c.CPUMillis)/1000, bytesIEC(c.MemoryBytes))
	fmt.Fprintf(w, "runtime: %s (%s)\n", lc.runtime, lc.why)
	if a := lc.head.HTTPAddr(); a != "" {
		fmt.Fprintf(w, "dashboard: http://%s/ (metrics: http://%s/metrics)\n", a, a)
	}
	fmt.Fprintf(w, "logs: %s\n", lc.logPath)
	if lc.adminToken != "" {
		fmt.Fprintf(w, "ACLs on: every command needs a token; the admin token (kept in the data directory): export MEGAFLOW_TOKEN=%s\n", lc.adminToken)
		if lc.runtime == "process" {
			fmt.Fprintln(w, "tasks run as your user: the process runtime does not apply the admission default with ACLs (user 65534:65534)")
		} else {
			fmt.Fprintln(w, "containers run as 65534:65534 (nobody) with no network, the admission default with ACLs; for bridge networking and root: megaflow policy set --cluster --allow-network bridge --user 0:0")
		}
	}
}

// localTokens are the secrets `megaflow up --acl` keeps in its data
// directory.
type localTokens struct {
	Admin  string `json:"admin"`
	Worker string `json:"worker"`
}

// loadLocalTokens reads the tokens file, or, on the first start with ACLs
// on, bootstraps the head at addr, makes a worker token and writes them
// there (mode 0600).
func loadLocalTokens(ctx context.Context, path, addr string) (localTokens, error) {
	var t localTokens
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &t); err != nil || t.Admin == "" || t.Worker == "" {
			return t, fmt.Errorf("%s: not the tokens file megaflow up --acl writes (%v); move it away only with a new --data-dir", path, err)
		}
		return t, nil
	} else if !os.IsNotExist(err) {
		return t, err
	}
	c, err := client.Dial(ctx, []string{addr}, client.WithBackoff(20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		return t, err
	}
	defer c.Close()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, t.Admin, err = c.BootstrapACL(wctx); err != nil {
		return t, fmt.Errorf("bootstrap (%s is missing: was this data directory started with --acl before?): %w", path, err)
	}
	admin, err := client.Dial(ctx, []string{addr}, client.WithBackoff(20*time.Millisecond, 200*time.Millisecond), client.WithToken(t.Admin))
	if err != nil {
		return t, err
	}
	defer admin.Close()
	if _, t.Worker, err = admin.CreateToken(wctx, "", client.RoleWorker, 0); err != nil {
		return t, err
	}
	b, _ := json.Marshal(t)
	return t, os.WriteFile(path, b, 0o600)
}

// headsHint is the --heads flag a command in another shell needs to reach
// a local cluster whose head listens at addr: none when addr is the CLI's
// default head (127.0.0.1:7070), which a shell without MEGAFLOW_HEADS uses.
func headsHint(addr string) string {
	if addr == "127.0.0.1:7070" {
		return ""
	}
	return " --heads " + addr
}

func defaultDataDir() string {
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".megaflow", "up")
	}
	return filepath.Join(os.TempDir(), "megaflow-up")
}

func upCmd(g *globals) *cobra.Command {
	o := localOptions{Runtime: "auto", GRPCAddr: "127.0.0.1:7070", RaftAddr: "127.0.0.1:7000", GossipAddr: "127.0.0.1:7946",
		WorkerGossipAddr: "127.0.0.1:7947", PoolMax: 16, MaxConcurrentStarts: 8, LogLevel: "info", DataDir: defaultDataDir()}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a local cluster in this process: one head and one worker (Ctrl-C stops it)",
		Long: `up runs an embedded MegaFlow cluster in this process: one head (a single-voter
Raft cluster, data under --data-dir/head) and one worker (attempt logs under
--data-dir/worker). The worker uses the Docker runtime when an engine answers
and the process runtime otherwise (--runtime forces one); the choice is
printed. Other megaflow commands reach it at --grpc-addr (the CLI's default
head). Ctrl-C shuts both down cleanly; a restart on the same --data-dir
keeps the task table. Containers still running are taken over by a restart
within the worker's lease (some 11 s after the stop); after it, their inits
have stopped them, and their tasks run again (not counted as failures; a
sandbox is lost). Process tasks never outlive the worker: a clean stop stops
them, and they run again after a restart.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.tls.Enabled() {
				return errs.New(errs.InvalidArgument, "megaflow up runs on loopback without TLS: drop --tls-ca/--tls-cert/--tls-key (and MEGAFLOW_TLS_*), or run megaflow-head and megaflow-worker with them (docs/operations.md)")
			}
			ctx := cmd.Context()
			lc, err := startLocal(ctx, o)
			if err != nil {
				return err
			}
			lc.describe(g.stdout)
			fmt.Fprintf(g.stdout, "data: %s\nready: try `megaflow%s submit examples/hello-rollouts.yaml --watch` in another shell; Ctrl-C stops the cluster\n", o.DataDir, headsHint(lc.head.GRPCAddr()))
			<-ctx.Done()
			fmt.Fprintln(g.stdout, "\nmegaflow up: stopping the worker and the head")
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := lc.Stop(sctx); err != nil {
				return fmt.Errorf("stop: %w", err)
			}
			fmt.Fprintln(g.stdout, "megaflow up: stopped")
			return nil
		},
	}
	addLocalFlags(cmd, &o)
	def := head.DefaultConfig()
	o.GraphRetention, o.ArchiveRetention = &def.GraphRetention, &def.ArchiveRetention
	cmd.Flags().DurationVar(o.GraphRetention, "graph-retention", def.GraphRetention, graphRetentionHelp)
	cmd.Flags().DurationVar(o.ArchiveRetention, "archive-retention", def.ArchiveRetention, archiveRetentionHelp)
	o.MaxQueueWait = &def.MaxQueueWait
	cmd.Flags().DurationVar(o.MaxQueueWait, "max-queue-wait", def.MaxQueueWait, maxQueueWaitHelp)
	cmd.Flags().BoolVar(&o.ACL, "acl", false, "turn API tokens on (docs/security.md): the first start bootstraps an admin token and prints it; it is kept, with the worker's, in --data-dir/acl-tokens.json")
	cmd.Flags().StringVar(&o.GRPCAddr, "grpc-addr", o.GRPCAddr, "host:port of the head's gRPC API")
	cmd.Flags().StringVar(&o.RaftAddr, "raft-addr", o.RaftAddr, "host:port of the head's Raft transport")
	cmd.Flags().StringVar(&o.GossipAddr, "gossip-addr", o.GossipAddr, "host:port of the head's gossip member")
	cmd.Flags().StringVar(&o.HTTPAddr, "http-addr", "", "host:port of the head's HTTP listener: the dashboard, /metrics, /healthz and /readyz (empty: none; with --acl the dashboard's API needs the admin token)")
	cmd.Flags().StringVar(&o.WorkerGossipAddr, "worker-gossip-addr", o.WorkerGossipAddr, "host:port of the worker's gossip member")
	return cmd
}

// The help of the retention and queue-wait flags, as megaflow-head's says.
const (
	graphRetentionHelp = "archive a finished graph this long after it ended: its tasks leave the head's memory, its summary stays " +
		"(megaflow status, megaflow graphs --all) (0: keep it live until deleted; a graph's label megaflow.io/graph-retention overrides it)"
	archiveRetentionHelp = "drop an archived graph's summary this long after it was archived (0: keep it until deleted)"
	maxQueueWaitHelp     = "fail a task queued this long with an infeasible reason (no worker can ever run it, or over its tenant's quota) (0: never)"
)

// addLocalFlags adds the flags up and demo share.
func addLocalFlags(cmd *cobra.Command, o *localOptions) {
	f := cmd.Flags()
	f.StringVar(&o.DataDir, "data-dir", o.DataDir, "directory for the head's Raft data, the worker's logs and megaflow.log")
	f.StringVar(&o.Runtime, "runtime", o.Runtime, "container runtime of the worker: auto (docker when an engine answers), docker or process")
	f.Int64Var(&o.CPUMillis, "cpu-millis", o.CPUMillis, "CPU the worker offers, in millicores (0: all cores)")
	f.Int64Var(&o.MemoryBytes, "memory-bytes", o.MemoryBytes, "memory the worker offers, in bytes (0: the machine's)")
	f.IntVar(&o.PoolMax, "pool-max", o.PoolMax, "warm containers at most per image and tenant (persistent tasks and sessions)")
	f.IntVar(&o.MaxConcurrentStarts, "max-concurrent-starts", o.MaxConcurrentStarts, "container starts the worker runs at once")
	f.StringVar(&o.LogLevel, "log-level", o.LogLevel, "level of megaflow.log: debug, info, warn or error")
}

// waitRemoved waits until the runtime holds no container of the worker's
// attempts in the graphs named by graphs (a sandbox's graph is its id),
// polling every 200 ms until ctx ends, and returns the names of those
// still there then. The worker stops and removes the containers of a
// cancelled graph or a closed sandbox after the head commits it: Stop
// would cut that short and leave them behind.
func (lc *localCluster) waitRemoved(ctx context.Context, graphs map[string]bool) []string {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		var left []string
		cs, err := lc.rt.List(ctx, map[string]string{worker.LabelWorker: lc.worker.ID()})
		for _, c := range cs {
			if graphs[c.Labels[worker.LabelGraph]] {
				left = append(left, c.Name)
			}
		}
		if err == nil && len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil && len(left) == 0 {
				return []string{fmt.Sprintf("(unknown: %v)", err)}
			}
			return left
		case <-t.C:
		}
	}
}

// missingImages returns the images of names the local Docker Engine does
// not hold (none with the process runtime).
func (lc *localCluster) missingImages(ctx context.Context, names []string) []string {
	d, ok := lc.rt.(*docker.Runtime)
	if !ok {
		return nil
	}
	var out []string
	for _, n := range names {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if _, err := d.Client().ImageInspect(cctx, n); err != nil {
			out = append(out, n)
		}
		cancel()
	}
	return out
}

// localWorkerID returns the id of the embedded cluster's worker: kept in
// dir/node-id, created on the first start as "local-<6 hex digits of a
// hash of dir's absolute path>-<6 random hex digits>", so that two
// embedded clusters on one host (two data dirs) never share a worker id,
// and a restart on the same data dir keeps it (its containers carry it).
// Their containers are kept apart by the cluster id too (worker
// LabelClusterID); the distinct ids also keep their names apart.
func localWorkerID(dir string) (string, error) {
	path := filepath.Join(dir, "node-id")
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("worker id: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("worker id: %w", err)
	}
	sum := sha256.Sum256([]byte(abs))
	var r [3]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("worker id: %w", err)
	}
	id := "local-" + hex.EncodeToString(sum[:3]) + "-" + hex.EncodeToString(r[:])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("worker id: %w", err)
	}
	if err := os.WriteFile(path, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("worker id: %w", err)
	}
	return id, nil
}
