package testcluster_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/events"
	dockerclient "github.com/moby/moby/client"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/within"
	"github.com/megaflow/megaflow/worker"
)

// A 200-task graph on two workers cancelled 20 ms, then (another graph)
// 300 ms after it was accepted: every task ends CANCELLED, every container
// is gone, and no container is started by a start request sent after its
// worker received the stop. The engine's events are watched: a container
// created after its worker had the stop (its first kill, stop, die or
// destroy of the graph's containers; not the cancel's return, which is
// earlier by the stop's trip to the worker) must never start. One created before
// may still start after it: Docker 20.10 finishes a start request whose
// client went away (the worker stops it at once), and such a request was
// sent before the stop arrived (issue 18, finding 14; the worker's side is
// TestStopHandedOverCancelsAStartUnderWay).
func TestDockerCancelRightAfterSubmitStartsNothingLate(t *testing.T) {
	c, cli, image, cluster := dockerCluster(t, 2, nil)
	for i, delay := range []time.Duration{20 * time.Millisecond, 300 * time.Millisecond} {
		cancelAfterSubmit(t, c, cli, image, cluster, fmt.Sprintf("cancel-early-%d", i), delay)
	}
}

func cancelAfterSubmit(t *testing.T, c *testcluster.Cluster, cli *dockerclient.Client, image, cluster, id string, cancelDelay time.Duration) {
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var mu sync.Mutex
	var evs []events.Message
	evctx, evcancel := context.WithCancel(ctx)
	defer evcancel()
	res := cli.Events(evctx, dockerclient.EventsListOptions{Filters: make(dockerclient.Filters).
		Add("type", "container").Add("label", worker.LabelCluster+"="+cluster)})
	evDone := make(chan struct{})
	go func() {
		defer close(evDone)
		for {
			select {
			case m := <-res.Messages:
				mu.Lock()
				evs = append(evs, m)
				mu.Unlock()
			case <-res.Err:
				return
			}
		}
	}()

	g := &client.GraphSpec{Id: id}
	for i := range 200 {
		g.Tasks = append(g.Tasks, shTask(fmt.Sprintf("t%03d", i), image, "sleep 30"))
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	<-time.After(cancelDelay) // the scenario: a cancel 20 ms after the graph appeared
	if _, err := cl.CancelGraph(ctx, id, "changed my mind"); err != nil {
		t.Fatal(err)
	}
	returned := time.Now()
	gr, err := cl.Wait(ctx, id)
	if err != nil || gr.State != client.GraphCancelled || gr.Counts.GetCancelled() != 200 {
		t.Fatalf("graph after the cancel: %v, %v; want 200 CANCELLED", gr, err)
	}
	// The graph is CANCELLED once the cancel commits; the workers may
	// still be creating containers for it. Every attempt of it left the
	// workers only once its start returned (its container removed), so
	// no container of it can appear after this wait.
	testcluster.WaitFor(t, 60*time.Second, "no attempt of the graph on the workers, every container removed", func() bool {
		for _, w := range c.Workers() {
			for _, a := range w.Worker().Attempts() {
				if strings.HasPrefix(a.Key.TaskID, id+"/") {
					return false
				}
			}
		}
		return len(containers(t, cli, cluster)) == 0
	})
	evcancel()
	within.Recv(t, 30*time.Second, evDone, "the Docker events reader to end")

	mu.Lock()
	defer mu.Unlock()
	// When each worker had the stop at the latest: its first kill, stop,
	// die or destroy of a container of the graph (it stops them only once
	// it received the stop). The cancel's return is earlier than that by
	// the stop's trip to the worker, which a loaded machine makes long: a
	// container created after the return but before the worker had the
	// stop was asked for in time.
	// Only this graph's containers count: a container of an earlier graph
	// removed meanwhile says nothing about when this graph's stop came.
	var ours []events.Message
	for _, m := range evs {
		if m.Actor.Attributes[worker.LabelGraph] == id {
			ours = append(ours, m)
		}
	}
	stopSeen := map[string]time.Time{}
	for _, m := range ours {
		switch m.Action {
		case events.ActionKill, events.ActionStop, events.ActionDie, events.ActionDestroy:
			w, at := m.Actor.Attributes[worker.LabelWorker], time.Unix(0, m.TimeNano)
			if first, ok := stopSeen[w]; !ok || at.Before(first) {
				stopSeen[w] = at
			}
		}
	}
	created := map[string]time.Time{}
	late, starts := 0, 0
	for _, m := range ours {
		at := time.Unix(0, m.TimeNano)
		switch m.Action {
		case events.ActionCreate:
			created[m.Actor.ID] = at
		case events.ActionStart:
			starts++
			if !at.After(returned) {
				continue
			}
			late++
			made, ok := created[m.Actor.ID]
			w := m.Actor.Attributes[worker.LabelWorker]
			t.Logf("%s on %s started %v after the cancel returned (created %v after; the worker had the stop %v after)", m.Actor.Attributes[worker.LabelTask], w,
				at.Sub(returned).Round(time.Millisecond), made.Sub(returned).Round(time.Millisecond), stopSeen[w].Sub(returned).Round(time.Millisecond))
			if seen, had := stopSeen[w]; !ok || (had && made.After(seen)) {
				t.Errorf("container of %s was created after its worker %s had the stop and then started", m.Actor.Attributes[worker.LabelTask], w)
			}
		}
	}
	t.Logf("cancel after %v: %d containers created, %d started, %d of them after the cancel returned", cancelDelay, len(created), starts, late)
}
