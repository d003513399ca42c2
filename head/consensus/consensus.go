// Package consensus owns the head's Raft wiring: the BoltDB log and stable
// store, the file snapshot store, the TCP transport and the raft.Raft that
// ties them to the FSM, plus bootstrap (BootstrapServers, Bootstrap),
// leadership observation (LeaderChanges) and voter management for the
// leader (AddVoter, RemoveServer). It holds no FSM logic: the FSM comes in
// through Config (head/fsm in the head). Only head packages may import it;
// workers and clients never talk Raft.
//
// A Node's life: New opens the stores and transport and starts Raft; on a
// fresh data directory (HasExistingState false) the head computes the voter
// set with BootstrapServers from what gossip shows and calls Bootstrap once;
// it then proposes commands through Raft().Apply on the leader, and ends
// with Shutdown (or Kill in tests).
package consensus

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// Node is one head's Raft member. Its methods are safe for concurrent use.
type Node struct {
	cfg    Config
	log    *slog.Logger
	raft   *raft.Raft
	store  *raftboltdb.BoltStore
	stream *tcpStream
	trans  *raft.NetworkTransport
	snaps  *raft.FileSnapshotStore
	logs   raft.LogStore // store, behind the log cache

	notifyCh chan bool     // raft's Config.NotifyCh
	leaderCh chan bool     // LeaderChanges; capacity 1, latest wins
	stop     chan struct{} // stops forwardLeadership
	wg       sync.WaitGroup

	closeMu sync.Mutex
	closed  bool
}

// New validates cfg, opens DataDir/raft/raft.db and the snapshot store,
// binds the transport and starts Raft. A node with no existing state waits,
// as a follower without peers, until Bootstrap is called or a leader adds
// it. Call Shutdown (or Kill) to release everything New opened.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Fast {
		cfg.Timing = FastTiming()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "raft", "node", cfg.NodeID)
	hl := newHclog(log)

	dir := filepath.Join(cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("consensus: create %s: %w", dir, err)
	}
	n := &Node{
		cfg:      cfg,
		log:      log,
		notifyCh: make(chan bool, 8),
		leaderCh: make(chan bool, 1),
		stop:     make(chan struct{}),
	}
	ok := false
	defer func() {
		if !ok {
			_ = n.closeResources()
		}
	}()

	var err error
	dbPath := filepath.Join(dir, "raft.db")
	n.store, err = raftboltdb.New(raftboltdb.Options{
		Path:        dbPath,
		NoSync:      false,
		BoltOptions: &bbolt.Options{Timeout: 5 * time.Second}, // another process holding the file
	})
	if err != nil {
		return nil, fmt.Errorf("consensus: open %s: %w", dbPath, err)
	}
	n.logs = n.store
	if cfg.LogCacheSize > 0 {
		if n.logs, err = raft.NewLogCache(cfg.LogCacheSize, n.store); err != nil {
			return nil, fmt.Errorf("consensus: log cache: %w", err)
		}
	}
	if n.snaps, err = raft.NewFileSnapshotStoreWithLogger(dir, cfg.SnapshotRetain, hl.Named("snapshot")); err != nil {
		return nil, fmt.Errorf("consensus: open snapshot store in %s: %w", dir, err)
	}
	if n.stream, err = listenTCP(cfg.BindAddr, cfg.AdvertiseAddr); err != nil {
		return nil, fmt.Errorf("consensus: listen on %s: %w", cfg.BindAddr, err)
	}
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  n.stream,
		MaxPool: cfg.TransportMaxPool,
		Timeout: cfg.TransportTimeout,
		Logger:  hl.Named("transport"),
	})

	rc := cfg.raftConfig()
	rc.NotifyCh = n.notifyCh
	rc.Logger = hl.Named("raft")
	if n.raft, err = raft.NewRaft(rc, cfg.FSM, n.logs, n.store, n.snaps, n.trans); err != nil {
		return nil, fmt.Errorf("consensus: start raft: %w", err)
	}
	ok = true
	n.wg.Add(1)
	go n.forwardLeadership()
	log.Debug("raft started", "addr", n.Addr(), "dir", dir)
	return n, nil
}

// Raft returns the underlying raft.Raft, for Apply, Barrier, VerifyLeader,
// State and the other calls this package does not wrap. Do not call its
// Shutdown, and do not read its LeaderCh (use LeaderChanges).
func (n *Node) Raft() *raft.Raft { return n.raft }

// Addr returns the transport's advertised "ip:port", with the real port
// when BindAddr asked for port 0. Heads put it in their gossip
// Meta.RaftAddr.
func (n *Node) Addr() string { return string(n.trans.LocalAddr()) }

// ID returns Config.NodeID.
func (n *Node) ID() string { return n.cfg.NodeID }

// Leader returns the current leader's Raft address and id as this node
// knows them; both are empty when no leader is known (an election is under
// way, or this node has not heard from one). Any goroutine may call it.
func (n *Node) Leader() (addr, id string) {
	a, i := n.raft.LeaderWithID()
	return string(a), string(i)
}

