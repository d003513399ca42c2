package head_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/internal/within"
)

// rolloutGraph is a typical rollout step: n independent rollouts, each
// setup -> rollout -> eval.
func rolloutGraph(id string, n int) *client.GraphSpec {
	g := &client.GraphSpec{Id: id, Tenant: "team-a"}
	for i := range n {
		setup := fmt.Sprintf("setup-%d", i)
		roll := fmt.Sprintf("rollout-%d", i)
		g.Tasks = append(g.Tasks,
			&client.TaskSpec{Name: setup, Image: "swe-gym/django:1", Command: []string{"/bin/sh", "-c", "setup"},
				Resources: &client.Resources{CpuMillis: 500, MemoryBytes: 256 << 20}},
			&client.TaskSpec{Name: roll, Image: "swe-gym/django:1", Command: []string{"/agent", "--steps", "20"},
				DependsOn: []string{setup}, Type: "train", Resources: &client.Resources{CpuMillis: 1000, MemoryBytes: 1 << 30}},
			&client.TaskSpec{Name: fmt.Sprintf("eval-%d", i), Image: "swe-gym/django:1", Command: []string{"/eval"},
				DependsOn: []string{roll}, Type: "eval"},
		)
	}
	return g
}

// tableDigest summarizes a head's table for comparing replicas.
func tableDigest(t *testing.T, h *head.Head) string {
	t.Helper()
	v := h.FSM().View()
	sum := sha256.New()
	opts := proto.MarshalOptions{Deterministic: true}
	for g := range v.Graphs() {
		b, err := opts.Marshal(g.ToWire())
		if err != nil {
			t.Fatal(err)
		}
		sum.Write(b)
	}
	for task := range v.Tasks() {
		b, err := opts.Marshal(task.ToWire())
		if err != nil {
			t.Fatal(err)
		}
		sum.Write(b)
	}
	return fmt.Sprintf("%x", sum.Sum(nil))
}

func TestLeaderKillLosesNoAcknowledgedGraph(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// 4*25*12*3 = 3,600 tasks: what is asserted is about the 100 graphs
	// and their counts, not their size (34 rollouts each, 10,200 tasks,
	// took 15 to 25 s of CPU under -race for the same assertions).
	const writers, graphsPerWriter, rollouts = 4, 25, 12
	var (
		mu    sync.Mutex
		acked = map[string]uint64{}
		done  atomic.Int32
	)
	killed := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range graphsPerWriter {
				id := fmt.Sprintf("w%d-g%d", w, i)
				res, err := cl.Submit(ctx, rolloutGraph(id, rollouts))
				if err != nil {
					t.Errorf("submit %s: %v", id, err)
					return
				}
				mu.Lock()
				acked[id] = res.Index
				mu.Unlock()
				if done.Add(1) == writers*graphsPerWriter/2 {
					close(killed)
				}
			}
		}()
	}
	writersDone := make(chan struct{})
	go func() { // ends with the writers, which end with ctx at the latest
		wg.Wait()
		close(writersDone)
	}()
	select {
	case <-killed:
	case <-writersDone:
		t.Fatalf("the writers ended before half their graphs were acknowledged (%d of %d)", done.Load(), writers*graphsPerWriter)
	case <-time.After(3 * time.Minute):
		t.Fatalf("timed out after 3m waiting for half the graphs to be acknowledged (%d of %d)", done.Load(), writers*graphsPerWriter)
	}
	old := c.WaitLeader(10 * time.Second)
	c.Kill(old)
	newLeader := c.WaitLeader(30 * time.Second)
	if newLeader == old {
		t.Fatalf("killed head %d is still the leader", old)
	}
	within.Recv(t, 3*time.Minute, writersDone, "the writers to finish")
	if t.Failed() {
		return
	}
	if len(acked) != writers*graphsPerWriter {
		t.Fatalf("acknowledged %d graphs, want %d", len(acked), writers*graphsPerWriter)
	}
	var maxIndex uint64
	for _, idx := range acked {
		maxIndex = max(maxIndex, idx)
	}
	c.WaitApplied(maxIndex, 30*time.Second)
	for id := range acked {
		for _, h := range c.Running() {
			g, _, err := readGraph(ctx, t, c, h, id)
			if err != nil {
				t.Fatalf("head %s: graph %s acknowledged but not found: %v", h.ID(), id, err)
			}
			if g.TaskCount != rollouts*3 || g.Counts.GetQueued() != rollouts || g.Counts.GetPending() != 2*rollouts {
				t.Fatalf("head %s: graph %s: %d tasks, counts %v", h.ID(), id, g.TaskCount, g.Counts)
			}
		}
	}
	// The killed head comes back on its data dir and catches up.
	c.Restart(old)
	leader := c.Members[c.WaitLeader(30*time.Second)].Head()
	c.WaitApplied(leader.AppliedIndex(), 30*time.Second)
	assertReplicasEqual(t, c)
}

// readGraph reads a graph from one specific head.
func readGraph(ctx context.Context, t *testing.T, c *testcluster.Cluster, h *head.Head, id string) (*client.Graph, *client.ReadMeta, error) {
	t.Helper()
	cl, err := client.Dial(ctx, []string{h.GRPCAddr()})
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	return cl.GetGraph(ctx, id, client.ReadOptions{})
}

