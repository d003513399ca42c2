// Package head is the replicated head of a MegaFlow cluster: it wires the
// Raft node (head/consensus), the task table FSM (head/fsm), gossip
// membership (internal/gossip) and the gRPC API into one Head, and runs the
// leader-only loops. Only cmd/ and test clusters import it.
//
// Life of a Head: New opens the data directory and listeners; Run joins the
// gossip pool, bootstraps or waits to be added to the Raft cluster, serves
// gRPC and runs the leader loop while this head leads; Shutdown (or Kill, in
// tests) stops everything it started.
package head

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/megaflow/megaflow/head/consensus"
	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/gossip"
	"github.com/megaflow/megaflow/internal/obs"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/version"
	"github.com/megaflow/megaflow/internal/wire"
)

// Head is one member of the head cluster. Create it with New, start it with
// Run, stop it with Shutdown.
type Head struct {
	cfg    Config
	logger *slog.Logger
	clock  clock.Clock // Config.Clock, or the real clock

	fsm    *fsm.FSM
	node   *consensus.Node
	prop   proposer // the leader loops' way to the log: raftProposer{h}
	gossip *gossip.Gossip
	// sandboxes serves SandboxService; its worker connections close with
	// the head (sandbox.go).
	sandboxes *sandboxService

	grpcLis net.Listener
	grpc    *grpc.Server
	health  *health.Server
	fwd     *forwarder

	submitLocks *graphLocks
	leaderReady atomic.Bool   // set by the leader loop after its barrier
	planning    atomic.Bool   // the scheduling loop's plan is being committed (carried plans wait it out: submissionPlan, eventsPlan)
	leaderKick  chan struct{} // gossip changed: the leader loop reconciles heads
	leaderMu    sync.Mutex
	leaderDone  chan struct{} // closed when the current leadership ends; nil when not leading
	leaderStart time.Time     // when the current leadership began (leaderMu)
	sessions    *sessions     // live worker streams and leases (leader only)
	leaseMsgs   chan []byte   // lease renewals received through gossip (leaseGossip)
	limiter     *rateLimiter  // per-tenant API rate limit; nil: none

	registry *obs.Registry // this head's metrics (no global registry)
	metrics  *headMetrics
	http     *obs.Server // nil when Config.HTTPAddr is empty

	stopOnce sync.Once
	stopped  chan struct{} // closed by Shutdown/Kill: Run returns
	wg       sync.WaitGroup
}