// IsLeader reports whether this node is the leader now. Leadership can end
// at any moment; leader-only work follows LeaderChanges, and reads that must
// be linearizable use Raft().VerifyLeader.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// HasExistingState reports whether the data directory already holds Raft
// state (a log, a term or a snapshot), in which case the node must not be
// bootstrapped: it rejoins its cluster from that state. A store that cannot
// be read counts as existing state (bootstrapping over it would be unsafe);
// the error is logged. The head's startup calls it once, before deciding to
// bootstrap.
func (n *Node) HasExistingState() bool {
	has, err := raft.HasExistingState(n.logs, n.store, n.snaps)
	if err != nil {
		n.log.Error("cannot read raft state; treating it as existing", "err", err)
		return true
	}
	return has
}

// Bootstrap writes servers as the cluster's first configuration, on a node
// without existing state. Every head that bootstraps must pass the same
// servers (BootstrapServers computes them). It returns an error wrapping
// raft.ErrCantBootstrap when the node already has state. It blocks until the
// configuration is on disk.
func (n *Node) Bootstrap(servers []raft.Server) error {
	if len(servers) == 0 {
		return errors.New("consensus: bootstrap with no servers")
	}
	err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if err != nil {
		return fmt.Errorf("consensus: bootstrap %s: %w", n.cfg.NodeID, err)
	}
	n.log.Info("raft cluster bootstrapped", "servers", len(servers))
	return nil
}

// LeaderChanges returns a channel that receives true when this node becomes
// the leader and false when it stops being the leader. It holds one value
// and the latest wins: a consumer that falls behind sees the current state,
// and two equal values in a row mean leadership was lost and regained in
// between, so leader-only work must be restarted (after a new barrier). It
// is fed from Raft's NotifyCh by a goroutine owned by the Node, so Raft
// never blocks on a slow consumer and no transition reaches Raft
// unobserved. Its one consumer is the head's leadership monitor (in
// head/leader), which starts and stops the leader-only loops. Shutdown and
// Kill close it.
func (n *Node) LeaderChanges() <-chan bool { return n.leaderCh }

// forwardLeadership moves raft's notifications into leaderCh, replacing an
// unread value. It is the only sender on leaderCh.
func (n *Node) forwardLeadership() {
	defer n.wg.Done()
	for {
		select {
		case v := <-n.notifyCh:
			select {
			case <-n.leaderCh:
			default:
			}
			n.leaderCh <- v // cannot block: sole sender, just drained
		case <-n.stop:
			return
		}
	}
}

// Shutdown stops the node gracefully: if it is the leader of a multi-voter
// cluster it first hands leadership to another voter (so the cluster need
// not wait out an election timeout), then shuts Raft down (waiting for its
// goroutines), closes the transport and every open connection, and closes
// BoltDB. It returns nil when called again. The head calls it once on exit.
func (n *Node) Shutdown() error {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	if n.IsLeader() {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			n.log.Debug("no leadership transfer before shutdown", "err", err)
		}
	}
	return n.closeResources()
}

// Kill stops the node as close to a crash as this process can get, for
// tests. In order, it:
//
//  1. closes the transport's listener and every open TCP connection,
//     inbound and outbound, at once, and refuses any further dial, so peers
//     see resets and refused connections exactly as after a process death,
//     and nothing Raft does from then on reaches them;
//  2. shuts Raft down: its goroutines stop, in-flight futures fail, no
//     leadership transfer is attempted and no snapshot is taken; apart from
//     a disk write already under way, which completes, Raft writes nothing
//     further to the log or stable store;
//  3. stops the LeaderChanges forwarder and closes that channel;
//  4. closes BoltDB, which releases its file lock (as the kernel would) but
//     writes nothing: every write Raft made was already an fsynced
//     transaction (NoSync is false), so the file holds exactly what a crash
//     would leave.
//
// What differs from a real crash: the FSM keeps its in-memory state (a
// restart builds a new FSM anyway), and an FSM Apply already running
// finishes. A Node cannot be used after Kill; restart it with New on the
// same DataDir (and BindAddr, unless the leader updates its address with
// AddVoter). It returns nil when called again, or after Shutdown.
func (n *Node) Kill() error {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	n.stream.closeAll()
	return n.closeResources()
}

// closeResources shuts down whatever New opened, in order: Raft (which also
// closes the transport), the leadership forwarder, the connections, BoltDB.
func (n *Node) closeResources() error {
	var errs []error
	if n.raft != nil {
		if err := n.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("raft shutdown: %w", err))
		}
		close(n.stop)
		n.wg.Wait()
		close(n.leaderCh)
	}
	if n.trans != nil {
		_ = n.trans.Close()
	}
	if n.stream != nil {
		n.stream.closeAll()
	}
	if n.store != nil {
		if err := n.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close raft.db: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("consensus: shutdown %s: %w", n.cfg.NodeID, err)
	}
	return nil
}

// FirstIndex returns the index of the oldest entry still in the Raft log:
// entries before it were compacted into a snapshot, so a follower behind it
// can only catch up by InstallSnapshot. Tests and status pages call it.
func (n *Node) FirstIndex() (uint64, error) {
	return n.logs.FirstIndex()
}
