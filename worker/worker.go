package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/megaflow/megaflow/internal/artifact"
	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/gossip"
	"github.com/megaflow/megaflow/internal/lease"
	"github.com/megaflow/megaflow/internal/leaseinit"
	"github.com/megaflow/megaflow/internal/obs"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker/attempt"
)

// Worker is one worker daemon. Create it with New, run it with Run, stop it
// with Shutdown (or Kill, in tests).
type Worker struct {
	cfg    Config
	log    *slog.Logger
	clock  clock.Clock
	rt     contract.Runtime
	gossip *gossip.Gossip
	sem    *fifoSem
	outbox *outbox
	info   *wire.WorkerInfo
	pool   *pool // warm containers; nil when the runtime has no Execer
	// userNotApplied is set once the worker logged (a warning) that its
	// runtime does not apply the user of the built-in default policy for
	// clusters with ACLs (admission.go).
	userNotApplied atomic.Bool
	// spool queues artifact uploads (nil: artifacts off); memSpool is the
	// in-memory one Run runs when Config.Spool was nil.
	spool    artifact.Spool
	memSpool *artifact.MemSpool
	// runCtx is Run's context, set before Run starts any goroutine.
	runCtx context.Context

	registry *obs.Registry // this worker's metrics (no global registry)
	metrics  *workerMetrics
	http     *obs.Server // nil when Config.HTTPAddr is empty
	// sandboxLis is Config.SandboxAddr's listener (nil: none), served by
	// Run (sandbox.go).
	sandboxLis net.Listener
	advMu      sync.Mutex
	adv        advert        // images advertised (images.go)
	imagePoke  chan struct{} // a new image started: refresh the list
	gpuPoke    chan struct{} // the unhealthy GPUs changed: report them

	advertiseHost string       // host of service endpoints (service.go)
	ports         *portPool    // host ports of service attempts
	probeClient   *http.Client // readiness probes

	clusterIDv atomic.Value // string: the cluster id, "" until known (clusterid.go)
	// relayKeyv is the cluster's relay key from the last Welcome that had
	// one (relaykey.go); nil until then. Memory only.
	relayKeyv atomic.Pointer[[]byte]

	mu         sync.Mutex
	attempts   map[attempt.Key]*handle
	closing    bool      // Shutdown began: assignments are refused
	connected  bool      // a stream to the leader is up (after Welcome)
	welcomedAt time.Time // clock time of the last Welcome
	leader     string    // gRPC address of the connected leader
	leaderID   string    // node id (gossip name) of the last leader that welcomed this worker
	maxTerm    uint64    // highest leader term seen in a Welcome
	// The table's snapshots on this worker (snapshot.go): the ids of the
	// last wire.WorkerSnapshots of the current stream. snapKnown is true
	// once one came whole on it, false again when the stream ends.
	snapIDs   map[string]bool
	snapKnown bool
	// snapMissing holds the snapshot ids the table lists here whose image
	// the engine lacks, already logged; the reconcile goroutine owns it.
	snapMissing map[string]bool

	// The lease (lease.go); leaseMu is taken before mu, never after.
	leaseMu      sync.Mutex
	lease        lease.Holder
	leaseLastID  int64     // the last renewal id given out
	leaseStopped bool      // the current lapse stopped the attempts
	leaseWritten time.Time // the expiry last written to the lease file
	// leaseWriteErr is why the lease file could not be renewed last time
	// (nil once it was).
	leaseWriteErr error
	// priorExpiry is the expiry an earlier run of this worker last wrote to
	// the lease file (zero: none), read before this run writes its own:
	// a task adopted from that run that ended at or after it during the
	// downtime was stopped by its init (lapseEnd).
	priorExpiry time.Time
	leaseMsgs   chan []byte // lease acks received through gossip

	// Assignments refused because the lease had lapsed, until the head
	// acked their STOPPED: the head sends an ASSIGNED attempt again to a
	// worker that reconnects before that, and it must not start then.
	refusedMu sync.Mutex
	refused   map[attempt.Key]bool

	// claims are the warm containers sandbox attempts claimed (warmbox.go),
	// by container id.
	claimsMu sync.Mutex
	claims   map[string]*warmClaim

	running  atomic.Bool
	stopOnce sync.Once
	stopped  chan struct{} // closed by Shutdown or Kill: Run stops
	runDone  chan struct{} // closed when Run returns
	wg       sync.WaitGroup
}

