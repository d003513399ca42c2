package head_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/within"
)

// A graph too large for one log entry is committed in several, and no read
// ever sees part of it.
func TestLargeGraphBecomesVisibleWhole(t *testing.T) {
	// 2,000 tasks of about 600 bytes each in entries of at most 64 KiB (the
	// lowest bound) take about as many log entries as 100,000 small tasks
	// in 256 KiB entries, for a fiftieth of the time under -race: the
	// visibility this is about depends on the number of entries, not on
	// the number of tasks.
	const n = 2_000
	pad := strings.Repeat("p", 512)
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) { cfg.MaxEntryBytes = 64 << 10 }})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g := &client.GraphSpec{Id: "big"}
	for i := range n {
		g.Tasks = append(g.Tasks, &client.TaskSpec{Name: fmt.Sprintf("t%06d", i), Image: "busybox", Command: []string{"true", pad}})
	}
	follower := c.Members[(c.WaitLeader(10*time.Second)+1)%3].Head()
	stop := make(chan struct{})
	seen := make(chan error, 1)
	go func() { // a reader on a follower polls while the graph commits
		fc, err := client.Dial(ctx, []string{follower.GRPCAddr()})
		if err != nil {
			seen <- err
			return
		}
		defer fc.Close()
		for {
			select {
			case <-stop:
				seen <- nil
				return
			default:
			}
			gr, _, err := fc.GetGraph(ctx, "big", client.ReadOptions{})
			if errors.Is(err, errs.ErrNotFound) {
				continue
			}
			if err != nil {
				seen <- err
				return
			}
			if gr.TaskCount != uint32(n) || gr.Counts.GetQueued() != uint32(n) {
				seen <- fmt.Errorf("saw graph with %d tasks, counts %v", gr.TaskCount, gr.Counts)
				return
			}
		}
	}()
	before := c.Members[c.WaitLeader(10*time.Second)].Head().Node().Raft().LastIndex()
	res, err := cl.Submit(ctx, g)
	close(stop)
	if err != nil {
		t.Fatal(err)
	}
	if err := within.Recv(t, time.Minute, seen, "the follower's reader to stop"); err != nil {
		t.Fatal(err)
	}
	if entries := res.Index - before; entries < 8 {
		t.Fatalf("graph of %d tasks took %d log entries; want it split into many", n, entries)
	} else {
		t.Logf("graph of %d tasks committed in %d log entries", n, entries)
	}
	gr, _, err := cl.GetGraph(ctx, "big", client.ReadOptions{MinIndex: res.Index})
	if err != nil || gr.TaskCount != uint32(n) {
		t.Fatalf("graph: %v, err %v", gr, err)
	}
	tasks, next, err := cl.ListTasks(ctx, client.TaskFilter{GraphID: "big", PageSize: 500, OmitSpec: true})
	if err != nil || len(tasks) != 500 || next == "" {
		t.Fatalf("first page: %d tasks, next %q, err %v", len(tasks), next, err)
	}
}

// Watch resumes across the loss of the head it streams from, without gaps
// or duplicates.
func TestWatchResumesWithoutGapsOrDuplicates(t *testing.T) {
	t.Parallel() // it waits for a head's loss (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader := c.WaitLeader(10 * time.Second)
	watched := (leader + 1) % 3
	// The watcher lists the watched head first, so it streams from it.
	addrs := []string{c.Members[watched].GRPCAddr, c.Members[leader].GRPCAddr, c.Members[(leader+2)%3].GRPCAddr}
	wc, err := client.Dial(ctx, addrs, client.WithBackoff(20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	sub := c.Client()

	const graphs = 40
	type key struct {
		index uint64
		seq   uint32
	}
	seen := map[key]bool{}
	queued := map[string]int{}
	var last key
	events := wc.Watch(ctx, client.WatchOptions{})
	next, stopIter := iter.Pull2(events)
	defer stopIter()

	for i := range graphs {
		if _, err := sub.Submit(ctx, rolloutGraph(fmt.Sprintf("g%d", i), 1)); err != nil {
			t.Fatal(err)
		}
		if i == graphs/2 {
			c.Kill(watched)
		}
	}
	for len(queued) < graphs {
		ev, err, ok := next()
		if !ok || err != nil {
			t.Fatalf("watch: %v (got %d of %d graphs)", err, len(queued), graphs)
		}
		k := key{ev.Index, ev.Seq}
		if seen[k] {
			t.Fatalf("duplicate event %v", k)
		}
		if k.index < last.index || (k.index == last.index && k.seq <= last.seq) {
			t.Fatalf("event %v out of order after %v", k, last)
		}
		seen[k], last = true, k
		if ev.TaskId != "" && ev.TaskState == client.TaskQueued {
			queued[ev.GraphId]++
		}
	}
	for g, n := range queued {
		if n != 1 {
			t.Fatalf("graph %s: %d queued events, want 1 (its setup task)", g, n)
		}
	}
}

// A head started later joins through gossip and the leader adds it as a
// voter; a head that is gone is removed by an operator.
func TestHeadJoinsLaterAndIsRemoved(t *testing.T) {
	t.Parallel() // it waits for gossip (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.Client()
	h4 := c.AddHead() // no bootstrap-expect: waits to be added
	testcluster.WaitFor(t, 30*time.Second, "h4 to become a voter", func() bool {
		st, err := cl.ClusterStatus(ctx)
		return err == nil && len(st.Heads) == 4
	})
	res, err := cl.Submit(ctx, rolloutGraph("after-join", 1))
	if err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(res.Index, 30*time.Second)

	// A live head cannot be removed.
	if err := cl.RemoveHead(ctx, h4.ID); !errors.Is(err, errs.ErrFailedPrecondition) {
		t.Fatalf("remove live head: %v, want FailedPrecondition", err)
	}
	c.Kill(3)
	testcluster.WaitFor(t, 30*time.Second, "h4 dead in gossip", func() bool {
		return cl.RemoveHead(ctx, h4.ID) == nil
	})
	testcluster.WaitFor(t, 10*time.Second, "every head to see 3 heads", func() bool {
		for _, h := range c.Running() {
			hc, err := client.Dial(ctx, []string{h.GRPCAddr()})
			if err != nil {
				return false
			}
			st, err := hc.ClusterStatus(ctx)
			hc.Close()
			if err != nil || len(st.Heads) != 3 {
				return false
			}
		}
		return true
	})
	if err := cl.RemoveHead(ctx, "nope"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("remove unknown head: %v, want NotFound", err)
	}
}