// New opens the Raft stores under cfg.DataDir, binds the Raft, gossip and
// gRPC listeners and returns a Head that is not yet running. Errors name the
// field or the address that failed.
func New(cfg Config) (*Head, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("head config: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("head", cfg.NodeID)
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real()
	}
	// The head's own files (the gossip seeds) live in DataDir itself:
	// consensus creates DataDir/raft only when Raft keeps its files there.
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("head %s: create data directory: %w", cfg.NodeID, err)
	}
	h := &Head{cfg: cfg, logger: logger, clock: clk, stopped: make(chan struct{})}
	h.limiter = newRateLimiter(cfg.RateLimit, cfg.rateBurst())
	if !cfg.ACL {
		logger.Warn("ACLs are off: any caller that reaches the gRPC port can submit, read, cancel and delete any tenant's work and change quotas and policies; start every head with --acl (docs/security.md)")
	}

	table, err := fsm.New(fsm.Config{EventRingSize: cfg.EventRetention})
	if err != nil {
		return nil, fmt.Errorf("head %s: %w", cfg.NodeID, err)
	}
	h.fsm = table

	ccfg := consensus.DefaultConfig()
	ccfg.NodeID = cfg.NodeID
	ccfg.DataDir = cfg.DataDir
	ccfg.BindAddr = cfg.RaftAddr
	ccfg.Transport, ccfg.LogStore, ccfg.StableStore, ccfg.SnapshotStore = cfg.RaftTransport, cfg.RaftLogStore, cfg.RaftStableStore, cfg.RaftSnapshotStore
	if cfg.RaftTransport != nil {
		ccfg.BindAddr = ""
	}
	ccfg.FSM = h.fsm
	ccfg.Logger = logger
	ccfg.SnapshotThreshold = cfg.SnapshotThreshold
	ccfg.SnapshotInterval = cfg.SnapshotInterval
	ccfg.TrailingLogs = cfg.TrailingLogs
	ccfg.SnapshotReplayBudget, ccfg.SnapshotMinGap = cfg.SnapshotReplayBudget, cfg.SnapshotMinGap
	ccfg.Fast = cfg.Fast
	if cfg.TLS != nil && cfg.RaftTransport == nil {
		ccfg.TLS = &consensus.TransportTLS{
			Server:    func() *tls.Config { return cfg.TLS.ServerConfig(nil, tlsconfig.RoleHead) },
			Client:    func() *tls.Config { return cfg.TLS.ClientConfig(tlsconfig.RoleHead) },
			OnRefused: tlsconfig.RefusalLogger(logger, "raft "+cfg.RaftAddr, clk.Now, refusalLogEvery),
		}
	}
	node, err := consensus.New(ccfg)
	if err != nil {
		return nil, fmt.Errorf("head %s: raft: %w", cfg.NodeID, err)
	}
	h.node = node
	h.prop = raftProposer{h}

	lis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		shutdownNode(node)
		return nil, fmt.Errorf("head %s: grpc listen on %s: %w", cfg.NodeID, cfg.GRPCAddr, err)
	}
	h.grpcLis = lis

	gcfg := gossip.DefaultConfig()
	gcfg.NodeName = cfg.NodeID
	gcfg.BindAddr = cfg.GossipAddr
	saved := gossip.LoadSeeds(cfg.DataDir, cfg.GossipAddr)
	gcfg.Join = gossip.JoinList(cfg.Join, saved)
	if len(saved) > 0 {
		logger.Info("joining the heads saved by the last run too", "join", cfg.Join, "saved", saved)
	}
	gcfg.Logger = logger
	gcfg.SecretKey = cfg.GossipKey
	if cfg.Fast {
		gcfg.Timing = gossip.FastTiming()
	}
	h.leaseMsgs = make(chan []byte, 256)
	gcfg.OnMessage = h.onGossipMessage
	gcfg.Meta = gossip.Meta{Role: gossip.RoleHead, NodeID: cfg.NodeID, RaftAddr: node.Addr(), GRPCAddr: lis.Addr().String()}
	// Every head advertises the highest rules version it applies: the
	// leader commits a new one only once all voters do (rules.go).
	gcfg.Meta.Extra = map[string]string{fsm.MetaKeyRules: strconv.FormatUint(fsm.RulesCurrent, 10)}
	if cfg.Version != "" {
		gcfg.Meta.Extra[version.MetaKey] = cfg.Version
	}
	g, err := gossip.New(gcfg)
	if err != nil {
		_ = lis.Close()
		shutdownNode(node)
		return nil, fmt.Errorf("head %s: gossip: %w", cfg.NodeID, err)
	}
	h.gossip = g

	h.fwd = newForwarder(h)
	h.submitLocks = newGraphLocks()
	h.leaderKick = make(chan struct{}, 1)
	h.sessions = newSessions()
	unary := []grpc.UnaryServerInterceptor{h.rateLimitUnary, checkBoundsUnary}
	stream := []grpc.StreamServerInterceptor{h.rateLimitStream, checkBoundsStream}
	var creds []grpc.ServerOption
	if cfg.ACL {
		// After the certificate's role (below, with TLS), before the rate
		// limit: the limit charges the token's tenant.
		unary = append([]grpc.UnaryServerInterceptor{h.aclUnary}, unary...)
		stream = append([]grpc.StreamServerInterceptor{h.aclStream}, stream...)
	}
	if cfg.TLS != nil {
		// Every peer shows a certificate of the cluster's CA at the
		// handshake; its role is checked per service before anything else.
		creds = append(creds, grpc.Creds(cfg.TLS.ServerCredentials(
			tlsconfig.RefusalLogger(logger, "grpc "+lis.Addr().String(), clk.Now, refusalLogEvery), tlsconfig.Roles...)))
		unary = append([]grpc.UnaryServerInterceptor{tlsconfig.UnaryAuthorizer()}, unary...)
		stream = append([]grpc.StreamServerInterceptor{tlsconfig.StreamAuthorizer()}, stream...)
	}
	h.grpc = grpc.NewServer(append(creds, grpc.MaxRecvMsgSize(256<<20),
		grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...),
		// Let workers and clients ping idle streams, and ping them: a worker
		// that vanished without closing its stream is noticed in seconds.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}))...)
	svc := &service{h: h}
	wire.RegisterMegaflowServiceServer(h.grpc, svc)
	wire.RegisterOperatorServiceServer(h.grpc, &operatorService{h: h})
	h.sandboxes = newSandboxService(h, svc)
	wire.RegisterSandboxServiceServer(h.grpc, h.sandboxes)
	wire.RegisterWorkerServiceServer(h.grpc, &workerService{h: h})
	h.health = health.NewServer()
	healthpb.RegisterHealthServer(h.grpc, h.health)
	reflection.Register(h.grpc)
	h.registry = obs.NewRegistry()
	h.metrics = newHeadMetrics(h.registry, h)
	h.sandboxes.metrics = newSandboxMetrics(h.registry, h)
	if cfg.HTTPAddr != "" {
		srv, err := obs.New(obs.Config{Addr: cfg.HTTPAddr, Registry: h.registry, Ready: h.ready, Logger: logger})
		if err != nil {
			_ = lis.Close()
			shutdownNode(node)
			_ = g.Shutdown()
			return nil, fmt.Errorf("head %s: %w", cfg.NodeID, err)
		}
		h.http = srv
		h.registerDashboard(srv.Mux)
		if cfg.Pprof {
			h.registerPprof(srv.Mux)
		}
		// Followers' dashboards link to the leader's: gossip carries the
		// address to them.
		meta := gcfg.Meta.Clone()
		meta.Extra[metaHTTP] = srv.Addr()
		if err := g.UpdateMeta(meta); err != nil {
			logger.Warn("cannot gossip the HTTP address; followers' dashboards will not link to this one", "err", err)
		}
	}
	return h, nil
}