// New checks cfg, fills the capacity from the machine where it is zero,
// creates DataDir/logs and binds the gossip member. Nothing runs until Run.
// Errors name the field that is wrong.
func New(cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("worker config: %w", err)
	}
	cfg.Join = slices.Clone(cfg.Join)
	cfg.Heads = slices.Clone(cfg.Heads)
	cfg.Labels = maps.Clone(cfg.Labels)
	if cfg.PoolKeeper == nil {
		cfg.PoolKeeper = DefaultPoolKeeper
	}
	cfg.PoolKeeper = slices.Clone(cfg.PoolKeeper)
	if cfg.Capacity.CPUMillis == 0 || cfg.Capacity.MemoryBytes == 0 {
		detected, err := DetectCapacity()
		if cfg.Capacity.CPUMillis == 0 {
			cfg.Capacity.CPUMillis = detected.CPUMillis
		}
		if cfg.Capacity.MemoryBytes == 0 {
			if err != nil {
				return nil, fmt.Errorf("worker %s: Capacity.MemoryBytes: %w", cfg.NodeID, err)
			}
			cfg.Capacity.MemoryBytes = detected.MemoryBytes
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("worker", cfg.NodeID)
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real()
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("worker %s: DataDir: %w", cfg.NodeID, err)
	}
	clusterID, err := loadClusterID(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("worker %s: DataDir: %w (remove the file to have the head's cluster id written again)", cfg.NodeID, err)
	}
	// The files directories of a previous run's warm containers: those
	// containers are removed, never adopted (pool.go).
	if err := os.RemoveAll(filepath.Join(cfg.DataDir, "pool")); err != nil {
		return nil, fmt.Errorf("worker %s: DataDir: %w", cfg.NodeID, err)
	}
	w := &Worker{
		cfg:   cfg,
		log:   logger,
		clock: clk,
		rt:    cfg.Runtime,
		sem:   newFIFOSem(cfg.MaxConcurrentStarts),
		// Seqs start at the process's start time, so they also grow across
		// restarts of the worker.
		outbox:   newOutbox(uint64(clk.Now().UnixNano()), cfg.MaxBatchEvents),
		attempts: make(map[attempt.Key]*handle),
		claims:   map[string]*warmClaim{},
		stopped:  make(chan struct{}),
		runDone:  make(chan struct{}),

		advertiseHost: deriveAdvertiseHost(cfg),
		ports:         newPortPool(cfg.ServicePortMin, cfg.ServicePortMax),
		probeClient: &http.Client{
			Transport:     &http.Transport{DisableKeepAlives: true, Proxy: nil},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		imagePoke: make(chan struct{}, 1),
		gpuPoke:   make(chan struct{}, 1),
		leaseMsgs: make(chan []byte, 16),
	}
	if e, err := leaseinit.ReadExpiry(filepath.Join(w.leaseDir(), leaseinit.FileName)); err == nil {
		w.priorExpiry = e
	}
	if w.cfg.ImageRefreshInterval <= 0 {
		w.cfg.ImageRefreshInterval = DefaultImageRefreshInterval
	}
	if w.cfg.MaxAdvertisedImages <= 0 {
		w.cfg.MaxAdvertisedImages = DefaultMaxAdvertisedImages
	}
	w.info = &wire.WorkerInfo{
		Id: cfg.NodeID,
		Capacity: &wire.Resources{
			CpuMillis:   cfg.Capacity.CPUMillis,
			MemoryBytes: cfg.Capacity.MemoryBytes,
			Gpus:        cfg.Capacity.GPUs,
		},
		Labels:              maps.Clone(cfg.Labels),
		Runtime:             cfg.Runtime.Name(),
		MaxConcurrentStarts: int32(cfg.MaxConcurrentStarts),
		Gpus:                cfg.GPUs,
		Instance:            newInstance(),
		Host:                w.advertiseHost,
		Version:             cfg.Version,
	}
	if len(cfg.GPUs) > 0 {
		w.info.Capacity.Gpus = int32(len(cfg.GPUs))
	}
	if ex, ok := cfg.Runtime.(contract.Execer); ok {
		w.pool = newPool(w, ex)
	}
	w.registry = obs.NewRegistry()
	w.metrics = newWorkerMetrics(w.registry, w)
	for i, c := range cfg.Collectors {
		if c == nil {
			return nil, fmt.Errorf("worker %s: Collectors[%d] is nil", cfg.NodeID, i)
		}
		if err := w.registry.Register(c); err != nil {
			return nil, fmt.Errorf("worker %s: Collectors[%d]: %w", cfg.NodeID, i, err)
		}
	}
	if cfg.HTTPAddr != "" {
		srv, err := obs.New(obs.Config{Addr: cfg.HTTPAddr, Registry: w.registry, Ready: w.ready, Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("worker %s: %w", cfg.NodeID, err)
		}
		w.http = srv
	}
	if cfg.Artifacts != nil {
		w.spool = cfg.Spool
		if w.spool == nil {
			w.memSpool = artifact.NewMemSpool(cfg.Artifacts)
			w.spool = w.memSpool
		}
	}
	if err := w.listenSandbox(); err != nil {
		if w.http != nil {
			_ = w.http.Shutdown(context.Background())
		}
		return nil, fmt.Errorf("worker %s: %w", cfg.NodeID, err)
	}
	g, err := w.newGossip()
	if err != nil {
		if w.sandboxLis != nil {
			_ = w.sandboxLis.Close()
		}
		if w.http != nil {
			_ = w.http.Shutdown(context.Background())
		}
		return nil, fmt.Errorf("worker %s: gossip: %w", cfg.NodeID, err)
	}
	w.gossip = g
	w.clusterIDv.Store(clusterID)
	return w, nil
}

// Instance returns this worker process's WorkerInfo.instance.
func (w *Worker) Instance() string { return w.info.GetInstance() }

// ID returns the worker's node id.
func (w *Worker) ID() string { return w.cfg.NodeID }

// Capacity returns what the worker offers (detected fields filled in).
func (w *Worker) Capacity() Capacity { return w.cfg.Capacity }

// GossipAddr returns the address of the worker's gossip member (the real
// port when the configured one was 0).
func (w *Worker) GossipAddr() string { return w.gossip.LocalAddr() }

// Leader returns the gRPC address of the head the worker's stream is
// connected to, or "" while it is not connected.
func (w *Worker) Leader() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.connected {
		return ""
	}
	return w.leader
}

// AttemptStatus is an attempt the worker holds, as Attempts reports it.
type AttemptStatus struct {
	// Key names the attempt.
	Key attempt.Key
	// State is where it is in its life cycle.
	State attempt.State
	// ContainerID is its container, "" while it starts (or if it never did).
	ContainerID string
	// Started is true once its process ran.
	Started bool
}

// Attempts returns the attempts the worker holds, sorted by task id and
// attempt number. Any goroutine may call it (tests, status pages).
func (w *Worker) Attempts() []AttemptStatus {
	w.mu.Lock()
	hs := slices.Collect(maps.Values(w.attempts))
	w.mu.Unlock()
	out := make([]AttemptStatus, 0, len(hs))
	for _, h := range hs {
		out = append(out, h.status())
	}
	slices.SortFunc(out, func(a, b AttemptStatus) int {
		if c := strings.Compare(a.Key.TaskID, b.Key.TaskID); c != 0 {
			return c
		}
		return int(a.Key.Attempt) - int(b.Key.Attempt)
	})
	return out
}

// Run joins the gossip pool, takes over the containers this worker left
// behind (see the package doc), then keeps a stream to the leader, runs the
// assigned attempts and reconciles its containers until ctx ends or
// Shutdown or Kill is called. It returns nil then; containers keep running.
// Call it once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	defer close(w.runDone)
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		w.wg.Wait()
		if w.pool != nil {
			w.pool.wg.Wait() // removals the drivers asked for
		}
	}()
	w.runCtx = ctx
	if w.spool != nil {
		w.resumeLanded()
	}
	if w.memSpool != nil {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.memSpool.Run(ctx)
		}()
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		select {
		case <-w.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()

	if w.http != nil {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			if err := w.http.Serve(ctx); err != nil {
				w.log.Warn("http server stopped", "addr", w.http.Addr(), "err", err)
			}
		}()
	}
	// Join --join and the heads saved by an earlier run (none: Join
	// returns at once), then keep the heads seen alive for the next start.
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := w.gossip.Join(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("gossip join failed", "join", w.cfg.Join, "err", err)
		}
	}()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.keepSeeds(ctx)
	}()
	w.log.Info("worker started", "runtime", w.rt.Name(), "gossip", w.GossipAddr(),
		"cpu_millis", w.cfg.Capacity.CPUMillis, "memory_bytes", w.cfg.Capacity.MemoryBytes,
		"gpus", w.cfg.Capacity.GPUs, "max_concurrent_starts", w.cfg.MaxConcurrentStarts, "http", w.HTTPAddr())

	if lister, ok := w.rt.(contract.ImageLister); ok {
		first := make(chan struct{})
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.imageLoop(ctx, lister, first)
		}()
		select { // the first Hello carries the images where the engine answers quickly
		case <-first:
		case <-ctx.Done():
			return nil
		}
	}
	if w.cfg.GPUHealth != nil {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.gpuHealthLoop(ctx, w.cfg.GPUHealth)
		}()
	}
	if !w.adoptExisting(ctx) {
		return nil
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.leaseLoop(ctx)
	}()
	if w.sandboxLis != nil {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.serveSandboxes(ctx)
		}()
	}
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		w.runStream(ctx)
	}()
	go func() {
		defer w.wg.Done()
		w.reconcileLoop(ctx)
	}()
	if w.pool != nil {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.pool.run(ctx)
		}()
	}
	<-ctx.Done()
	return nil
}

