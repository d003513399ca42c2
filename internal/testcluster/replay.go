package testcluster

import (
	"errors"
	"time"

	"github.com/megaflow/megaflow/head/consensus"
	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/cluster"
)

// replayBatch is the most entries the replay hands the FSM at once: what
// hashicorp/raft hands it when a head starts again (MaxAppendEntries).
const replayBatch = 1024

// checkReplay is the replay invariant every test cluster checks at its
// end: each stopped head's Raft stores alone (its latest snapshot and
// Raft log, no network: consensus.Replay on its data directory's files
// with Options.RaftOnDisk, else consensus.ReplayStores on the member's
// in-memory stores, cluster.Member.RaftStores) rebuild exactly the table
// the head had when it stopped (graphs, tasks and their attempts and results,
// staged chunks, workers, quotas, pre-warm targets: fsm.Dump), up to the
// index it had applied. A head that restarts replays the same way, so a
// difference here is a head that would come back with another table, or
// not at all (issue 18: a delete replayed in a batch panicked). On a
// difference it fails the test with a readable diff. Options.NoReplayCheck
// turns it off, with a reason.
func (c *Cluster) checkReplay(stopped []cluster.StoppedHead) {
	c.t.Helper()
	if len(stopped) == 0 {
		return
	}
	if c.opts.NoReplayCheck != "" {
		c.t.Logf("replay check off: %s", c.opts.NoReplayCheck)
		return
	}
	for _, s := range stopped {
		table := s.Head.FSM()
		applied := table.AppliedIndex()
		before := fsm.Dump(table.View())
		rebuilt, err := fsm.New(fsm.DefaultConfig())
		if err != nil {
			c.t.Fatal(err)
		}
		begin := time.Now()
		from := s.Member.DataDir
		var res consensus.ReplayResult
		if logs, snaps := s.Member.RaftStores(); logs != nil {
			from = "its in-memory Raft stores"
			res, err = consensus.ReplayStores(logs, snaps, rebuilt, applied, replayBatch)
		} else {
			res, err = consensus.Replay(s.Member.DataDir, rebuilt, applied, replayBatch)
		}
		switch {
		case errors.Is(err, consensus.ErrReplayAhead):
			c.t.Logf("head %s: replay check skipped: %v (applied %d)", s.Member.ID, err, applied)
			continue
		case err != nil:
			c.t.Errorf("head %s: rebuilding its table from %s up to index %d: %v", s.Member.ID, from, applied, err)
			continue
		}
		if d := fsm.DiffDumps(before, fsm.Dump(rebuilt.View()), 40); d != "" {
			c.t.Errorf("head %s: the table rebuilt from %s (snapshot at %d, then %d entries) differs from the one it had at index %d "+
				"(- what the head had, + what the replay built):\n%s", s.Member.ID, from, res.SnapshotIndex, res.Entries, applied, d)
			continue
		}
		if c.opts.Verbose {
			c.t.Logf("head %s: replay check: snapshot at %d, %d entries, index %d, %v", s.Member.ID, res.SnapshotIndex, res.Entries, applied, time.Since(begin))
		}
	}
}