// refusalLogEvery is the shortest time between two log lines about
// refused TLS handshakes on one listener.
const refusalLogEvery = 10 * time.Second

// transportCreds returns the credentials this head dials node (of role
// server; "": any node of it) with: mutual TLS with its certificate when
// Config.TLS is set, checking that the peer's certificate names the role
// and the node, else plaintext.
func (h *Head) transportCreds(server tlsconfig.Role, node string) grpc.DialOption {
	if h.cfg.TLS == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(h.cfg.TLS.ClientCredentialsFor(server, node))
}

// shutdownNode shuts down the Raft node of a head that failed to start,
// within 10 s.
func shutdownNode(node *consensus.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = node.Shutdown(ctx)
}

// ID returns the head's node id.
func (h *Head) ID() string { return h.cfg.NodeID }

// GRPCAddr returns the address the gRPC API listens on (the real port when
// the configured one was 0).
func (h *Head) GRPCAddr() string { return h.grpcLis.Addr().String() }

// GossipAddr returns the address of this head's gossip member.
func (h *Head) GossipAddr() string { return h.gossip.LocalAddr() }

// RaftAddr returns the address of this head's Raft transport.
func (h *Head) RaftAddr() string { return h.node.Addr() }

// HTTPAddr returns the address of the HTTP listener (metrics, health,
// dashboard), or "" when the head serves no HTTP.
func (h *Head) HTTPAddr() string {
	if h.http == nil {
		return ""
	}
	return h.http.Addr()
}

// Registry returns the head's metrics registry, for tests and for
// embedding programs that serve metrics themselves.
func (h *Head) Registry() *obs.Registry { return h.registry }

// IsLeader reports whether this head is the Raft leader now.
func (h *Head) IsLeader() bool { return h.node.IsLeader() }

// WorkerConnected reports whether worker id has a live stream to this
// head. Only the leader takes worker streams, so on a follower it is false.
func (h *Head) WorkerConnected(id string) bool { return h.sessions.connected(id) }