// Shutdown stops the worker gracefully: it refuses further assignments,
// stops the attempts of a runtime whose tasks cannot outlive it
// (stopHeld), waits (2 s at most) for the leader to ack the attempt
// events it holds (drainEvents), leaves the gossip pool (so the heads see
// "left", not "dead"), closes the
// stream and stops its goroutines, waiting for Run to return until ctx ends.
// Running containers are left running, and their final events not yet
// acked stay with the exited containers: a worker restarted with the same
// NodeID announces them in its Hello and takes them over. An exited
// container whose final event the head acked is removed, not left: a
// removal under way, or due once its stop returns, finishes before Run
// returns (CallTimeout at most each). The other exception is
// a runtime whose containers cannot outlive the worker (contract.StopAller,
// the process runtime): Shutdown stops its attempts first, while the
// stream is up (stopHeld: STOPPED, which the head re-queues), and stops
// what is left of them (SIGTERM, SIGKILL after StopGrace) once Run
// returned. Safe to call more than once.
func (w *Worker) Shutdown(ctx context.Context) error {
	var err error
	w.stopOnce.Do(func() {
		w.mu.Lock()
		w.closing = true
		w.mu.Unlock()
		if _, ok := w.rt.(contract.StopAller); ok {
			// Its tasks cannot outlive it: they end now, while the stream
			// is up, so that each end reaches the table as it is.
			w.stopHeld(ctx)
		}
		w.drainEvents(ctx)
		if lerr := w.gossip.Leave(shutdownStep(ctx, 2*time.Second)); lerr != nil {
			w.log.Debug("gossip leave", "err", lerr)
		}
		close(w.stopped)
		if w.running.Load() {
			select {
			case <-w.runDone:
			case <-ctx.Done():
				err = fmt.Errorf("worker %s: shutdown: %w", w.cfg.NodeID, ctx.Err())
			}
		}
		if w.pool != nil && w.running.Load() {
			// Warm containers hold no one's work (a restarted worker
			// removes them): none is left running after a clean stop.
			err = errors.Join(err, w.pool.removeAll(ctx))
		}
		if sa, ok := w.rt.(contract.StopAller); ok {
			// Its containers cannot be adopted by a restarted worker: stop
			// them now rather than leave orphans. The head re-queues their
			// attempts when it sees this worker left.
			err = errors.Join(err, sa.StopAll(ctx, w.cfg.StopGrace))
		}
		err = errors.Join(err, w.gossip.Shutdown())
		if w.sandboxLis != nil {
			_ = w.sandboxLis.Close() // closed already when Run served it
		}
		if w.http != nil {
			err = errors.Join(err, w.http.Shutdown(ctx))
		}
		w.log.Info("worker stopped")
	})
	return err
}

