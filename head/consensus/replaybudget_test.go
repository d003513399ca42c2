package consensus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// slowFSM is a testFSM whose every Apply takes at least delay.
type slowFSM struct {
	*testFSM
	delay time.Duration
}

func (f slowFSM) Apply(l *raft.Log) any {
	time.Sleep(f.delay)
	return f.testFSM.Apply(l)
}

// With a replay budget, a node takes a snapshot once its applies since the
// last one took that long, although SnapshotThreshold is far away; without
// one it takes none.
func TestReplayBudgetTakesASnapshot(t *testing.T) {
	for _, budget := range []time.Duration{0, 50 * time.Millisecond} {
		t.Run(fmt.Sprintf("budget=%v", budget), func(t *testing.T) {
			store, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
			_, tr := raft.NewInmemTransport("inmem-h0")
			cfg := DefaultConfig()
			cfg.NodeID = "h0"
			cfg.LogStore, cfg.StableStore, cfg.SnapshotStore, cfg.Transport = store, store, snaps, tr
			cfg.FSM = slowFSM{testFSM: &testFSM{}, delay: 2 * time.Millisecond}
			cfg.Logger = testLogger()
			cfg.Fast = true
			cfg.SnapshotThreshold, cfg.SnapshotInterval = 1<<40, time.Hour // never by count
			cfg.SnapshotReplayBudget, cfg.SnapshotMinGap = budget, 0
			nd, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = shutdown(nd) }()
			if err := nd.Bootstrap([]raft.Server{{ID: "h0", Address: tr.LocalAddr()}}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 20*time.Second, "h0 to lead", nd.IsLeader)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var last raft.ApplyFuture
			for k := range 60 { // 120 ms of applies at least
				last = nd.Raft().Apply([]byte(fmt.Sprintf("cmd-%d", k)), 5*time.Second)
			}
			if err := nd.Await(ctx, last); err != nil {
				t.Fatal(err)
			}
			if budget == 0 {
				time.Sleep(300 * time.Millisecond) // long enough for a budget check to have run, were there one
				if idx := nd.Stats().LastSnapshotIndex; idx != 0 {
					t.Fatalf("snapshot at index %d with no replay budget and the threshold far away", idx)
				}
				return
			}
			waitFor(t, 20*time.Second, "a snapshot for the replay budget", func() bool { return nd.Stats().LastSnapshotIndex > 0 })
		})
	}
}