// AppliedIndex returns the last Raft index applied to this head's table.
func (h *Head) AppliedIndex() uint64 { return h.fsm.AppliedIndex() }

// FSM returns the head's task table, for tests that compare replicas.
func (h *Head) FSM() *fsm.FSM { return h.fsm }

// Node returns the head's Raft node, for tests.
func (h *Head) Node() *consensus.Node { return h.node }

// Run serves gRPC, joins the gossip pool, bootstraps or waits to be added to
// the Raft cluster, and runs the leader loop whenever this head leads. It
// returns when ctx ends or the head is shut down or killed; call Shutdown
// after it for a clean stop.
func (h *Head) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-h.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()

	serveErr := make(chan error, 1)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		serveErr <- h.grpc.Serve(h.grpcLis)
	}()
	h.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	if h.http != nil {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			if err := h.http.Serve(ctx); err != nil {
				h.logger.Warn("http server stopped", "addr", h.http.Addr(), "err", err)
			}
		}()
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.runStageObserver(ctx)
	}()

	if len(h.cfg.Join) > 0 {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			if err := h.gossip.Join(ctx); err != nil && ctx.Err() == nil {
				h.logger.Warn("gossip join failed", "join", h.cfg.Join, "err", err)
			}
		}()
	}
	h.logger.Info("head started", "raft", h.node.Addr(), "grpc", h.GRPCAddr(), "gossip", h.GossipAddr(), "http", h.HTTPAddr(),
		"bootstrap_expect", h.cfg.BootstrapExpect, "existing_state", h.node.HasExistingState())

	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.runMembership(ctx)
	}()

	h.runLeadership(ctx)
	select {
	case err := <-serveErr:
		if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("head %s: grpc: %w", h.cfg.NodeID, err)
		}
	default:
	}
	return nil
}

// runLeadership starts the leader loop on each leadership gain and stops it
// on loss; it returns when ctx ends.
func (h *Head) runLeadership(ctx context.Context) {
	type leaderRun struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	var run *leaderRun
	stop := func() {
		if run != nil {
			run.cancel()
			<-run.done
			run = nil
		}
	}
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case isLeader := <-h.node.LeaderChanges():
			if isLeader && run == nil {
				lctx, cancel := context.WithCancel(ctx)
				run = &leaderRun{cancel: cancel, done: make(chan struct{})}
				go func(done chan struct{}) {
					defer close(done)
					h.leaderLoop(lctx)
				}(run.done)
			} else if !isLeader {
				stop()
			}
		}
	}
}

// Shutdown stops the head cleanly: it leaves the gossip pool, stops serving
// gRPC (waiting for calls in flight until ctx ends), and shuts Raft down
// (consensus.Node.Shutdown: by ctx's deadline plus consensus.ShutdownGrace
// at most, naming in the log what did not stop). Safe to call more than
// once.
func (h *Head) Shutdown(ctx context.Context) error {
	var err error
	h.stopOnce.Do(func() {
		close(h.stopped)
		h.health.Shutdown()
		if h.http != nil {
			err = errors.Join(err, h.http.Shutdown(ctx))
		}
		err = errors.Join(err, h.gossip.Leave(2*time.Second))
		done := make(chan struct{})
		go func() { h.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			h.grpc.Stop()
			<-done
		}
		h.fwd.close()
		h.sandboxes.conns.close()
		err = errors.Join(err, h.node.Shutdown(ctx), h.gossip.Shutdown())
		h.wg.Wait()
	})
	return err
}

// Kill stops the head the way a crash would, for tests: listeners close
// without goodbyes, Raft stops without a leadership transfer, gossip stops
// without leaving. The data directory is left as a crash would leave it.
func (h *Head) Kill() {
	h.stopOnce.Do(func() {
		close(h.stopped)
		if h.http != nil {
			cctx, cancel := context.WithCancel(context.Background())
			cancel() // a crash waits for nothing
			_ = h.http.Shutdown(cctx)
		}
		h.grpc.Stop()
		h.fwd.close()
		h.sandboxes.conns.close()
		h.node.Kill()
		_ = h.gossip.Shutdown()
		h.wg.Wait()
	})
}
