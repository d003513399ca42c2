package consensus

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
)

// Config configures a Node. Start from DefaultConfig, set NodeID, DataDir,
// BindAddr and FSM, then call New, which validates it with Validate.
//
// Tests may instead hand the Node its transport and stores (Transport,
// LogStore, StableStore, SnapshotStore), for example hashicorp/raft's
// InmemTransport, InmemStore and InmemSnapshotStore, to run Raft without
// sockets or disk and to cut links between nodes in memory. Left nil, as
// the head leaves them, the Node uses TCP on BindAddr and BoltDB and file
// snapshots under DataDir/raft.
type Config struct {
	// NodeID is the Raft server id: stable across restarts, unique in the
	// cluster. Required.
	NodeID string
	// DataDir is the head's data directory. Raft keeps its files under
	// DataDir/raft: raft.db (BoltDB log and stable store, fsynced on every
	// write) and snapshots/. Required unless LogStore, StableStore and
	// SnapshotStore are all set; it is then unused.
	DataDir string
	// BindAddr is the "ip:port" the Raft TCP transport listens on. Port 0
	// picks a free port (tests); Node.Addr reports the real address.
	// Required unless Transport is set, and then it must be empty.
	BindAddr string
	// AdvertiseAddr is the "ip:port" the other heads dial. Empty means the
	// bound address, which then must not be 0.0.0.0. A port of 0 means the
	// bound port. Must be empty when Transport is set.
	AdvertiseAddr string
	// Transport, when set, is used instead of the TCP transport on
	// BindAddr; Node.Addr then reports its LocalAddr, which is what peers
	// must be given (BootstrapServers, AddVoter). Nil, the default, means
	// TCP. TransportTimeout and TransportMaxPool apply to TCP only.
	// Ownership: hashicorp/raft closes a transport that implements
	// raft.WithClose when it shuts down, so the Node's Shutdown and Kill
	// close it (Kill closes it first, so that nothing the dying node sends
	// reaches its peers); a New that fails leaves it open. A transport
	// serves one Node: make a new one to restart a node.
	Transport raft.Transport
	// LogStore and StableStore, when set, are used instead of BoltDB in
	// DataDir/raft/raft.db (raft.NewInmemStore is both). Set both or
	// neither. LogCacheSize still puts a cache in front of LogStore. The
	// Node never closes them: they belong to the caller, who may hand them
	// to a new Node to restart one with its log and term.
	LogStore    raft.LogStore
	StableStore raft.StableStore
	// SnapshotStore, when set, is used instead of the file snapshot store
	// in DataDir/raft (then SnapshotRetain is unused);
	// raft.NewInmemSnapshotStore keeps the latest snapshot in memory. The
	// Node never closes it (the interface has no Close).
	SnapshotStore raft.SnapshotStore
	// FSM is the replicated state machine (head/fsm in the head). Required.
	FSM raft.FSM
	// Logger receives Raft's log lines, mapped from hclog levels to slog
	// levels (trace below debug). Nil discards them.
	Logger *slog.Logger
	// Timing holds Raft's failure-detection timeouts; see DefaultTiming
	// and FastTiming.
	Timing Timing
	// Fast, for tests, makes New use FastTiming instead of Timing.
	Fast bool
	// SnapshotThreshold is how many log entries since the last snapshot make
	// Raft take a new one when it next checks (every SnapshotInterval, with
	// jitter). At least 1.
	SnapshotThreshold uint64
	// SnapshotInterval is how often Raft checks SnapshotThreshold. At least
	// 5 ms.
	SnapshotInterval time.Duration
	// TrailingLogs is how many entries a snapshot leaves in the log, so a
	// follower that lags by fewer catches up by replication rather than
	// InstallSnapshot. Tests set it tiny to force InstallSnapshot.
	TrailingLogs uint64
	// SnapshotReplayBudget, when above 0, makes the node take a snapshot
	// once its FSM's applies since the last snapshot took this much wall
	// time (replaybudget.go): about what a restart at the same load spends
	// replaying the log after its snapshot, whatever the entries are.
	// SnapshotThreshold still applies beside it. 0: off.
	SnapshotReplayBudget time.Duration
	// SnapshotMinGap is the least time between two replay-budget snapshots
	// (also at least 10 times the last one's duration). Not negative.
	SnapshotMinGap time.Duration
	// SnapshotRetain is how many snapshots are kept on disk. At least 1.
	SnapshotRetain int
	// MaxAppendEntries caps the entries per AppendEntries RPC and, with
	// BatchApplyCh (always on), the commands committed per disk sync. In
	// [1, 1024].
	MaxAppendEntries int
	// TransportTimeout bounds each Raft RPC's I/O (InstallSnapshot scales it
	// with the snapshot size).
	TransportTimeout time.Duration
	// TransportMaxPool is how many idle outbound connections are kept per
	// peer. At least 1.
	TransportMaxPool int
	// LogCacheSize is how many recent log entries are cached in memory in
	// front of BoltDB (0: no cache).
	LogCacheSize int
	// TLS, when set, runs the TCP transport over mutual TLS (the stream
	// layer wraps each connection; raft's NetworkTransport is unchanged).
	// Nil: plaintext TCP. Must be nil when Transport is set.
	TLS *TransportTLS
}

