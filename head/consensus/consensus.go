// Package consensus owns the head's Raft wiring: the BoltDB log and stable
// store, the file snapshot store, the TCP transport (tests may pass
// in-memory ones through Config instead) and the raft.Raft that ties them
// to the FSM, plus bootstrap (BootstrapServers, Bootstrap), leadership
// observation (LeaderChanges) and voter management for the leader
// (AddVoter, RemoveServer). It holds no FSM logic: the FSM comes in
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
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/megaflow/megaflow/internal/dirlock"
	"go.etcd.io/bbolt"
)

// Node is one head's Raft member. Its methods are safe for concurrent use.
type Node struct {
	cfg    Config
	log    *slog.Logger
	raft   *raft.Raft
	store  *raftboltdb.BoltStore // nil with Config.LogStore
	stream *tcpStream            // nil with Config.Transport
	trans  raft.Transport        // the TCP transport or Config.Transport
	watch  *commitWatch          // between trans and Raft: the leader's commit index
	timed  *timedFSM             // Config.FSM as Raft sees it: its applies timed (replay budget)
	snaps  raft.SnapshotStore    // the file store or Config.SnapshotStore
	logs   raft.LogStore         // store or Config.LogStore, behind the log cache
	stable raft.StableStore      // store or Config.StableStore
	lock   *dirlock.Lock         // DataDir/raft/LOCK, held until the store is closed; nil without disk

	notifyCh chan bool     // raft's Config.NotifyCh
	leaderCh chan bool     // LeaderChanges; capacity 1, latest wins
	stop     chan struct{} // stops forwardLeadership and the commit watch
	wg       sync.WaitGroup

	closeMu sync.Mutex
	closed  bool
	closing chan struct{} // closed when Shutdown or Kill begins (Await)
}

// New validates cfg, opens DataDir/raft/raft.db and the snapshot store,
// binds the transport (each unless Config supplies it) and starts Raft. A
// node with no existing state waits, as a follower without peers, until
// Bootstrap is called or a leader adds it. Call Shutdown (or Kill) to
// release everything New opened.
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

	n := &Node{
		cfg:      cfg,
		log:      log,
		notifyCh: make(chan bool, 8),
		leaderCh: make(chan bool, 1),
		stop:     make(chan struct{}),
		closing:  make(chan struct{}),
	}
	ok := false
	defer func() {
		if !ok {
			_ = n.closeResources(false)
		}
	}()

	if err := n.openStores(hl); err != nil {
		return nil, err
	}
	if err := n.openTransport(hl); err != nil {
		return nil, err
	}

	rc := cfg.raftConfig()
	rc.NotifyCh = n.notifyCh
	rc.Logger = hl.Named("raft")
	var err error
	var trans raft.Transport
	n.watch, trans = newCommitWatch(n.trans)
	var fsm raft.FSM
	n.timed, fsm = newTimedFSM(cfg.FSM)
	if n.raft, err = raft.NewRaft(rc, fsm, n.logs, n.stable, n.snaps, trans); err != nil {
		return nil, fmt.Errorf("consensus: start raft: %w", err)
	}
	ok = true
	n.wg.Add(2)
	go n.forwardLeadership()
	go func() { defer n.wg.Done(); n.watch.run(n.stop) }()
	if cfg.SnapshotReplayBudget > 0 {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.runReplayBudget(min(max(cfg.SnapshotReplayBudget/2, 10*time.Millisecond), time.Second))
		}()
	}
	log.Debug("raft started", "addr", n.Addr(), "dir", n.diskDir())
	return n, nil
}

// diskDir returns DataDir/raft, or "" when the Node keeps nothing on disk.
func (n *Node) diskDir() string {
	if !n.cfg.usesDisk() {
		return ""
	}
	return filepath.Join(n.cfg.DataDir, "raft")
}

// openStores sets n.logs, n.stable and n.snaps: Config's stores where set,
// else BoltDB and file snapshots in DataDir/raft, whose lock it then takes
// first. New calls it; on error, closeResources releases what it opened.
func (n *Node) openStores(hl hclog.Logger) error {
	cfg := &n.cfg
	dir := n.diskDir()
	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("consensus: create %s: %w", dir, err)
		}
		// Another process on this directory: say so at once, with its pid,
		// rather than wait out BoltDB's lock ("open raft.db: timeout").
		var err error
		if n.lock, err = dirlock.Acquire(dir, "consensus"); err != nil {
			return err
		}
	}
	n.logs, n.stable = cfg.LogStore, cfg.StableStore
	if n.logs == nil {
		dbPath := filepath.Join(dir, "raft.db")
		var err error
		n.store, err = raftboltdb.New(raftboltdb.Options{
			Path:        dbPath,
			NoSync:      false,
			BoltOptions: &bbolt.Options{Timeout: 5 * time.Second}, // the lock above keeps other processes off
		})
		if err != nil {
			return fmt.Errorf("consensus: open %s: %w", dbPath, err)
		}
		n.logs, n.stable = n.store, n.store
	}
	if cfg.LogCacheSize > 0 {
		var err error
		if n.logs, err = raft.NewLogCache(cfg.LogCacheSize, n.logs); err != nil {
			return fmt.Errorf("consensus: log cache: %w", err)
		}
	}
	n.snaps = cfg.SnapshotStore
	if n.snaps == nil {
		var err error
		if n.snaps, err = raft.NewFileSnapshotStoreWithLogger(dir, cfg.SnapshotRetain, hl.Named("snapshot")); err != nil {
			return fmt.Errorf("consensus: open snapshot store in %s: %w", dir, err)
		}
	}
	return nil
}

