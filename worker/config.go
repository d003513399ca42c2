package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/megaflow/megaflow/internal/artifact"
	"github.com/megaflow/megaflow/internal/blob"
	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/nodeid"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
)

// Capacity is what a worker offers to the scheduler.
type Capacity struct {
	// CPUMillis is CPU in millicores (1000 = one core).
	CPUMillis int64
	// MemoryBytes is memory in bytes.
	MemoryBytes int64
	// GPUs is the number of whole GPUs.
	GPUs int32
}

// Config configures a Worker. Start from DefaultConfig, set NodeID,
// DataDir, GossipAddr, Runtime and Join or Heads, then call New (which calls
// Validate).
type Config struct {
	// NodeID names this worker in gossip and on the stream; unique in the
	// cluster and stable across restarts (containers carry it as a label, so
	// a restarted worker finds its own).
	NodeID string
	// ClusterName is the megaflow.cluster label of this worker's containers,
	// so that two clusters sharing a container engine never touch each
	// other's containers. Default "megaflow".
	ClusterName string
	// DataDir holds the per-attempt log files:
	// DataDir/logs/<task id, "/" replaced by "+">/<attempt>.log, created
	// with the attempt's first byte of output (none: no file). They are
	// kept when containers are removed.
	DataDir string
	// GossipAddr is the host:port of this worker's gossip member (TCP and
	// UDP); port 0 picks a free one (tests).
	GossipAddr string
	// Join lists gossip addresses of heads to join.
	Join []string
	// Heads lists gRPC addresses of heads to connect to, tried in order.
	// Empty: the heads are found in gossip (members with Role head and
	// their Meta.GRPCAddr).
	Heads []string
	// Runtime runs the containers. Required.
	Runtime contract.Runtime
	// Capacity is what the worker offers. A zero field is filled by New
	// from the machine (DetectCapacity): runtime.NumCPU()*1000 millicores,
	// /proc/meminfo's MemTotal; no GPUs.
	Capacity Capacity
	// GPUs are the devices the worker offers, scheduled by UUID (from
	// gpu.Discover on a GPU machine). When set, Capacity.GPUs is their
	// count.
	GPUs []*wire.GpuDevice
	// GPUCheck, when set, is called before each start of an attempt that
	// was assigned GPUs, with their UUIDs (gpu.Check on a GPU machine: the
	// devices exist, are healthy and run no foreign compute process). An
	// error refuses the start: the attempt ends FAILED with its message.
	GPUCheck func(uuids []string) error
	// GPUHealth, when set, delivers the health changes of the worker's GPUs
	// (from gpu.Watcher, adapted by the caller, who owns and stops it). An
	// unhealthy GPU is reported to the leader, which gives it no new work
	// and retries the attempts on it elsewhere; the worker stops those
	// attempts. nil: GPUs are assumed healthy.
	GPUHealth <-chan GPUHealthEvent
	// Labels are the worker's labels, matched by tasks' node selectors.
	Labels map[string]string
	// Version is this worker's build as it reports it in its WorkerInfo
	// (internal/version's Info.Short: megaflow-worker sets it); the
	// table keeps it and megaflow workers shows it. Empty: not reported.
	Version string
	// MaxConcurrentStarts caps the container starts in flight; further
	// starts wait in arrival order. Default 4.
	MaxConcurrentStarts int
	// Logger receives the worker's logs; nil discards them.
	Logger *slog.Logger
	// Clock is the worker's time: timeouts, retries, reconciliation,
	// heartbeats, reconnect backoff and event times. nil: the real clock.
	Clock clock.Clock

	// ReconcileInterval is how often the worker lists its containers to
	// remove leaked ones and to take over adopted ones. Default 30 s.
	ReconcileInterval time.Duration
	// SnapshotGrace is how old a snapshot image of this worker that no
	// snapshot of the table names must be before reconciliation removes it
	// (snapshot.go): a commit whose record is still on its way to the table
	// is younger. Default 10 min; within [1s, 7 days].
	SnapshotGrace time.Duration
	// HeartbeatInterval is how often a heartbeat goes to the leader.
	// Default 2 s.
	HeartbeatInterval time.Duration
	// StopGrace is how long a stopped container gets between SIGTERM and
	// SIGKILL. Default 10 s.
	StopGrace time.Duration
	// StartTimeout bounds one container start, image pull included.
	// Default 15 min.
	StartTimeout time.Duration
	// CallTimeout bounds every other runtime call (a Stop gets StopGrace
	// more). Default 30 s.
	CallTimeout time.Duration
	// UploadIdle bounds the wait for the next chunk of a sandbox upload
	// (UploadArchive): a client that sends nothing for this long loses
	// its upload (DeadlineExceeded), so that a stalled client does not
	// hold the engine's archive request, the sandbox's activity and the
	// engine's locks on the container until its own deadline. The
	// client library reads chunks from local files, milliseconds apart.
	// Default 30 s, in [10 ms, 10 min].
	UploadIdle time.Duration
	// BatchDelay is how long events are collected behind a batch that
	// waits for its ack before they are sent, and how long the events of
	// the attempts of an assignment batch are held so that they go
	// together; otherwise, with no batch in flight, an event is sent at
	// once. 0 sends every event at once. Default 5 ms.
	BatchDelay time.Duration
	// MaxBatchEvents caps the events in one batch. Default 256.
	MaxBatchEvents int
	// ReconnectMin and ReconnectMax bound the jittered exponential backoff
	// between rounds of connection attempts. Defaults 100 ms and 5 s.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// DialTimeout bounds how long the worker waits for a head's
	// connection to be ready (TCP, HTTP/2 settings) before it tries the
	// next head. A head whose host is cut off never answers, and gRPC's own
	// connect timeout is 20 s, longer than a worker lease: without this
	// bound a reconnect round stuck on the old leader's address lets the
	// lease lapse. Default 2 s; within [10ms, 1m].
	DialTimeout time.Duration
	// PoolMin is how many warm containers the worker keeps per pool key
	// (image, tenant, limits) once a persistent task of that key ran here,
	// even when idle. Default 0.
	PoolMin int
	// PoolMax caps the warm containers per pool key; a persistent task
	// finding them all busy waits for one. Default 4.
	PoolMax int
	// PoolIdle is how long an idle warm container beyond PoolMin is kept,
	// and how long a session keeps its container after its last task.
	// Default 5 min.
	PoolIdle time.Duration
	// PoolKeeper is the idle process of a warm container (argv); a
	// persistent task's command is exec'd beside it. nil: DefaultPoolKeeper;
	// an empty non-nil slice: the image's own command.
	PoolKeeper []string
	// ImageRefreshInterval is how often the worker re-reads the images its
	// runtime holds to advertise them (image locality); it also re-reads
	// them after a container of a new image started. 0: 30 s.
	ImageRefreshInterval time.Duration
	// MaxAdvertisedImages bounds the images advertised to the head. 0: 256.
	MaxAdvertisedImages int
	// AdvertiseHost is the host (IP address or name) in the endpoints of
	// this worker's services and in its gang tasks' MEGAFLOW_GANG_HOSTS,
	// reachable from the other workers and their containers. "": GossipAddr's host, or when that is unspecified
	// (0.0.0.0) the first non-loopback IPv4 address of the machine.
	AdvertiseHost string
	// ServicePortMin and ServicePortMax bound the host ports given to
	// service attempts (TCP, inclusive). Default 30000-32767.
	ServicePortMin int
	ServicePortMax int
	// ServiceReadyTimeout is how long a service attempt may take to pass
	// its readiness probe (model loading included) before it is stopped
	// and reported FAILED. Default 15 min.
	ServiceReadyTimeout time.Duration
	// ServiceProbeInterval is the time between readiness probes. Default
	// 500 ms.
	ServiceProbeInterval time.Duration
	// ServiceLivenessInterval is the time between the probes of a service
	// that became ready (the same probe, kept up while it runs). Default
	// 10 s.
	ServiceLivenessInterval time.Duration
	// ServiceLivenessFailures is how many of those probes in a row must fail
	// before the attempt is stopped and reported FAILED ("service stopped
	// answering its probe"), its endpoint withdrawn and its restart policy
	// applied (as Kubernetes' liveness probe's failureThreshold). Default 3.
	ServiceLivenessFailures int
	// Fast shortens gossip timeouts for tests on loopback.
	Fast bool

	// Artifacts is the artifact store (internal/artifact's layout): each
	// attempt's log is shipped to it in chunks while it runs, then its
	// declared output files, a result over MaxResultBytes and its
	// manifest; children's inputs are read from it. nil: no artifacts
	// (logs stay in DataDir only, no MEGAFLOW_OUTPUT_DIR).
	Artifacts blob.Store
	// Spool queues the uploads to Artifacts, so that a store that is down
	// never holds up an attempt. nil with Artifacts set: an in-memory
	// spool run by the worker (not durable across restarts).
	Spool artifact.Spool
	// LogShipInterval is how often a running attempt's new output is
	// shipped, which bounds what a worker crash loses. Default 1 s.
	LogShipInterval time.Duration
	// HTTPAddr is the host:port of the HTTP listener serving /metrics,
	// /healthz and /readyz; empty: none. Port 0 picks a free port (tests).
	HTTPAddr string
	// SandboxAddr is the host:port of the gRPC listener serving
	// SandboxWorkerService (exec and files of the sandboxes this worker
	// runs, docs/sandboxes.md) to the heads; empty: none, and sandboxes
	// placed here cannot be used. Port 0 picks a free port (tests). The
	// worker advertises it in WorkerInfo.addr (an unspecified host replaced
	// by AdvertiseHost's).
	SandboxAddr string
	// InitPath is the host path of megaflow-init (cmd/megaflow-init, a
	// static binary), the init every container and process-runtime task
	// runs under: it stops the task when this worker's lease lapses (the
	// worker killed or frozen), so no task outlives the lease. "": none
	// (Docker's own init, and tasks outlive a crashed worker);
	// cmd/megaflow-worker looks for it next to its executable.
	InitPath string
	// Collectors are extra metric collectors the worker registers in its
	// registry (the GPU collector of gpu.NewCollector on a GPU machine).
	Collectors []prometheus.Collector
	// TLS, when set, turns on mutual TLS (docs/security.md): the stream
	// to the leader presents this worker certificate and verifies a head
	// certificate; the sandbox server (SandboxAddr) takes head
	// certificates only. It must hold a worker certificate. Its Reload
	// (SIGHUP) applies to every later connection. Nil: plaintext.
	TLS *tlsconfig.Store
	// GossipKey, when set, encrypts and authenticates gossip
	// (memberlist's SecretKey), the same key as the heads'. Nil:
	// plaintext gossip.
	GossipKey []byte
	// Token is an API token secret of role worker, sent on the stream to
	// the heads: what a cluster with ACLs on and no TLS requires of a
	// worker (with TLS, the worker certificate suffices). Empty: none.
	Token string
}

