package consensus

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/megaflow/megaflow/internal/dirlock"
	"go.etcd.io/bbolt"
)

// ReplayResult says what Replay read.
type ReplayResult struct {
	// SnapshotIndex is the index of the snapshot restored, 0 if none.
	SnapshotIndex uint64
	// Entries counts the log entries applied after the snapshot.
	Entries int
}

// ReplayAll as Replay's or ReplayStores' upTo replays the whole log, to
// its last entry (0 replays nothing: a node that applied nothing).
const ReplayAll uint64 = math.MaxUint64

// ErrReplayAhead is returned by Replay and ReplayStores when every
// snapshot in the store is newer than the index asked for (a follower
// stopped between writing an installed snapshot and restoring it): a
// restart would start from that snapshot, past the index, so nothing can
// be compared there.
var ErrReplayAhead = errors.New("consensus: replay: the snapshots are all past the index")

// Replay rebuilds f from what a stopped node left in dataDir, the way
// hashicorp/raft does when the node starts again, without any network
// (ReplayStores on DataDir/raft's file snapshots and raft.db). It takes
// the directory's lock (dirlock) and opens raft.db read-only, so the node
// must be shut down; it reads only these disk stores, not stores passed
// in Config (ReplayStores reads those). Tests call it to check that a
// table rebuilt from disk equals the one the node had
// (internal/testcluster). Errors: a store that cannot be opened, and
// those of ReplayStores.
func Replay(dataDir string, f raft.BatchingFSM, upTo uint64, batch int) (ReplayResult, error) {
	dir := filepath.Join(dataDir, "raft")
	lock, err := dirlock.Acquire(dir, "consensus: replay")
	if err != nil {
		return ReplayResult{}, err
	}
	defer lock.Release()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 1, hclog.NewNullLogger())
	if err != nil {
		return ReplayResult{}, fmt.Errorf("consensus: replay: open snapshot store in %s: %w", dir, err)
	}
	dbPath := filepath.Join(dir, "raft.db")
	store, err := raftboltdb.New(raftboltdb.Options{Path: dbPath,
		BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: time.Second}})
	if err != nil {
		return ReplayResult{}, fmt.Errorf("consensus: replay: open %s (is its node still running?): %w", dbPath, err)
	}
	defer store.Close()
	res, err := ReplayStores(store, snaps, f, upTo, batch)
	if err != nil {
		err = fmt.Errorf("%w (in %s)", err, dir)
	}
	return res, err
}

// ReplayStores rebuilds f from a stopped node's log store and snapshot
// store, the way hashicorp/raft does when the node starts again: it
// restores the newest snapshot at or below upTo, then applies the log
// entries after it up to upTo (ReplayAll: to the log's last entry,
// committed or not) in order, in batches of at most batch entries (raft hands a BatchingFSM at most MaxAppendEntries at once) and
// only the LogCommand and LogConfiguration entries, as raft does. f must
// be fresh. The node must be stopped: ReplayStores only reads the stores,
// but a running node writes them. Replay calls it on a data directory's
// stores; tests call it on in-memory stores (Config.LogStore and
// SnapshotStore; internal/testcluster). Errors: a snapshot that cannot be
// listed, opened or restored, an entry missing from the log,
// ErrReplayAhead, or a panic of f (a corrupt log, or a bug), with the
// range of entries it was applying.
func ReplayStores(logStore raft.LogStore, snaps raft.SnapshotStore, f raft.BatchingFSM, upTo uint64, batch int) (ReplayResult, error) {
	var res ReplayResult
	all := upTo == ReplayAll
	if batch < 1 {
		batch = 1
	}
	metas, err := snaps.List()
	if err != nil {
		return res, fmt.Errorf("consensus: replay: list snapshots: %w", err)
	}
	for _, m := range metas { // newest first
		if m.Index > upTo {
			continue
		}
		_, rc, err := snaps.Open(m.ID)
		if err != nil {
			return res, fmt.Errorf("consensus: replay: open snapshot %s: %w", m.ID, err)
		}
		err = f.Restore(rc)
		_ = rc.Close()
		if err != nil {
			return res, fmt.Errorf("consensus: replay: restore snapshot %s: %w", m.ID, err)
		}
		res.SnapshotIndex = m.Index
		break
	}
	if res.SnapshotIndex == 0 && len(metas) > 0 { // every one is past upTo
		return res, ErrReplayAhead
	}
	first, _ := logStore.FirstIndex()
	if all {
		last, err := logStore.LastIndex()
		if err != nil {
			return res, fmt.Errorf("consensus: replay: last index: %w", err)
		}
		upTo = max(last, res.SnapshotIndex)
	}
	logs := make([]*raft.Log, 0, batch)
	flush := func() (err error) {
		if len(logs) == 0 {
			return nil
		}
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("consensus: replay: applying entries %d to %d: panic: %v", logs[0].Index, logs[len(logs)-1].Index, p)
			}
		}()
		f.ApplyBatch(logs)
		res.Entries += len(logs)
		logs = make([]*raft.Log, 0, batch)
		return nil
	}
	for i := res.SnapshotIndex + 1; i <= upTo; i++ {
		l := &raft.Log{}
		if err := logStore.GetLog(i, l); err != nil {
			return res, fmt.Errorf("consensus: replay: entry %d (log starts at %d, snapshot at %d): %w", i, first, res.SnapshotIndex, err)
		}
		if l.Type != raft.LogCommand && l.Type != raft.LogConfiguration {
			continue
		}
		logs = append(logs, l)
		if len(logs) == batch {
			if err := flush(); err != nil {
				return res, err
			}
		}
	}
	return res, flush()
}
