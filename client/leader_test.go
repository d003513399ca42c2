package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/testcluster"
)

// Submit carries on through a leader kill: the client follows the new
// leader, and a resubmission of the same id returns the same graph.
// Watch, started before the kill, yields every event of the graphs once,
// in order, across the reconnect. A bad graph and a graph that reuses an
// id with another spec are refused and change nothing.
func TestSubmitAndWatchThroughLeaderChange(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Watch from the start in the background; it must see every graph's
	// creation event exactly once, with increasing cursors.
	type seen struct {
		created map[string]int
		err     error
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watched := make(chan seen, 1)
	go func() {
		s := seen{created: map[string]int{}}
		var last client.Cursor
		for ev, err := range cl.Watch(wctx, client.WatchOptions{}) {
			if err != nil {
				if wctx.Err() == nil {
					s.err = err
				}
				break
			}
			if ev.Index < last.Index || ev.Index == last.Index && ev.Seq <= last.Seq {
				s.err = fmt.Errorf("event %d.%d after %d.%d: out of order or repeated", ev.Index, ev.Seq, last.Index, last.Seq)
				break
			}
			last = client.Cursor{Index: ev.Index, Seq: ev.Seq}
			if ev.TaskId == "" && ev.GraphState == client.GraphRunning {
				s.created[ev.GraphId]++
				if len(s.created) == 10 {
					break
				}
			}
		}
		watched <- s
	}()

	first, err := cl.Submit(ctx, graph("g0", 3))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 5; i++ {
		if _, err := cl.Submit(ctx, graph(fmt.Sprintf("g%d", i), 3)); err != nil {
			t.Fatal(err)
		}
	}
	c.Kill(c.WaitLeader(10 * time.Second))
	// No wait for the new leader: Submit retries until one answers.
	for i := 5; i < 10; i++ {
		if _, err := cl.Submit(ctx, graph(fmt.Sprintf("g%d", i), 3)); err != nil {
			t.Fatalf("submit g%d after the leader's kill: %v", i, err)
		}
	}
	again, err := cl.Submit(ctx, graph("g0", 3))
	if err != nil || !again.Existed || again.GraphId != "g0" {
		t.Fatalf("resubmit g0: %v, err %v; want the existing graph", again, err)
	}
	g, _, err := cl.GetGraph(ctx, "g0", client.ReadOptions{})
	if err != nil || g.CreateIndex != first.Index || g.TaskCount != 3 {
		t.Fatalf("g0 after resubmission: %v, err %v; want the graph created at index %d", g, err, first.Index)
	}

	s := <-watched
	if s.err != nil {
		t.Fatalf("watch: %v", s.err)
	}
	for i := range 10 {
		if n := s.created[fmt.Sprintf("g%d", i)]; n != 1 {
			t.Errorf("watch saw g%d created %d times, want 1", i, n)
		}
	}

	// Refused submissions change nothing.
	before, _, err := cl.ListGraphs(ctx, client.GraphFilter{})
	if err != nil {
		t.Fatal(err)
	}
	other := graph("g1", 4) // same id, another spec
	if _, err := cl.Submit(ctx, other); !errors.Is(err, errs.ErrAlreadyExists) {
		t.Fatalf("resubmit g1 with another spec: %v, want AlreadyExists", err)
	}
	cyclic := graph("cyclic", 2)
	cyclic.Tasks[0].DependsOn, cyclic.Tasks[1].DependsOn = []string{"t1"}, []string{"t0"}
	if _, err := cl.Submit(ctx, cyclic); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("cyclic graph: %v, want InvalidArgument", err)
	}
	if _, err := client.ParseGraphYAML("bad.yaml", []byte("id: bad\ntasks: [{name: a, image: x, command: [\"true\"], depends_on: [b]}]\n")); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("bad yaml: %v, want InvalidArgument", err)
	}
	after, _, err := cl.ListGraphs(ctx, client.GraphFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("refused submissions changed the graphs: %d before, %d after", len(before), len(after))
	}
	if g, _, _ := cl.GetGraph(ctx, "g1", client.ReadOptions{}); g.TaskCount != 3 {
		t.Fatalf("g1 changed by a refused resubmission: %v", g)
	}
}
