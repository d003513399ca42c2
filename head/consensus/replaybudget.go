package consensus

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// A restarted node restores its newest snapshot and then applies every
// log entry after it once the leader says they are committed: its time to
// ready is the restore plus that replay. hashicorp/raft takes a snapshot
// by count of entries (SnapshotThreshold), but entries differ by orders of
// magnitude in what they cost to apply (one archive entry removes
// thousands of task rows; a heartbeat changes nothing), so a count bounds
// neither the replay nor the cost of snapshotting. The replay budget
// measures instead: the node times its own FSM's applies and takes a
// snapshot once the applies since the last one took ReplayBudget of wall
// time, which is about what a restart on the same machine at the same load
// would spend replaying them; at most one such snapshot every MinGap and
// every 10 times the last one's duration, so that snapshots of a big
// table stay a small share of the node's time. Raft's own threshold stays
// as a backstop.

// timedFSM wraps the FSM Raft is given and sums the wall time of its
// applies.
type timedFSM struct {
	raft.FSM
	applied   atomic.Int64 // nanoseconds spent in Apply and ApplyBatch since New
	atSnap    atomic.Int64 // applied at the last Snapshot or Restore
	snapshots atomic.Int64 // snapshots cut (Snapshot calls), for tests
}

// timedBatchingFSM is a timedFSM over a raft.BatchingFSM: Raft checks the
// FSM it is given for raft.BatchingFSM, so the wrapper offers ApplyBatch
// exactly when the wrapped FSM does.
type timedBatchingFSM struct {
	*timedFSM
	batching raft.BatchingFSM
}

// newTimedFSM wraps f; the second value is what Raft is given.
func newTimedFSM(f raft.FSM) (*timedFSM, raft.FSM) {
	t := &timedFSM{FSM: f}
	if b, ok := f.(raft.BatchingFSM); ok {
		return t, timedBatchingFSM{timedFSM: t, batching: b}
	}
	return t, t
}

// Apply times f's Apply.
func (t *timedFSM) Apply(l *raft.Log) any {
	start := time.Now()
	defer func() { t.applied.Add(int64(time.Since(start))) }()
	return t.FSM.Apply(l)
}

// ApplyBatch times f's ApplyBatch.
func (t timedBatchingFSM) ApplyBatch(logs []*raft.Log) []any {
	start := time.Now()
	defer func() { t.applied.Add(int64(time.Since(start))) }()
	return t.batching.ApplyBatch(logs)
}

// Snapshot marks the cut: what is applied after it is what a restart from
// this snapshot replays. Raft calls it on the FSM goroutine, between
// applies.
func (t *timedFSM) Snapshot() (raft.FSMSnapshot, error) {
	s, err := t.FSM.Snapshot()
	if err == nil {
		t.atSnap.Store(t.applied.Load())
		t.snapshots.Add(1)
	}
	return s, err
}

// Restore restores f; what was applied before it is no longer to replay.
func (t *timedFSM) Restore(rc io.ReadCloser) error {
	err := t.FSM.Restore(rc)
	if err == nil {
		t.atSnap.Store(t.applied.Load())
	}
	return err
}

// sinceSnapshot returns the apply time since the last snapshot or restore.
func (t *timedFSM) sinceSnapshot() time.Duration {
	return time.Duration(t.applied.Load() - t.atSnap.Load())
}

// runReplayBudget takes a snapshot whenever the applies since the last one
// took ReplayBudget, no sooner than MinGap and 10 times the last
// snapshot's duration after the last one it took, until stop is closed.
// It checks every tick. New starts it when ReplayBudget is set.
func (n *Node) runReplayBudget(tick time.Duration) {
	budget, minGap := n.cfg.SnapshotReplayBudget, n.cfg.SnapshotMinGap
	t := time.NewTicker(tick)
	defer t.Stop()
	var next time.Time // no snapshot of ours before it
	for {
		select {
		case <-n.stop:
			return
		case <-n.closing:
			return
		case <-t.C:
		}
		since := n.timed.sinceSnapshot()
		if since < budget || time.Now().Before(next) {
			continue
		}
		start := time.Now()
		err := n.Await(context.Background(), n.raft.Snapshot())
		took := time.Since(start)
		next = time.Now().Add(max(minGap, 10*took))
		switch {
		case err == nil:
			n.log.Debug("snapshot taken: the applies since the last one reached the replay budget",
				"applied_since", since.Round(time.Millisecond), "budget", budget, "took", took.Round(time.Millisecond))
		case errors.Is(err, raft.ErrNothingNewToSnapshot):
		default:
			n.log.Warn("snapshot for the replay budget failed; trying again later", "err", err, "next_after", next.Sub(time.Now()).Round(time.Second))
		}
	}
}
