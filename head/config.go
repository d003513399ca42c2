package head

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"
)

// Config configures a Head. Build it from DefaultConfig, set the node's id,
// data directory and addresses, and call Validate (New does).
type Config struct {
	// NodeID names this head in Raft and gossip; unique in the cluster.
	NodeID string
	// DataDir holds the Raft log, stable store and snapshots (DataDir/raft).
	DataDir string
	// RaftAddr is the host:port the Raft TCP transport binds and advertises.
	// Port 0 picks a free port (tests).
	RaftAddr string
	// GRPCAddr is the host:port of the client-facing and worker gRPC service.
	GRPCAddr string
	// GossipAddr is the host:port of the memberlist pool (TCP and UDP).
	GossipAddr string
	// BootstrapExpect is how many heads must see each other before they
	// bootstrap a new Raft cluster together (Consul's -bootstrap-expect); 0
	// means never bootstrap: wait to be added by an existing leader.
	BootstrapExpect int
	// Join lists gossip addresses of heads to join at start.
	Join []string
	// Logger receives the head's logs; nil discards them.
	Logger *slog.Logger

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

	// WorkerGrace is how long a worker the table holds alive may go without
	// a stream to the leader before it is declared down and its attempts
	// are re-queued.
	WorkerGrace time.Duration
	// ScheduleInterval is the shortest time between two scheduling rounds
	// (rounds run when the table changes, batched over this interval).
	ScheduleInterval time.Duration

	// SnapshotThreshold, SnapshotInterval and TrailingLogs tune Raft
	// snapshots (hashicorp/raft Config fields of the same names).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// Fast shortens Raft and gossip timeouts for tests on loopback.
	Fast bool
}

// DefaultConfig returns a Config with production defaults and no identity
// or addresses.
func DefaultConfig() Config {
	return Config{
		MaxEntryBytes:     1 << 20,
		ApplyTimeout:      10 * time.Second,
		EventRetention:    100_000,
		StagedTTL:         5 * time.Minute,
		WorkerGrace:       15 * time.Second,
		ScheduleInterval:  5 * time.Millisecond,
		SnapshotThreshold: 8192,
		SnapshotInterval:  2 * time.Minute,
		TrailingLogs:      10240,
	}
}

// Validate reports every field that is missing or out of range, naming the
// field and the bound.
func (c *Config) Validate() error {
	var errsList []error
	if c.NodeID == "" {
		errsList = append(errsList, errors.New("NodeID is empty: give each head a unique id (--node-id)"))
	}
	if c.DataDir == "" {
		errsList = append(errsList, errors.New("DataDir is empty: give a directory for the Raft log and snapshots (--data-dir)"))
	}
	for _, a := range []struct{ name, addr string }{{"RaftAddr", c.RaftAddr}, {"GRPCAddr", c.GRPCAddr}, {"GossipAddr", c.GossipAddr}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			errsList = append(errsList, fmt.Errorf("%s %q is not host:port: %v", a.name, a.addr, err))
		}
	}
	if c.BootstrapExpect < 0 {
		errsList = append(errsList, fmt.Errorf("BootstrapExpect %d is negative", c.BootstrapExpect))
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
	if c.WorkerGrace <= 0 {
		errsList = append(errsList, fmt.Errorf("WorkerGrace %v must be positive", c.WorkerGrace))
	}
	if c.ScheduleInterval <= 0 || c.ScheduleInterval > time.Second {
		errsList = append(errsList, fmt.Errorf("ScheduleInterval %v must be in (0, 1s]", c.ScheduleInterval))
	}
	if c.StagedTTL <= 0 {
		errsList = append(errsList, fmt.Errorf("StagedTTL %v must be positive", c.StagedTTL))
	}
	return errors.Join(errsList...)
}
