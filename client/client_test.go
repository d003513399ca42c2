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

func graph(id string, n int) *client.GraphSpec {
	g := &client.GraphSpec{Id: id}
	for i := range n {
		g.Tasks = append(g.Tasks, &client.TaskSpec{Name: fmt.Sprintf("t%d", i), Image: "busybox", Command: []string{"true"}})
	}
	return g
}

func TestDialNeedsAHead(t *testing.T) {
	t.Setenv(client.EnvHeads, "")
	if _, err := client.Dial(context.Background(), nil); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("err %v, want InvalidArgument", err)
	}
}

func TestSubmitRefusesBadGraphLocally(t *testing.T) {
	c, err := client.Dial(context.Background(), []string{"127.0.0.1:1"}) // nothing listens: nothing is sent
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := graph("g", 2)
	g.Tasks[1].DependsOn = []string{"t9"}
	_, err = c.Submit(context.Background(), g)
	if !errors.Is(err, errs.ErrInvalidArgument) || g.Tasks[1].DependsOn[0] != "t9" {
		t.Fatalf("err %v, want InvalidArgument and the spec untouched", err)
	}
}

// Wait returns the graph's aggregate when it ends, also when the leader
// changes while it waits.
func TestWaitThroughLeaderChange(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.Submit(ctx, graph("g1", 5)); err != nil {
		t.Fatal(err)
	}
	done := make(chan *client.Graph, 1)
	errc := make(chan error, 1)
	go func() {
		g, err := cl.Wait(ctx, "g1")
		errc <- err
		done <- g
	}()
	c.Kill(c.WaitLeader(10 * time.Second))
	c.WaitLeader(30 * time.Second)
	n, err := cl.CancelGraph(ctx, "g1", "test over")
	if err != nil || n != 5 {
		t.Fatalf("cancel: %d tasks, err %v", n, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	g := <-done
	if g.State != client.GraphCancelled || g.Counts.GetCancelled() != 5 {
		t.Fatalf("wait returned %v", g)
	}
	// Cancelling again is no error and cancels nothing.
	if n, err := cl.CancelGraph(ctx, "g1", ""); err != nil || n != 0 {
		t.Fatalf("second cancel: %d, %v", n, err)
	}
	if _, err := cl.CancelGraph(ctx, "nope", ""); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("cancel unknown graph: %v, want NotFound", err)
	}
}

// A client reads its own writes from any head, and pages through tasks.
func TestReadYourWritesAndPaging(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, addr := range c.GRPCAddrs() {
		cl, err := client.Dial(ctx, []string{addr})
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("g%d", i)
		if _, err := cl.Submit(ctx, graph(id, 250)); err != nil {
			t.Fatal(err)
		}
		// Straight after the write, a read from this same head sees it.
		var all []*client.Task
		token := ""
		for {
			page, next, err := cl.ListTasks(ctx, client.TaskFilter{GraphID: id, PageSize: 100, PageToken: token, OmitSpec: true})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, page...)
			if next == "" {
				break
			}
			token = next
		}
		if len(all) != 250 || all[0].Spec != nil {
			t.Fatalf("head %s: listed %d tasks (spec omitted: %v), want 250", addr, len(all), all[0].Spec == nil)
		}
		seen := map[string]bool{}
		for _, task := range all {
			if seen[task.Id] {
				t.Fatalf("task %s listed twice", task.Id)
			}
			seen[task.Id] = true
		}
		cl.Close()
	}
}

// A fresh client (a new CLI run) dialled to a follower knows no session
// index, so its reads there may miss a write another client made;
// SyncSession raises its index to the leader's, past that write.
func TestSyncSessionCoversOtherClientsWrites(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader := c.WaitLeader(30 * time.Second)
	writer, err := client.Dial(ctx, []string{c.GRPCAddrs()[leader]})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	res, err := writer.Submit(ctx, graph("written-elsewhere", 3))
	if err != nil {
		t.Fatal(err)
	}
	follower := c.GRPCAddrs()[(leader+1)%len(c.GRPCAddrs())]
	reader, err := client.Dial(ctx, []string{follower})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if got := client.SessionIndex(reader); got != 0 {
		t.Fatalf("a fresh client's session index is %d; want 0", got)
	}
	if err := reader.SyncSession(ctx); err != nil {
		t.Fatal(err)
	}
	if got := client.SessionIndex(reader); got < res.Index {
		t.Fatalf("after SyncSession the session index is %d; want at least the other client's write, %d", got, res.Index)
	}
	// And a read through the follower now waits for that write.
	g, meta, err := reader.GetGraph(ctx, "written-elsewhere", client.ReadOptions{})
	if err != nil || g.TaskCount != 3 || meta.HeadId == "" {
		t.Fatalf("GetGraph through the follower: %v, %v, %v", g, meta, err)
	}
}