// openTransport sets n.trans: Config.Transport, or a TCP transport on
// BindAddr (with n.stream). New calls it after openStores.
func (n *Node) openTransport(hl hclog.Logger) error {
	cfg := &n.cfg
	if cfg.Transport != nil {
		n.trans = cfg.Transport
		return nil
	}
	var err error
	if n.stream, err = listenTCP(cfg.BindAddr, cfg.AdvertiseAddr); err != nil {
		return fmt.Errorf("consensus: listen on %s: %w", cfg.BindAddr, err)
	}
	n.stream.tls = cfg.TLS
	n.stream.handshakeTimeout = cfg.TransportTimeout
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  n.stream,
		MaxPool: cfg.TransportMaxPool,
		Timeout: cfg.TransportTimeout,
		// 1 turns pipelined replication off: every AppendEntries is
		// synchronous, bounded by Timeout. hashicorp/raft v1.8.0's
		// pipeline can deadlock (its decoder parks sending to an
		// unbuffered doneCh that nobody reads once a response failed,
		// and the next send parks on inprogressCh; only pipeline.Close,
		// deferred in the parked goroutine, frees them): replication to
		// that follower stops for good and raft.Shutdown waits forever
		// (issue 18, finding 7: a head hung 18 minutes in Shutdown).
		// MaxAppendEntries batching keeps the throughput.
		MaxRPCsInFlight: 1,
		Logger:          hl.Named("transport"),
	})
	return nil
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
	has, err := raft.HasExistingState(n.logs, n.stable, n.snaps)
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

// ShutdownGrace is how long Shutdown waits for Raft's goroutines after its
// ctx has ended, with every connection already closed, before it gives up
// on them.
const ShutdownGrace = 2 * time.Second

// ErrShutdownIncomplete is returned (wrapped) by Shutdown when Raft's
// goroutines did not all stop within ctx and ShutdownGrace; the log names
// them.
var ErrShutdownIncomplete = errors.New("raft did not stop in time")

// Shutdown stops the node gracefully and returns by ctx's deadline plus
// ShutdownGrace at most: if it is the leader of a multi-voter cluster it
// first hands leadership to another voter (so the cluster need not wait out
// an election timeout; given up when ctx ends), then shuts Raft down,
// closing the transport's listener and every open connection at once (an
// RPC to a peer that accepts TCP but never answers would otherwise hold a
// replication goroutine for up to TransportTimeout), waits for Raft's
// goroutines (Raft closes the transport, Config.Transport included), and
// closes BoltDB (not Config's stores). If Raft's goroutines have not stopped by
// then, it logs each one still running (its stack's first frames) and
// returns an error wrapping ErrShutdownIncomplete; BoltDB is closed anyway
// (its file lock released) when no write holds it. It returns nil when
// called again. The head calls it once on exit.
func (n *Node) Shutdown(ctx context.Context) error {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	close(n.closing)
	if n.IsLeader() {
		f := n.raft.LeadershipTransfer()
		if err := waitFuture(ctx, f); err != nil {
			n.log.Debug("no leadership transfer before shutdown", "err", err)
		}
	}
	if n.raft == nil {
		return n.closeResources(false)
	}
	f := n.raft.Shutdown()
	n.closeConns()
	err := waitFuture(ctx, f)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		grace, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
		err = waitFuture(grace, f)
		cancel()
		if err != nil && grace.Err() != nil {
			left := raftGoroutines()
			n.stopForwarder()
			n.log.Error("raft did not stop within the shutdown deadline; giving up on its goroutines",
				"grace", ShutdownGrace, "goroutines", len(left), "stacks", strings.Join(left, "\n---\n"))
			storeErr := n.closeStoreWithin(ShutdownGrace)
			n.releaseLock()
			return errors.Join(fmt.Errorf("consensus: shutdown %s: %w (%d goroutines of hashicorp/raft still running, named in the log)",
				n.cfg.NodeID, ErrShutdownIncomplete, len(left)), storeErr)
		}
	}
	return errors.Join(err, n.closeResources(true))
}