// DefaultConfig returns a Config with the defaults and no identity,
// addresses or runtime.
func DefaultConfig() Config {
	return Config{
		ClusterName:         "megaflow",
		MaxConcurrentStarts: 4,
		ReconcileInterval:   30 * time.Second,
		SnapshotGrace:       10 * time.Minute,
		HeartbeatInterval:   2 * time.Second,
		StopGrace:           10 * time.Second,
		StartTimeout:        15 * time.Minute,
		CallTimeout:         30 * time.Second,
		UploadIdle:          30 * time.Second,
		BatchDelay:          5 * time.Millisecond,
		MaxBatchEvents:      256,
		ReconnectMin:        100 * time.Millisecond,
		ReconnectMax:        5 * time.Second,
		DialTimeout:         2 * time.Second,
		PoolMax:             4,
		PoolIdle:            5 * time.Minute,
		LogShipInterval:     time.Second,

		ServicePortMin:          30000,
		ServicePortMax:          32767,
		ServiceReadyTimeout:     15 * time.Minute,
		ServiceProbeInterval:    500 * time.Millisecond,
		ServiceLivenessInterval: 10 * time.Second,
		ServiceLivenessFailures: 3,
	}
}

// Validate reports every field that is missing or out of range, naming the
// field and the bound.
func (c *Config) Validate() error {
	var list []error
	add := func(format string, args ...any) { list = append(list, fmt.Errorf(format, args...)) }
	if c.NodeID == "" {
		add("--node-id is empty: give each worker a unique, stable id")
	} else if p := nodeid.Problem(c.NodeID); p != "" {
		add("--node-id %q %s", c.NodeID, p)
	}
	if c.ClusterName == "" {
		add("ClusterName is empty")
	}
	if c.DataDir == "" {
		add("--data-dir is empty: give a directory for the attempts' log files")
	}
	if c.TLS != nil && c.TLS.Role() != tlsconfig.RoleWorker {
		add("--tls-cert holds a %s certificate: a worker needs a worker certificate (megaflow tls cert create --worker --node-id %s)", c.TLS.Role(), c.NodeID)
	} else if c.TLS != nil && c.NodeID != "" {
		if err := tlsconfig.CheckNode(c.TLS.Certificate(), tlsconfig.RoleWorker, c.NodeID); err != nil {
			add("--tls-cert: %v", err) // the leader would refuse its stream
		}
	}
	if n := len(c.GossipKey); n != 0 && n != 16 && n != 24 && n != 32 {
		add("--gossip-key is %d bytes: must be 32 (or 16 or 24)", n)
	}
	if _, _, err := net.SplitHostPort(c.GossipAddr); err != nil {
		add("--gossip-addr %q is not host:port (e.g. 127.0.0.1:7947): %v", c.GossipAddr, err)
	}
	if c.HTTPAddr != "" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			add("HTTPAddr %q is not host:port (or empty for no HTTP): %v (--http-addr)", c.HTTPAddr, err)
		}
	}
	if c.SandboxAddr != "" {
		if _, _, err := net.SplitHostPort(c.SandboxAddr); err != nil {
			add("SandboxAddr %q is not host:port (or empty for no sandboxes): %v (--sandbox-addr)", c.SandboxAddr, err)
		}
	}
	for i, a := range c.Join {
		if _, _, err := net.SplitHostPort(a); err != nil {
			add("--join: address %d, %q, is not host:port: %v", i+1, a, err)
		}
	}
	for i, a := range c.Heads {
		if _, _, err := net.SplitHostPort(a); err != nil {
			add("--heads: address %d, %q, is not host:port: %v", i+1, a, err)
		}
	}
	if len(c.Join) == 0 && len(c.Heads) == 0 {
		add("--join and --heads are both empty: name the heads' gossip addresses (--join) or gRPC addresses (--heads)")
	}
	if c.Runtime == nil {
		add("no container runtime: choose one (--runtime docker|process)")
	}
	if c.Capacity.CPUMillis < 0 || c.Capacity.MemoryBytes < 0 || c.Capacity.GPUs < 0 {
		add("Capacity %+v has a negative field; 0 means detect", c.Capacity)
	}
	if c.MaxConcurrentStarts < 1 || c.MaxConcurrentStarts > 1024 {
		add("--max-concurrent-starts %d is outside [1, 1024]", c.MaxConcurrentStarts)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		min  time.Duration
	}{
		{"--reconcile-interval", c.ReconcileInterval, 10 * time.Millisecond},
		{"HeartbeatInterval", c.HeartbeatInterval, 10 * time.Millisecond},
		{"--stop-grace", c.StopGrace, 0},
		{"StartTimeout", c.StartTimeout, time.Second},
		{"CallTimeout", c.CallTimeout, 100 * time.Millisecond},
		{"BatchDelay", c.BatchDelay, 0},
		{"ReconnectMin", c.ReconnectMin, time.Millisecond},
		{"DialTimeout", c.DialTimeout, 10 * time.Millisecond},
		{"LogShipInterval", c.LogShipInterval, 10 * time.Millisecond},
		{"ServiceReadyTimeout", c.ServiceReadyTimeout, 10 * time.Millisecond},
		{"ServiceProbeInterval", c.ServiceProbeInterval, time.Millisecond},
		{"--service-liveness-interval", c.ServiceLivenessInterval, time.Millisecond},
		{"--pool-idle", c.PoolIdle, 10 * time.Millisecond},
	} {
		if d.v < d.min {
			add("%s %v is below %v", d.name, d.v, d.min)
		}
	}
	if c.SnapshotGrace < time.Second || c.SnapshotGrace > 7*24*time.Hour {
		add("--snapshot-grace %v is outside [1s, 168h]", c.SnapshotGrace)
	}
	if c.BatchDelay > time.Second {
		add("BatchDelay %v is above 1s", c.BatchDelay)
	}
	if c.UploadIdle < 10*time.Millisecond || c.UploadIdle > 10*time.Minute {
		add("UploadIdle %v is outside [10ms, 10m]", c.UploadIdle)
	}
	if c.DialTimeout > time.Minute {
		add("DialTimeout %v is above 1m", c.DialTimeout)
	}
	if c.ReconnectMax < c.ReconnectMin {
		add("ReconnectMax %v is below ReconnectMin %v", c.ReconnectMax, c.ReconnectMin)
	}
	if c.ServiceLivenessFailures < 1 {
		add("--service-liveness-failures %d is below 1", c.ServiceLivenessFailures)
	}
	if c.PoolMax < 1 || c.PoolMax > 1024 {
		add("--pool-max %d is outside [1, 1024]", c.PoolMax)
	}
	if c.PoolMin < 0 || c.PoolMin > c.PoolMax {
		add("--pool-min %d is outside [0, --pool-max %d]", c.PoolMin, c.PoolMax)
	}
	if c.Spool != nil && c.Artifacts == nil {
		add("Spool is set but Artifacts is nil: give the store the spool uploads to (--artifacts)")
	}
	if c.ServicePortMin < 1 || c.ServicePortMax > 65535 || c.ServicePortMin > c.ServicePortMax {
		add("ServicePortMin %d and ServicePortMax %d: want 1 <= min <= max <= 65535 (--service-ports 30000-32767)", c.ServicePortMin, c.ServicePortMax)
	}
	if c.MaxBatchEvents < 1 || c.MaxBatchEvents > 10000 {
		add("MaxBatchEvents %d is outside [1, 10000]", c.MaxBatchEvents)
	}
	return errors.Join(list...)
}

// labelValueProblem checks that s can be a container label value and part
// of a container name: [A-Za-z0-9._-], 1 to 64 bytes, starting with a letter
// or digit. That is the node id rule, which nodeid owns.
func labelValueProblem(s string) string { return nodeid.Problem(s) }

func isAlnum(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
}

func isNameByte(b byte) bool { return isAlnum(b) || b == '.' || b == '_' || b == '-' }
