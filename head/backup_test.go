package head_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/fake"
)

// tableRows is a head's table as fsm.Dump lines, less the workers (a
// restored cluster's leader declares the backup's workers down, on its own
// schedule).
func tableRows(c *testcluster.Cluster, i int) string {
	var keep []string
	for _, l := range strings.Split(fsm.Dump(c.Members[i].Head().FSM().View()), "\n") {
		if !strings.HasPrefix(l, "worker ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// A table saved from one cluster and restored into a fresh one is the same
// table on every head of the new one (graphs, tasks, results, quotas, the
// rules version), which takes the old cluster's id. A file that is not a
// whole snapshot is refused and changes nothing; a table that holds graphs
// is replaced only with force.
func TestSnapshotSaveAndRestore(t *testing.T) {
	t.Parallel() // it waits for its cluster (see internal/testcluster)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a := testcluster.New(t, testcluster.Options{})
	a.AddWorker(testcluster.WorkerOptions{Runtime: fake.New(nil)})
	ca := a.Client()
	if _, err := ca.SetQuota(ctx, &client.Quota{Tenant: "team-a", MaxRunning: 7}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"g1", "g2"} {
		if _, err := ca.Submit(ctx, flatGraph(id, 5)); err != nil {
			t.Fatal(err)
		}
		if g := waitGraph(ctx, t, ca, id); g.State != client.GraphSucceeded {
			t.Fatalf("graph %s: %v", id, g)
		}
	}
	var snap bytes.Buffer
	info, err := ca.SnapshotSave(ctx, &snap)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(snap.Bytes())
	if info.Graphs != 2 || info.Tasks != 10 || info.Workers != 1 || info.Rules != fsm.RulesCurrent ||
		info.SizeBytes != uint64(snap.Len()) || info.Sha256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("snapshot info %v for %d bytes", info, snap.Len())
	}
	// The leader's table, as of the snapshot (nothing runs any more).
	leader := a.WaitLeader(30 * time.Second)
	want := tableRows(a, leader)
	wantID := a.Members[leader].Head().FSM().View().ClusterID()

	// The new cluster on disk: Raft's user restore through the file snapshot
	// store and raft.db, as in production, and the replay check from them.
	b := testcluster.New(t, testcluster.Options{RaftOnDisk: true})
	cb := b.Client()
	bLeader := b.WaitLeader(30 * time.Second)
	before := tableRows(b, bLeader)
	for name, data := range map[string][]byte{
		"not a snapshot": []byte("hello"),
		"truncated":      snap.Bytes()[:snap.Len()/2],
		"empty":          nil,
	} {
		_, err := cb.SnapshotRestore(ctx, bytes.NewReader(data), false)
		if errs.ClassOf(err) != errs.InvalidArgument {
			t.Fatalf("restoring %s: %v; want invalid argument", name, err)
		}
	}
	if after := tableRows(b, bLeader); after != before {
		t.Fatalf("a refused restore changed the table:\n%s", fsm.DiffDumps(before, after, 20))
	}

	got, err := cb.SnapshotRestore(ctx, bytes.NewReader(snap.Bytes()), false)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sha256 != info.Sha256 || got.Graphs != 2 || got.Tasks != 10 {
		t.Fatalf("restore answered %v; want what was saved, %v", got, info)
	}
	for i := range b.Members {
		testcluster.WaitFor(t, 30*time.Second, "every head of the new cluster to hold the restored table", func() bool {
			return tableRows(b, i) == want && b.Members[i].Head().FSM().View().ClusterID() == wantID
		})
	}
	// The applied index follows Raft's past the restore (not the
	// snapshot's own index), so reads after it are answered.
	bl := b.WaitLeader(30 * time.Second)
	if h := b.Members[bl].Head(); h.FSM().AppliedIndex() <= got.Index {
		t.Errorf("applied index %d after restoring a snapshot at %d; want past it", h.FSM().AppliedIndex(), got.Index)
	}
	g, _, err := cb.GetGraph(ctx, "g1", client.ReadOptions{RequireLeader: true})
	if err != nil || g.State != client.GraphSucceeded || g.Counts.GetSucceeded() != 5 {
		t.Fatalf("restored graph g1: %v, %v", g, err)
	}

	// Now the table holds graphs: only force replaces it.
	if _, err := cb.SnapshotRestore(ctx, bytes.NewReader(snap.Bytes()), false); errs.ClassOf(err) != errs.FailedPrecondition ||
		!strings.Contains(err.Error(), "--force") {
		t.Fatalf("restoring over 2 graphs without force: %v; want failed precondition naming --force", err)
	}
	if _, err := cb.SnapshotRestore(ctx, bytes.NewReader(snap.Bytes()), true); err != nil {
		t.Fatalf("restoring with force: %v", err)
	}
}