// assertReplicasEqual checks every running head holds the same table once
// they have applied the same index.
func assertReplicasEqual(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	heads := c.Running()
	var target uint64
	for _, h := range heads {
		target = max(target, h.AppliedIndex())
	}
	c.WaitApplied(target, 30*time.Second)
	want := tableDigest(t, heads[0])
	for _, h := range heads[1:] {
		if got := tableDigest(t, h); got != want {
			t.Fatalf("head %s table differs from head %s at index %d", h.ID(), heads[0].ID(), target)
		}
	}
}

// A follower killed, then restarted once the leader's log is compacted
// past it, catches up by InstallSnapshot: on disk (RaftOnDisk: its
// raft.db and the file snapshot store of production) and in memory (the
// test clusters' snapshot store, internal/cluster).
func TestRestartedHeadCatchesUpThroughSnapshot(t *testing.T) {
	t.Parallel() // it waits mostly for Raft's disk writes (see internal/testcluster)
	for _, onDisk := range []bool{true, false} {
		t.Run(map[bool]string{true: "disk", false: "memory"}[onDisk], func(t *testing.T) {
			restartedHeadCatchesUpThroughSnapshot(t, onDisk)
		})
	}
}

// restartedHeadCatchesUpThroughSnapshot is that test, with Raft on disk or
// in memory.
func restartedHeadCatchesUpThroughSnapshot(t *testing.T, onDisk bool) {
	c := testcluster.New(t, testcluster.Options{RaftOnDisk: onDisk, Configure: func(cfg *head.Config) {
		cfg.SnapshotThreshold = 64
		cfg.TrailingLogs = 16
		cfg.SnapshotInterval = time.Hour // snapshots only when the test asks
	}})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	follower := (leader + 1) % 3
	lastBefore := c.Members[follower].Head().AppliedIndex()
	c.Kill(follower)

	var last uint64
	for i := range 300 {
		res, err := cl.Submit(ctx, rolloutGraph(fmt.Sprintf("g%d", i), 2))
		if err != nil {
			t.Fatal(err)
		}
		last = res.Index
	}
	lh := c.Members[c.WaitLeader(10*time.Second)].Head()
	if err := lh.Node().Raft().Snapshot().Error(); err != nil {
		t.Fatalf("leader snapshot: %v", err)
	}
	first, err := lh.Node().FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	if first <= lastBefore+1 {
		t.Fatalf("leader log starts at %d; the test needs it compacted past the follower's %d", first, lastBefore)
	}
	// The entries the follower misses are gone from the leader's log: it
	// can only catch up by installing the leader's snapshot.
	c.Restart(follower)
	c.WaitApplied(last, 30*time.Second)
	testcluster.WaitFor(t, 10*time.Second, "the follower to record the installed snapshot", func() bool {
		return c.Members[follower].Head().Node().Stats().LastSnapshotIndex >= first-1
	})
	assertReplicasEqual(t, c)
}

func TestSubmitIsIdempotentByGraphID(t *testing.T) {
	t.Parallel() // it waits for its cluster (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	cl := c.Client()
	ctx := context.Background()
	g := rolloutGraph("step-42", 3)
	first, err := cl.Submit(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	again, err := cl.Submit(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Existed || again.Index != first.Index || first.Existed {
		t.Fatalf("resubmit: first %v, again %v; want existed=true at the same index", first, again)
	}
	g.Tasks[0].Image = "other:1"
	_, err = cl.Submit(ctx, g)
	if !errors.Is(err, errs.ErrAlreadyExists) {
		t.Fatalf("resubmit with another spec: err %v, want AlreadyExists", err)
	}
	graphs, _, err := cl.ListGraphs(ctx, client.GraphFilter{Read: client.ReadOptions{RequireLeader: true}})
	if err != nil || len(graphs) != 1 {
		t.Fatalf("graphs %d, err %v; want exactly 1", len(graphs), err)
	}
}

func TestBadGraphChangesNothing(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	ctx := context.Background()
	leader := c.Members[c.WaitLeader(10*time.Second)].Head()
	// A new cluster's leader commits its cluster id first: let it, so
	// that what follows is the refused graph's doing alone.
	testcluster.WaitFor(t, 10*time.Second, "the cluster id committed", func() bool { return leader.FSM().View().ClusterID() != 0 })
	before := leader.AppliedIndex()
	digest := tableDigest(t, leader)
	bad := rolloutGraph("bad", 2)
	bad.Tasks[2].DependsOn = []string{"rollot-0"}
	// Through every head, leader and followers, with the raw API (the
	// client library would refuse it before sending).
	for _, h := range c.Running() {
		conn, err := grpc.NewClient(h.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		_, err = wire.NewMegaflowServiceClient(conn).SubmitGraph(ctx, &wire.SubmitGraphRequest{Graph: bad})
		conn.Close()
		err = errs.FromStatus(err)
		if !errors.Is(err, errs.ErrInvalidArgument) {
			t.Fatalf("head %s: err %v, want InvalidArgument", h.ID(), err)
		}
		for _, want := range []string{`graph "bad"`, `task "eval-0"`, `"rollot-0"`} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not name %s", err, want)
			}
		}
	}
	if leader.AppliedIndex() != before || tableDigest(t, leader) != digest {
		t.Fatalf("a refused graph changed the table (index %d -> %d)", before, leader.AppliedIndex())
	}
}
