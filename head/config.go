package head

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"time"

	"github.com/hashicorp/raft"
	"github.com/megaflow/megaflow/head/scheduler"
	"github.com/megaflow/megaflow/internal/blob"
	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/lease"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/tlsconfig"
)

// Config configures a Head. Build it from DefaultConfig, set the node's id,
// data directory and addresses, and call Validate (New does).
type Config struct {
	// NodeID names this head in Raft and gossip; unique in the cluster.
	NodeID string
	// Version is this head's build as it reports it to the cluster
	// (internal/version's Info.Short: megaflow-head sets it), advertised
	// in its gossip Meta under version.MetaKey and shown in
	// ClusterStatus's HeadInfo.version. Empty: not advertised.
	Version string
	// DataDir holds the Raft log, stable store and snapshots (DataDir/raft,
	// unless the Raft stores below are given) and the gossip seeds of the
	// next start (gossip.SeedsFile). New creates it.
	DataDir string
	// RaftAddr is the host:port the Raft TCP transport binds and advertises.
	// Port 0 picks a free port (tests). Not used with RaftTransport.
	RaftAddr string
	// RaftTransport, RaftLogStore with RaftStableStore, and
	// RaftSnapshotStore, for tests, replace Raft's TCP transport on
	// RaftAddr, its BoltDB log and stable store, and its file snapshots
	// (hashicorp/raft's in-memory ones: head/consensus.Config's fields of
	// the same names, which say who closes what). Nil keeps each.
	RaftTransport     raft.Transport
	RaftLogStore      raft.LogStore
	RaftStableStore   raft.StableStore
	RaftSnapshotStore raft.SnapshotStore
	// GRPCAddr is the host:port of the client-facing and worker gRPC service.
	GRPCAddr string
	// GossipAddr is the host:port of the memberlist pool (TCP and UDP).
	GossipAddr string
	// HTTPAddr is the host:port of the HTTP listener serving /metrics,
	// /healthz, /readyz, the dashboard and its JSON API (/api/...); empty:
	// no HTTP listener. Port 0 picks a free port (tests).
	HTTPAddr string
	// Pprof serves net/http/pprof under /debug/pprof/ on HTTPAddr (CPU,
	// heap, goroutine profiles and traces), behind an admin token when ACL
	// is on, as the dashboard's API. Off by default: a profile costs the
	// head CPU while it runs. Needs HTTPAddr.
	Pprof bool
	// BootstrapExpect is how many heads must see each other before they
	// bootstrap a new Raft cluster together (Consul's -bootstrap-expect); 0
	// means never bootstrap: wait to be added by an existing leader.
	BootstrapExpect int
	// Join lists gossip addresses of heads to join at start.
	Join []string
	// Logger receives the head's logs; nil discards them.
	Logger *slog.Logger
	// Clock is the head's time: the times the leader stamps into commands,
	// worker leases and liveness, deadlines, queue waits, retention and
	// rate limits. nil: the real clock. Raft's own timing, the schedule
	// loop's pacing and the latency metrics stay on the process's time.
	Clock clock.Clock
	// Artifacts is the artifact store the workers upload to, read by the
	// Logs, ArtifactList and ArtifactGet RPCs; nil: those answer
	// FAILED_PRECONDITION.
	Artifacts blob.Store
	// ArtifactRetention is how long the artifacts of a finished graph are
	// kept before the leader deletes them from the store; a graph's label
	// megaflow.io/artifact-retention overrides it. 0: kept until the graph
	// is deleted. Default 0.
	ArtifactRetention time.Duration
	// ArtifactSweepInterval is how often the leader looks for expired
	// artifacts, and for attempts whose artifacts landed in the store
	// without their worker saying so (retention.go). Default 10 min.
	ArtifactSweepInterval time.Duration
	// GraphRetention is how long a finished graph stays in the live table
	// before the leader archives it: its tasks leave the table, its
	// summary (counts, metrics, labels, times) stays in the archive
	// (archive.go); a graph's label megaflow.io/graph-retention overrides
	// it. 0: kept live until deleted. Default 6 h.
	GraphRetention time.Duration
	// ArchiveRetention is how long an archived graph's summary stays in
	// the archive. 0: kept until the graph is deleted. Default 30 days.
	ArchiveRetention time.Duration
	// ArchiveSweepInterval is how often the leader looks for graphs to
	// archive and summaries to drop. Default 1 min.
	ArchiveSweepInterval time.Duration

	// MaxEntryBytes bounds the encoded size of one Raft log entry; graphs
	// larger than this are committed in several entries, atomically.
	MaxEntryBytes int
	// ApplyTimeout bounds how long a write waits to be enqueued in Raft.
	ApplyTimeout time.Duration
	// EventRetention is how many recent events each head keeps for Watch.
	EventRetention int
	// StagedTTL is how long the chunks of a graph whose submission never
	// finished are kept before the leader drops them.
	StagedTTL time.Duration

	// Lease is the worker lease (internal/lease): a worker stops its
	// attempts when it has had no heartbeat acked for Lease.Duration, and
	// the leader declares a worker down and re-queues its attempts only
	// when it has not heard from it (stream or gossip renewal) for
	// Lease.Duration+Lease.Margin. Default 10 s and 5 s (--worker-lease,
	// --worker-lease-margin). Gossip's verdicts do not shorten it: a
	// worker gossip reports dead may still run its attempts until its
	// lease lapses.
	Lease lease.Config
	// ScheduleInterval is the shortest time between two scheduling rounds
	// (rounds run when the table changes, batched over this interval).
	ScheduleInterval time.Duration

	// RateLimit is how many client API calls per second each tenant may
	// make to this head (a token bucket per tenant); 0: no limit. Calls
	// over it get ResourceExhausted with a retry-after.
	RateLimit float64
	// RateBurst is the bucket size: calls a tenant may make at once above
	// the rate. 0 with a RateLimit: the rate rounded up, at least 1.
	RateBurst int
	// RetryBackoff is the wait before a task's first retry after a failed
	// attempt; each further retry waits twice as long, up to
	// RetryBackoffMax, with ±20% jitter (a restarting service's wait grows
	// with its restarts alike). The leader puts both and a random seed in
	// each TaskEventsCommand; the FSM computes the wait (head/state
	// .RetryBackoff). 0: retry at once.
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// MaxQueueWait is how long a task may stay QUEUED with an infeasible
	// reason (no worker could ever run it, or it asks for more than its
	// tenant's quota) before the leader fails it with that reason; 0:
	// forever.
	MaxQueueWait time.Duration
	// MaxSnapshots is how many sandbox snapshots one tenant may hold
	// (docs/sandboxes.md); 0: spec.SnapshotDefaultMaxPerTenant (64). At
	// most spec.SnapshotMaxPerTenantLimit.
	MaxSnapshots int

	// Scheduler is the placement policy: queue weights and strategies,
	// image locality, head-of-line holds (head/scheduler.Policy).
	Scheduler scheduler.Policy

	// SnapshotThreshold, SnapshotInterval and TrailingLogs tune Raft
	// snapshots (hashicorp/raft Config fields of the same names).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// SnapshotReplayBudget bounds a restart's log replay: a head takes a
	// Raft snapshot once the applies since its last one took this much
	// wall time (head/consensus Config.SnapshotReplayBudget), at most one
	// every SnapshotMinGap. 0: off (SnapshotThreshold only).
	SnapshotReplayBudget time.Duration
	SnapshotMinGap       time.Duration
	// Fast shortens Raft and gossip timeouts for tests on loopback.
	Fast bool

	// TLS, when set, turns on mutual TLS (docs/security.md): the gRPC
	// API requires a certificate signed by its CA and checks its role per
	// service (client API: client or head; worker stream: worker); a
	// follower forwards to the leader with it; Raft's TCP transport takes
	// and dials heads only; the sandbox calls to workers verify a worker
	// certificate. It must hold a head certificate. Its Reload (SIGHUP)
	// applies to every later connection. Nil: plaintext everywhere, as
	// before. With RaftTransport set, Raft does not use it.
	TLS *tlsconfig.Store
	// GossipKey, when set, encrypts and authenticates gossip (memberlist's
	// SecretKey: 16, 24 or 32 bytes, the same on every head and worker).
	// Nil: plaintext gossip.
	GossipKey []byte

	// ACL, when set, turns on API tokens (docs/security.md): every gRPC
	// call but health checks and the once-only BootstrapACL must carry a
	// token of the role its method needs (internal/acl), and reaches only
	// its token's tenant. Off: any caller may make any call, as before.
	ACL bool
	// ACLMaxStaleness bounds how long a revoked token may still be
	// accepted by a follower cut off from the leader: a follower whose
	// last contact with the leader is older refuses token-authenticated
	// calls with Unavailable. 0: DefaultACLMaxStaleness.
	ACLMaxStaleness time.Duration
}