// stopForwarder stops forwardLeadership and closes LeaderChanges.
func (n *Node) stopForwarder() {
	close(n.stop)
	n.wg.Wait()
	close(n.leaderCh)
}

// closeStoreWithin closes BoltDB unless a write holds it longer than d.
// Stores from Config are left open.
func (n *Node) closeStoreWithin(d time.Duration) error {
	if n.store == nil {
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- n.store.Close() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("close raft.db: %w", err)
		}
		return nil
	case <-time.After(d):
		return fmt.Errorf("close raft.db: still held by a write after %v", d)
	}
}

// raftGoroutines returns the header and first frames of every goroutine
// whose stack is in hashicorp/raft.
func raftGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "github.com/hashicorp/raft.") {
			continue
		}
		lines := strings.Split(g, "\n")
		out = append(out, strings.Join(lines[:min(len(lines), 7)], "\n"))
	}
	return out
}

// Kill stops the node as close to a crash as this process can get, for
// tests. In order, it:
//
//  1. closes the transport's listener and every open TCP connection,
//     inbound and outbound, at once, and refuses any further dial, so peers
//     see resets and refused connections exactly as after a process death,
//     and nothing Raft does from then on reaches them (with
//     Config.Transport, it closes that transport instead: an
//     InmemTransport drops its routes to every peer, but the peers keep
//     theirs to it, so their RPCs time out rather than fail at once unless
//     the test disconnects them too);
//  2. shuts Raft down: its goroutines stop, in-flight futures fail, no
//     leadership transfer is attempted and no snapshot is taken; apart from
//     a disk write already under way, which completes, Raft writes nothing
//     further to the log or stable store;
//  3. stops the LeaderChanges forwarder and closes that channel;
//  4. closes BoltDB, which releases its file lock (as the kernel would) but
//     writes nothing: every write Raft made was already an fsynced
//     transaction (NoSync is false), so the file holds exactly what a crash
//     would leave. Stores from Config are left as they are, for a restart.
//
// What differs from a real crash: the FSM keeps its in-memory state (a
// restart builds a new FSM anyway), and an FSM Apply already running
// finishes. A Node cannot be used after Kill; restart it with New on the
// same DataDir (and BindAddr, unless the leader updates its address with
// AddVoter), or on the same Config stores with a new Transport. It returns nil when called again, or after Shutdown.
func (n *Node) Kill() error {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	close(n.closing)
	n.closeConns()
	if n.stream == nil {
		// Config.Transport: closing it first is the nearest an injected
		// transport gets to closing every connection (InmemTransport's
		// Close drops its routes to every peer). Raft closes it again as it
		// shuts down.
		if c, ok := n.trans.(raft.WithClose); ok {
			_ = c.Close()
		}
	}
	return n.closeResources(false)
}

// closeConns closes the TCP listener and every TCP connection, and refuses
// new ones; nothing with Config.Transport.
func (n *Node) closeConns() {
	if n.stream != nil {
		n.stream.closeAll()
	}
}

// releaseLock releases DataDir/raft's lock, if New took it.
func (n *Node) releaseLock() {
	if n.lock != nil {
		_ = n.lock.Release()
	}
}

// closeResources shuts down whatever New opened, in order: Raft (which also
// closes the transport, Config's included; raftStopped: Shutdown already
// waited for it), the leadership forwarder, the TCP transport and
// connections, BoltDB, the directory lock. It leaves Config's stores open,
// and Config.Transport too when Raft never started (a failed New).
func (n *Node) closeResources(raftStopped bool) error {
	var errs []error
	if n.raft != nil {
		if !raftStopped {
			if err := n.raft.Shutdown().Error(); err != nil {
				errs = append(errs, fmt.Errorf("raft shutdown: %w", err))
			}
		}
		n.stopForwarder()
	}
	if n.stream != nil {
		if c, ok := n.trans.(raft.WithClose); ok { // ours: the TCP transport
			_ = c.Close()
		}
		n.stream.closeAll()
	}
	if n.store != nil {
		if err := n.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close raft.db: %w", err))
		}
	}
	n.releaseLock()
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

// Await waits for f (an Apply, Barrier or VerifyLeader future of this
// node's Raft), for ctx, or for the node to begin shutting down, whichever
// comes first, and returns f's error, ctx's, or raft.ErrRaftShutdown.
// hashicorp/raft does not answer every future once it has shut down: with
// BatchApplyCh its apply channel is buffered, so a future enqueued as the
// node stops is never read (a leader's Barrier hung a test's Kill for 13
// minutes that way). Callers on the head's own goroutines wait through
// Await, never on f.Error() alone. When f is never answered, the goroutine
// that waits on it stays until the process ends: one per such future.
func (n *Node) Await(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.closing:
		select {
		case err := <-done: // answered as it stopped
			return err
		default:
			return raft.ErrRaftShutdown
		}
	}
}