// stopHeld stops every attempt the worker holds (STOPPED, which the head
// re-queues without counting a failure, as for a worker that left; one
// that ended first keeps its own end) and waits until each one's final
// event is queued, at most StopGrace plus maxShutdownDrain or half of what
// is left of ctx. Shutdown calls it for a runtime whose tasks cannot
// outlive the worker, before drainEvents: an attempt that ended between
// the drain and the runtime's StopAll was lost with the worker, and its
// task ran again although it had completed (a fault trial: 8 of 900 short
// tasks over two SIGTERMs).
func (w *Worker) stopHeld(ctx context.Context) {
	hs := w.held()
	if len(hs) == 0 {
		return
	}
	reason := "worker " + w.cfg.NodeID + " is shutting down"
	for _, h := range hs {
		h.stop(reason)
	}
	sctx, cancel := context.WithTimeout(ctx, shutdownStep(ctx, w.cfg.StopGrace+maxShutdownDrain))
	defer cancel()
	for _, h := range hs {
		select {
		case <-h.stopped:
		case <-sctx.Done():
			w.log.Info("shutting down with attempts that have not ended yet: the runtime stops them next", "attempts", len(hs))
			return
		}
	}
}

// shutdownStep bounds a step of Shutdown to d or half of what is left of
// ctx, whichever is shorter (1 ms at least), so that the steps after it
// keep time.
func shutdownStep(ctx context.Context, d time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		d = max(min(d, time.Until(dl)/2), time.Millisecond)
	}
	return d
}