// TransportTLS is the TLS of the Raft TCP transport. Server and Client are
// called for each connection, so a certificate reloaded in between applies
// to the next one; open connections keep theirs.
type TransportTLS struct {
	// Server returns the config inbound connections are served with: it
	// must require and verify the peer's certificate (and check that it is
	// a head's). Required.
	Server func() *tls.Config
	// Client returns the config outbound connections are dialled with:
	// its certificate, the CA and the name it verifies the peer by.
	// Required.
	Client func() *tls.Config
	// OnRefused, when set, is called with the remote address and the
	// error of each inbound handshake that fails (a plaintext peer, a
	// wrong CA, a worker's certificate), on the connection's goroutine.
	OnRefused func(remote net.Addr, err error)
}

// Timing is Raft's timeout profile.
type Timing struct {
	// HeartbeatTimeout is how long a follower waits without hearing from a
	// leader before it starts an election. At least 5 ms.
	HeartbeatTimeout time.Duration
	// ElectionTimeout is how long a candidate waits for votes before starting
	// over. At least HeartbeatTimeout.
	ElectionTimeout time.Duration
	// LeaderLeaseTimeout is how long a leader stays leader without reaching
	// a quorum. In [5 ms, HeartbeatTimeout].
	LeaderLeaseTimeout time.Duration
	// CommitTimeout is how long the leader waits before sending an empty
	// AppendEntries to advance the followers' commit index. At least 1 ms.
	CommitTimeout time.Duration
}

// DefaultTiming returns hashicorp/raft's defaults: 1 s heartbeat and election
// timeouts, 500 ms leader lease, 50 ms commit timeout. A dead leader is
// replaced in about 1 to 2 s.
func DefaultTiming() Timing {
	c := raft.DefaultConfig()
	return Timing{
		HeartbeatTimeout:   c.HeartbeatTimeout,
		ElectionTimeout:    c.ElectionTimeout,
		LeaderLeaseTimeout: c.LeaderLeaseTimeout,
		CommitTimeout:      c.CommitTimeout,
	}
}

// FastTiming returns a profile for tests on loopback: a dead leader is
// replaced in about 1 s, and a leader keeps its lease through the pauses of
// -race on one busy core (shorter timeouts made leaders step down while
// committing 1,000 commands there).
func FastTiming() Timing {
	return Timing{
		HeartbeatTimeout:   400 * time.Millisecond,
		ElectionTimeout:    400 * time.Millisecond,
		LeaderLeaseTimeout: 300 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
	}
}

// DefaultConfig returns a Config with DefaultTiming, hashicorp/raft's
// snapshot defaults (threshold 8192 entries checked every 120 s, 10240
// trailing entries), 2 retained snapshots, MaxAppendEntries 1024 (with
// BatchApplyCh this takes TCP and BoltDB from about 2,300 to 36,700 applies/s
// here; bench/README.md), a 10 s transport timeout, a pool of 3
// connections per peer and a 512-entry log cache. NodeID, DataDir, BindAddr
// and FSM must still be set.
func DefaultConfig() Config {
	c := raft.DefaultConfig()
	return Config{
		Timing:            DefaultTiming(),
		SnapshotThreshold: c.SnapshotThreshold,
		SnapshotInterval:  c.SnapshotInterval,
		TrailingLogs:      c.TrailingLogs,
		SnapshotRetain:    2,
		MaxAppendEntries:  1024,
		TransportTimeout:  10 * time.Second,
		TransportMaxPool:  3,
		LogCacheSize:      512,
	}
}