// DefaultACLMaxStaleness is Config.ACLMaxStaleness's default.
const DefaultACLMaxStaleness = 10 * time.Second

// DefaultConfig returns a Config with production defaults and no identity
// or addresses.
func DefaultConfig() Config {
	return Config{
		MaxEntryBytes:         1 << 20,
		ApplyTimeout:          10 * time.Second,
		EventRetention:        100_000,
		StagedTTL:             5 * time.Minute,
		ArtifactSweepInterval: 10 * time.Minute,
		GraphRetention:        6 * time.Hour,
		ArchiveRetention:      30 * 24 * time.Hour,
		ArchiveSweepInterval:  time.Minute,
		Lease:                 lease.DefaultConfig(),
		Scheduler:             scheduler.DefaultPolicy(),
		ScheduleInterval:      5 * time.Millisecond,
		SnapshotThreshold:     8192,
		SnapshotInterval:      2 * time.Minute,
		TrailingLogs:          10240,
		SnapshotReplayBudget:  time.Second,
		SnapshotMinGap:        30 * time.Second,
		RetryBackoff:          time.Second,
		RetryBackoffMax:       time.Minute,
	}
}

// Validate reports every field that is missing or out of range, naming the
// bound and, for the fields megaflow-head sets from flags, the flag (a
// user of the binary never sees a Go field name); other fields are named
// as in Config.
func (c *Config) Validate() error {
	var errsList []error
	if c.NodeID == "" {
		errsList = append(errsList, errors.New("--node-id is empty: give each head a unique id"))
	}
	if c.DataDir == "" {
		errsList = append(errsList, errors.New("--data-dir is empty: give a directory for the Raft log and snapshots"))
	}
	if c.TLS != nil && c.TLS.Role() != tlsconfig.RoleHead {
		errsList = append(errsList, fmt.Errorf("--tls-cert holds a %s certificate: a head needs a head certificate (megaflow tls cert create --head --node-id %s)", c.TLS.Role(), c.NodeID))
	} else if c.TLS != nil && c.NodeID != "" {
		// Another head's certificate is refused; one made before
		// certificates named their node is taken (no peer checks a head's
		// id yet: docs/security.md).
		cert := c.TLS.Certificate()
		if id, err := tlsconfig.NodeOf(cert, tlsconfig.RoleHead); id != "" || err != nil {
			if err := tlsconfig.CheckNode(cert, tlsconfig.RoleHead, c.NodeID); err != nil {
				errsList = append(errsList, fmt.Errorf("--tls-cert: %w", err))
			}
		}
	}
	if n := len(c.GossipKey); n != 0 && n != 16 && n != 24 && n != 32 {
		errsList = append(errsList, fmt.Errorf("--gossip-key is %d bytes: must be 32 (or 16 or 24)", n))
	}
	for _, a := range []struct{ name, addr string }{{"--raft-addr", c.RaftAddr}, {"--grpc-addr", c.GRPCAddr}, {"--gossip-addr", c.GossipAddr}} {
		if a.name == "--raft-addr" && c.RaftTransport != nil {
			continue // not used
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			errsList = append(errsList, fmt.Errorf("%s %q is not host:port (e.g. 127.0.0.1:7070): %v", a.name, a.addr, err))
		}
	}
	if c.SnapshotReplayBudget < 0 || c.SnapshotMinGap < 0 {
		errsList = append(errsList, fmt.Errorf("--raft-snapshot-replay-budget %v and --raft-snapshot-min-gap %v must not be negative (0: no replay budget)", c.SnapshotReplayBudget, c.SnapshotMinGap))
	}
	if c.Pprof && c.HTTPAddr == "" {
		errsList = append(errsList, errors.New("Pprof is set but HTTPAddr is empty: pprof is served on the HTTP address (give --http-addr, or drop --pprof)"))
	}
	if c.HTTPAddr != "" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			errsList = append(errsList, fmt.Errorf("HTTPAddr %q is not host:port (or empty for no HTTP): %v (--http-addr)", c.HTTPAddr, err))
		}
	}
	if c.BootstrapExpect < 0 {
		errsList = append(errsList, fmt.Errorf("--bootstrap-expect %d is negative; give the number of heads that bootstrap together, or 0 to join", c.BootstrapExpect))
	}
	if c.MaxEntryBytes < 64<<10 {
		errsList = append(errsList, fmt.Errorf("MaxEntryBytes %d is below 64 KiB", c.MaxEntryBytes))
	}
	if c.ApplyTimeout <= 0 {
		errsList = append(errsList, fmt.Errorf("ApplyTimeout %v must be positive", c.ApplyTimeout))
	}
	if c.EventRetention < 1000 {
		errsList = append(errsList, fmt.Errorf("EventRetention %d is below 1000", c.EventRetention))
	}
	if err := c.Lease.Validate(); err != nil {
		errsList = append(errsList, err)
	}
	if c.ScheduleInterval <= 0 || c.ScheduleInterval > time.Second {
		errsList = append(errsList, fmt.Errorf("ScheduleInterval %v must be in (0, 1s]", c.ScheduleInterval))
	}
	if c.ArtifactRetention < 0 || c.ArtifactSweepInterval < 10*time.Millisecond {
		errsList = append(errsList, fmt.Errorf("ArtifactRetention %v must not be negative and ArtifactSweepInterval %v must be at least 10ms",
			c.ArtifactRetention, c.ArtifactSweepInterval))
	}
	if c.GraphRetention < 0 || c.ArchiveRetention < 0 || c.ArchiveSweepInterval < 10*time.Millisecond || c.ArchiveSweepInterval > time.Hour {
		errsList = append(errsList, fmt.Errorf("GraphRetention %v and ArchiveRetention %v must not be negative (0: keep), and ArchiveSweepInterval %v must be 10ms to 1h",
			c.GraphRetention, c.ArchiveRetention, c.ArchiveSweepInterval))
	}
	if c.StagedTTL <= 0 {
		errsList = append(errsList, fmt.Errorf("StagedTTL %v must be positive", c.StagedTTL))
	}
	if c.ACLMaxStaleness < 0 || c.ACLMaxStaleness > time.Hour {
		errsList = append(errsList, fmt.Errorf("ACLMaxStaleness %v: use 0 (the default, %v) to 1h", c.ACLMaxStaleness, DefaultACLMaxStaleness))
	}
	if c.RateLimit < 0 || math.IsNaN(c.RateLimit) || math.IsInf(c.RateLimit, 0) {
		errsList = append(errsList, fmt.Errorf("--rate-limit %v: give 0 (no limit) or a positive number of calls per second", c.RateLimit))
	}
	if c.RateBurst < 0 {
		errsList = append(errsList, fmt.Errorf("--rate-burst %d is negative; give 0 (the rate, rounded up) or more", c.RateBurst))
	}
	if c.RetryBackoff < 0 || c.RetryBackoffMax < c.RetryBackoff {
		errsList = append(errsList, fmt.Errorf("RetryBackoff %v and RetryBackoffMax %v: want 0 <= RetryBackoff <= RetryBackoffMax", c.RetryBackoff, c.RetryBackoffMax))
	}
	if c.MaxQueueWait < 0 {
		errsList = append(errsList, fmt.Errorf("--max-queue-wait %v is negative; give 0 (wait forever) or more", c.MaxQueueWait))
	}
	if c.MaxSnapshots < 0 || c.MaxSnapshots > spec.SnapshotMaxPerTenantLimit {
		errsList = append(errsList, fmt.Errorf("--max-snapshots %d is out of range: 0 (the default, %d) to %d", c.MaxSnapshots, spec.SnapshotDefaultMaxPerTenant, spec.SnapshotMaxPerTenantLimit))
	}
	return errors.Join(errsList...)
}

// rateBurst is RateBurst, or the rate rounded up (at least 1) when 0.
func (c *Config) rateBurst() int {
	if c.RateBurst > 0 {
		return c.RateBurst
	}
	return max(1, int(math.Ceil(c.RateLimit)))
}
