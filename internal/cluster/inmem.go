package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/megaflow/megaflow/head/consensus"
)

// inmemRPCTimeout bounds each Raft RPC on the in-memory network (10 times
// that for InstallSnapshot and TimeoutNow, hashicorp/raft's rule): the
// bound of the TCP transport (consensus.DefaultConfig's TransportTimeout),
// so that a head slowed down by -race on a busy machine answers late
// rather than fails, as it would over TCP. A killed or stopped head does
// not make its peers wait for it: the network drops its routes and
// answers the RPCs it left unread (inmemNet.isolate, refuse).
const inmemRPCTimeout = 10 * time.Second

// errInmemUnreachable answers the RPCs a stopped head left unread, as a
// refused TCP connection would.
var errInmemUnreachable = errors.New("cluster: in-memory raft peer is down")

// inmemNet is the in-memory Raft network of a cluster with
// Options.RaftInMemory: the transports of the running heads, by address,
// each connected to every other in both directions.
type inmemNet struct {
	mu   sync.Mutex
	live map[raft.ServerAddress]*raft.InmemTransport
}

func newInmemNet() *inmemNet {
	return &inmemNet{live: make(map[raft.ServerAddress]*raft.InmemTransport)}
}

// attach makes a fresh transport at addr and connects it to every running
// head's, in both directions. A transport still attached at addr (a head
// whose Raft never started) is isolated first.
func (n *inmemNet) attach(addr raft.ServerAddress) *raft.InmemTransport {
	_, tr := raft.NewInmemTransportWithTimeout(addr, inmemRPCTimeout)
	old := n.isolate(addr)
	refuse(old)
	n.mu.Lock()
	defer n.mu.Unlock()
	for a, o := range n.live {
		tr.Connect(a, o)
		o.Connect(addr, tr)
	}
	n.live[addr] = tr
	return tr
}

// isolate disconnects the transport at addr from every other, in both
// directions (their pipelines to it close), and forgets it: from now on an
// RPC to addr fails at once, as a connection to a dead process's port
// would. It returns that transport, or nil when none is attached.
func (n *inmemNet) isolate(addr raft.ServerAddress) *raft.InmemTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	tr := n.live[addr]
	if tr == nil {
		return nil
	}
	delete(n.live, addr)
	for a, o := range n.live {
		o.Disconnect(addr)
		tr.Disconnect(a)
	}
	return tr
}

// refuse answers, with errInmemUnreachable, every RPC left in tr's
// consumer channel: those a peer sent before isolate and that tr's Raft,
// now stopped, never read. Without it each sender would wait
// inmemRPCTimeout (a leader's heartbeat and replication to that head, or
// a leadership transfer to it). Call it only once nothing reads tr. A nil
// tr is a no-op.
func refuse(tr *raft.InmemTransport) {
	if tr == nil {
		return
	}
	for {
		select {
		case rpc := <-tr.Consumer():
			rpc.Respond(consensus.EmptyResponse(rpc.Command), errInmemUnreachable)
		default:
			return
		}
	}
}

// memSnapshotsRetain is how many snapshots memSnapshots keeps: the
// head's default for its file store (consensus.DefaultConfig's
// SnapshotRetain).
const memSnapshotsRetain = 2

// memSnapshots is an in-memory snapshot store that, like the file store,
// makes a snapshot visible only once its sink is closed, drops a cancelled
// one, and keeps the newest memSnapshotsRetain. (raft.InmemSnapshotStore
// replaces its one snapshot as soon as a new one is created: a head killed
// while it wrote one, or a follower whose InstallSnapshot broke off, would
// restart from a partial snapshot.) Its snapshots carry no legacy Peers
// field: hashicorp/raft reads Configuration from version 1 snapshots.
type memSnapshots struct {
	mu    sync.Mutex
	snaps []memSnapshot // newest first
}

// memSnapshot is one committed snapshot; data is never written again.
type memSnapshot struct {
	meta raft.SnapshotMeta
	data []byte
}

func newMemSnapshots() *memSnapshots { return &memSnapshots{} }

// Create implements raft.SnapshotStore: it returns a sink that buffers the
// snapshot until Close. The id is the file store's form, term-index-ms.
func (s *memSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, _ raft.Transport) (raft.SnapshotSink, error) {
	if version != 1 {
		return nil, fmt.Errorf("cluster: in-memory snapshot store: unsupported snapshot version %d", version)
	}
	return &memSink{s: s, meta: raft.SnapshotMeta{
		Version: version, ID: fmt.Sprintf("%d-%d-%d", term, index, time.Now().UnixMilli()),
		Index: index, Term: term, Configuration: configuration, ConfigurationIndex: configurationIndex,
	}}, nil
}

// List implements raft.SnapshotStore: the snapshots kept, newest first.
func (s *memSnapshots) List() ([]*raft.SnapshotMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*raft.SnapshotMeta, len(s.snaps))
	for i := range s.snaps {
		m := s.snaps[i].meta
		out[i] = &m
	}
	return out, nil
}

// Open implements raft.SnapshotStore.
func (s *memSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sn := range s.snaps {
		if sn.meta.ID == id {
			m := sn.meta
			return &m, io.NopCloser(bytes.NewReader(sn.data)), nil
		}
	}
	return nil, nil, fmt.Errorf("cluster: in-memory snapshot store: no snapshot %s", id)
}

// memSink buffers one snapshot of memSnapshots.
type memSink struct {
	s    *memSnapshots
	meta raft.SnapshotMeta
	buf  bytes.Buffer
	done bool
}

// Write implements io.Writer.
func (k *memSink) Write(p []byte) (int, error) { return k.buf.Write(p) }

// ID implements raft.SnapshotSink.
func (k *memSink) ID() string { return k.meta.ID }

// Close commits the snapshot as the store's newest, dropping the oldest
// beyond memSnapshotsRetain.
func (k *memSink) Close() error {
	if k.done {
		return nil
	}
	k.done = true
	k.meta.Size = int64(k.buf.Len())
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	k.s.snaps = append([]memSnapshot{{meta: k.meta, data: k.buf.Bytes()}}, k.s.snaps...)
	k.s.snaps = k.s.snaps[:min(len(k.s.snaps), memSnapshotsRetain)]
	return nil
}

// Cancel drops the snapshot.
func (k *memSink) Cancel() error {
	k.done = true
	k.buf = bytes.Buffer{}
	return nil
}