// maxShutdownDrain bounds how long Shutdown waits for the leader to ack
// the events the worker holds (drainEvents).
const maxShutdownDrain = 2 * time.Second

// drainEvents waits, while a stream to the leader is up, until the leader
// has acked every attempt event the worker holds, at most
// maxShutdownDrain or half of what is left of ctx: an end seen just before
// a stop reaches the table, rather than going with the worker (a process
// task's attempt is then lost and its task run again). Assignments are
// already refused (closing).
func (w *Worker) drainEvents(ctx context.Context) {
	w.mu.Lock()
	up := w.connected
	w.mu.Unlock()
	if !up {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, shutdownStep(ctx, maxShutdownDrain))
	defer cancel()
	select {
	case <-w.outbox.emptied():
	case <-dctx.Done():
		w.log.Info("stopping before the leader acknowledged every attempt event: attempts whose end it has not committed may run again",
			"pending_events", w.outbox.pendingLen(), "unacked_batches", w.outbox.unackedLen())
	}
}

// Kill stops the worker the way a crash would, for tests: no gossip leave,
// no goodbye on the stream; containers are not touched, except that the
// removals Shutdown finishes (containers whose final events were acked)
// finish here too. It waits for the worker's goroutines.
func (w *Worker) Kill() {
	w.stopOnce.Do(func() {
		w.mu.Lock()
		w.closing = true
		w.mu.Unlock()
		close(w.stopped)
		_ = w.gossip.Shutdown()
		if w.running.Load() {
			<-w.runDone
		}
		if w.sandboxLis != nil {
			_ = w.sandboxLis.Close() // closed already when Run served it
		}
		if w.http != nil {
			_ = w.http.Shutdown(context.Background()) // Run's end stopped it; this closes a listener never served
		}
	})
}