// Validate reports the first problem with c, naming the field and the
// bound. New calls it.
func (c *Config) Validate() error {
	if c.NodeID == "" {
		return errors.New("consensus: Config.NodeID is required")
	}
	if (c.LogStore == nil) != (c.StableStore == nil) {
		return errors.New("consensus: Config.LogStore and Config.StableStore must be set together or both left nil")
	}
	if c.DataDir == "" && c.usesDisk() {
		return errors.New("consensus: Config.DataDir is required unless LogStore, StableStore and SnapshotStore are all set")
	}
	if err := c.validateAddrs(); err != nil {
		return err
	}
	if c.FSM == nil {
		return errors.New("consensus: Config.FSM is required")
	}
	t := c.Timing
	if c.Fast {
		t = FastTiming()
	}
	switch {
	case t.HeartbeatTimeout < 5*time.Millisecond:
		return fmt.Errorf("consensus: Config.Timing.HeartbeatTimeout %s: must be at least 5ms", t.HeartbeatTimeout)
	case t.ElectionTimeout < t.HeartbeatTimeout:
		return fmt.Errorf("consensus: Config.Timing.ElectionTimeout %s: must be at least HeartbeatTimeout %s",
			t.ElectionTimeout, t.HeartbeatTimeout)
	case t.LeaderLeaseTimeout < 5*time.Millisecond || t.LeaderLeaseTimeout > t.HeartbeatTimeout:
		return fmt.Errorf("consensus: Config.Timing.LeaderLeaseTimeout %s: must be in [5ms, HeartbeatTimeout %s]",
			t.LeaderLeaseTimeout, t.HeartbeatTimeout)
	case t.CommitTimeout < time.Millisecond:
		return fmt.Errorf("consensus: Config.Timing.CommitTimeout %s: must be at least 1ms", t.CommitTimeout)
	}
	switch {
	case c.SnapshotThreshold < 1:
		return errors.New("consensus: Config.SnapshotThreshold must be at least 1")
	case c.SnapshotInterval < 5*time.Millisecond:
		return fmt.Errorf("consensus: Config.SnapshotInterval %s: must be at least 5ms", c.SnapshotInterval)
	case c.SnapshotReplayBudget < 0 || c.SnapshotMinGap < 0:
		return fmt.Errorf("consensus: Config.SnapshotReplayBudget %s and SnapshotMinGap %s must not be negative", c.SnapshotReplayBudget, c.SnapshotMinGap)
	case c.SnapshotRetain < 1:
		return fmt.Errorf("consensus: Config.SnapshotRetain %d: must be at least 1", c.SnapshotRetain)
	case c.MaxAppendEntries < 1 || c.MaxAppendEntries > 1024:
		return fmt.Errorf("consensus: Config.MaxAppendEntries %d: must be in [1, 1024]", c.MaxAppendEntries)
	case c.TransportTimeout < time.Millisecond:
		return fmt.Errorf("consensus: Config.TransportTimeout %s: must be at least 1ms", c.TransportTimeout)
	case c.TransportMaxPool < 1:
		return fmt.Errorf("consensus: Config.TransportMaxPool %d: must be at least 1", c.TransportMaxPool)
	case c.LogCacheSize < 0:
		return fmt.Errorf("consensus: Config.LogCacheSize %d: must not be negative", c.LogCacheSize)
	}
	return nil
}

// usesDisk reports whether New opens anything under DataDir/raft: BoltDB
// when LogStore is nil, file snapshots when SnapshotStore is nil.
func (c *Config) usesDisk() bool {
	return c.LogStore == nil || c.SnapshotStore == nil
}

// validateAddrs checks BindAddr and AdvertiseAddr: required for TCP, empty
// with a Transport.
func (c *Config) validateAddrs() error {
	if c.Transport != nil {
		if c.BindAddr != "" {
			return fmt.Errorf("consensus: Config.BindAddr %q: must be empty when Config.Transport is set", c.BindAddr)
		}
		if c.AdvertiseAddr != "" {
			return fmt.Errorf("consensus: Config.AdvertiseAddr %q: must be empty when Config.Transport is set", c.AdvertiseAddr)
		}
		if c.TLS != nil {
			return errors.New("consensus: Config.TLS must be nil when Config.Transport is set (it wraps the TCP transport only)")
		}
		return nil
	}
	if c.TLS != nil && (c.TLS.Server == nil || c.TLS.Client == nil) {
		return errors.New("consensus: Config.TLS needs both Server and Client")
	}
	bindHost, _, err := splitHostPort(c.BindAddr)
	if err != nil {
		return fmt.Errorf("consensus: Config.BindAddr: %w", err)
	}
	bindIP := net.ParseIP(bindHost)
	if bindIP == nil {
		return fmt.Errorf("consensus: Config.BindAddr %q: host must be an IP address", c.BindAddr)
	}
	if c.AdvertiseAddr != "" {
		host, _, err := splitHostPort(c.AdvertiseAddr)
		if err != nil {
			return fmt.Errorf("consensus: Config.AdvertiseAddr: %w", err)
		}
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			return fmt.Errorf("consensus: Config.AdvertiseAddr %q: host must be a specific IP address", c.AdvertiseAddr)
		}
	} else if bindIP.IsUnspecified() {
		return fmt.Errorf("consensus: Config.AdvertiseAddr is required when BindAddr %q is unspecified", c.BindAddr)
	}
	return nil
}

// raftConfig translates c into hashicorp/raft's configuration.
func (c *Config) raftConfig() *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.NodeID)
	rc.HeartbeatTimeout = c.Timing.HeartbeatTimeout
	rc.ElectionTimeout = c.Timing.ElectionTimeout
	rc.LeaderLeaseTimeout = c.Timing.LeaderLeaseTimeout
	rc.CommitTimeout = c.Timing.CommitTimeout
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.SnapshotInterval = c.SnapshotInterval
	rc.TrailingLogs = c.TrailingLogs
	rc.MaxAppendEntries = c.MaxAppendEntries
	rc.BatchApplyCh = true
	return rc
}

// splitHostPort parses "host:port" with a numeric port in [0, 65535].
func splitHostPort(addr string) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q: want ip:port: %w", addr, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: port must be a number in [0, 65535]", addr)
	}
	return host, port, nil
}
