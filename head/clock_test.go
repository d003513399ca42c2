package head_test

import (
	"context"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/testcluster"
)

// The heads run on Config.Clock: the leader stamps the submission with the
// clock's time, and a graph deadline passes when the clock says so, not
// when an hour of real time has.
func TestGraphDeadlineOnTheHeadsClock(t *testing.T) {
	t.Parallel() // it waits for its cluster (see internal/testcluster)
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clock.NewFake(start)
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) {
		cfg.Clock = clk
		cfg.MaxQueueWait = 0 // the queued tasks (no worker) are not failed
	}})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := flatGraph("g", 2)
	g.DeadlineSeconds = 3600
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	gr, _, err := cl.GetGraph(ctx, "g", client.ReadOptions{RequireLeader: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Unix(0, gr.CreateUnixNanos); !got.Equal(start) {
		t.Fatalf("graph created at %v; want the heads' clock's %v", got.UTC(), start)
	}
	if gr.State != client.GraphRunning {
		t.Fatalf("graph %s before its deadline; want RUNNING", gr.State)
	}
	clk.Advance(time.Hour + time.Second)
	gr = waitGraph(ctx, t, cl, "g")
	if gr.State != client.GraphCancelled || gr.Reason != "graph deadline of 3600 s passed" {
		t.Fatalf("graph %s (%q); want CANCELLED by its deadline", gr.State, gr.Reason)
	}
	if got, want := time.Unix(0, gr.FinishUnixNanos), start.Add(time.Hour+time.Second); !got.Equal(want) {
		t.Fatalf("graph finished at %v; want the heads' clock's %v", got.UTC(), want)
	}
}
