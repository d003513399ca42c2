package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/within"
)

// TestRaftInMemory: three heads on the in-memory Raft network commit
// graphs with no Raft file; a killed leader is replaced and comes back on
// its stores and address; an added head becomes a voter; and Stop, which
// stops the heads one after the other, takes no Raft timeout (a leader
// does not wait on a peer that stopped before it).
func TestRaftInMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, err := Start(ctx, Options{Dir: dir, Heads: 3, RaftInMemory: true,
		ConfigureHead: func(_ int, cfg *head.Config) { cfg.Fast = true }})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop()
		}
	}()
	for i, m := range c.Members {
		if want := fmt.Sprintf("inmem-h%d", i+1); m.RaftAddr != want || m.Head().RaftAddr() != want {
			t.Fatalf("member %d: Raft address %q (head %q), want %q", i, m.RaftAddr, m.Head().RaftAddr(), want)
		}
		if logs, snaps := m.RaftStores(); logs == nil || snaps == nil {
			t.Fatalf("member %d: no in-memory Raft stores", i)
		}
		if _, err := os.Stat(filepath.Join(m.DataDir, "raft")); !os.IsNotExist(err) {
			t.Fatalf("%s/raft exists (stat: %v): the head wrote Raft files", m.DataDir, err)
		}
	}
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	submit := func(id string) uint64 {
		t.Helper()
		res, err := cl.Submit(ctx, &client.GraphSpec{Id: id, Tasks: []*client.TaskSpec{{Name: "t", Image: "busybox",
			Command: []string{"/bin/true"}, Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}}}})
		if err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
		return res.Index
	}
	waitApplied := func(index uint64) {
		t.Helper()
		if err := WaitUntil(ctx, time.Minute, fmt.Sprintf("every running head applied %d", index), func() bool {
			for _, h := range c.Running() {
				if h.AppliedIndex() < index {
					return false
				}
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitApplied(submit("before"))

	old, err := c.WaitLeader(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(old)
	if l, err := c.WaitLeader(ctx, time.Minute); err != nil || l == old {
		t.Fatalf("leader after the kill of %d: %d, %v", old, l, err)
	}
	last := submit("during")
	if err := c.Restart(old); err != nil {
		t.Fatal(err)
	}
	if m := c.Members[old]; m.RaftAddr != fmt.Sprintf("inmem-h%d", old+1) || !m.Head().Node().HasExistingState() {
		t.Fatalf("restarted member %d: address %q, existing state %v; want its address and its stores",
			old, m.RaftAddr, m.Head().Node().HasExistingState())
	}
	waitApplied(last)

	added, err := c.AddHead(filepath.Join(dir, "added"))
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitUntil(ctx, time.Minute, "the added head to be a voter and catch up", func() bool {
		l := c.Leader()
		if l < 0 || added.Head().AppliedIndex() < last {
			return false
		}
		f := c.Members[l].Head().Node().Raft().GetConfiguration()
		if f.Error() != nil {
			return false
		}
		for _, s := range f.Configuration().Servers {
			if s.Address == raft.ServerAddress(added.RaftAddr) && s.Suffrage == raft.Voter {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	waitApplied(submit("after"))

	begin := time.Now()
	got := c.Stop()
	stopped = true
	took := time.Since(begin)
	if len(got) != 4 {
		t.Fatalf("Stop returned %d heads, want 4", len(got))
	}
	for _, s := range got {
		if s.Err != nil {
			t.Errorf("head %s: %v", s.Member.ID, s.Err)
		}
	}
	// An RPC to a stopped peer fails at once; waiting on one would take
	// inmemRPCTimeout (10 times that for a leadership transfer).
	if took > inmemRPCTimeout {
		t.Errorf("Stop took %v: a head waited on a stopped peer", took)
	}
}

// An RPC sent to a head just before it stopped, and that its Raft never
// read, is answered with an error as soon as the head is isolated, instead
// of after inmemRPCTimeout.
func TestInmemNetRefusesWhatAStoppedHeadLeftUnread(t *testing.T) {
	n := newInmemNet()
	a := n.attach("inmem-a")
	b := n.attach("inmem-b")
	done := make(chan error, 1)
	go func() { // owned: the test waits for done
		var resp raft.AppendEntriesResponse
		done <- a.AppendEntries("b", "inmem-b", &raft.AppendEntriesRequest{}, &resp)
	}()
	pipe, err := a.AppendEntriesPipeline("b", "inmem-b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pipe.AppendEntries(&raft.AppendEntriesRequest{}, &raft.AppendEntriesResponse{}); err != nil {
		t.Fatal(err)
	}
	// b's Raft never reads: wait until both RPCs sit in its channel.
	if err := WaitUntil(context.Background(), 5*time.Second, "two RPCs queued at b", func() bool { return len(b.Consumer()) == 2 }); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	refuse(n.isolate("inmem-b"))
	if err := within.Recv(t, 10*time.Second, done, "the AppendEntries queued at the stopped head to be answered"); err == nil {
		t.Fatal("AppendEntries to the stopped head succeeded")
	}
	// The pipeline closed with the route (raft drops its futures then);
	// its RPC was answered all the same, with a response it can copy.
	if n := len(b.Consumer()); n != 0 {
		t.Fatalf("%d RPCs left unanswered", n)
	}
	if _, err := pipe.AppendEntries(&raft.AppendEntriesRequest{}, &raft.AppendEntriesResponse{}); !errors.Is(err, raft.ErrPipelineShutdown) {
		t.Fatalf("pipelined AppendEntries after the cut: %v, want raft.ErrPipelineShutdown", err)
	}
	if took := time.Since(begin); took > time.Second {
		t.Fatalf("answered after %v", took)
	}
	var resp raft.RequestVoteResponse
	if err := a.RequestVote("b", "inmem-b", &raft.RequestVoteRequest{}, &resp); err == nil {
		t.Fatal("RequestVote reached the isolated head")
	}
	_ = a.Close()
}

// The in-memory snapshot store shows a snapshot only once its sink is
// closed, drops a cancelled one, and keeps the newest memSnapshotsRetain.
func TestMemSnapshots(t *testing.T) {
	s := newMemSnapshots()
	create := func(index uint64) raft.SnapshotSink {
		t.Helper()
		k, err := s.Create(1, index, 1, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.Write(fmt.Appendf(nil, "snap %d", index)); err != nil {
			t.Fatal(err)
		}
		return k
	}
	list := func() []uint64 {
		t.Helper()
		ms, err := s.List()
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, m := range ms {
			out = append(out, m.Index)
		}
		return out
	}
	k := create(10)
	if got := list(); len(got) != 0 {
		t.Fatalf("an unclosed snapshot is listed: %v", got)
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	if err := create(20).Cancel(); err != nil {
		t.Fatal(err)
	}
	if got := list(); fmt.Sprint(got) != "[10]" {
		t.Fatalf("after a cancel: %v, want [10]", got)
	}
	for _, i := range []uint64{30, 40} {
		if err := create(i).Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got := list(); fmt.Sprint(got) != "[40 30]" {
		t.Fatalf("listed %v, want [40 30]", got)
	}
	ms, _ := s.List()
	m, rc, err := s.Open(ms[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	if string(b) != "snap 40" || m.Size != int64(len(b)) {
		t.Fatalf("opened %q, size %d", b, m.Size)
	}
	if _, _, err := s.Open("nope"); err == nil {
		t.Fatal("opened a missing snapshot")
	}
}
