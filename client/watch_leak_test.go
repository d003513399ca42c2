package client_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/wire"
)

// watchHead serves a graph that is RUNNING at index 1 and whose Watch
// says it SUCCEEDED at index 2, then keeps the stream open (as a head
// does) until the client ends it, counting the streams open.
type watchHead struct {
	wire.UnimplementedMegaflowServiceServer
	reads atomic.Int32
	open  atomic.Int32
}

func (f *watchHead) GetGraph(context.Context, *wire.GetGraphRequest) (*wire.GetGraphResponse, error) {
	state := wire.GraphState_GRAPH_STATE_RUNNING
	if f.reads.Add(1)%2 == 0 { // the read after the event
		state = wire.GraphState_GRAPH_STATE_SUCCEEDED
	}
	return &wire.GetGraphResponse{Graph: &wire.Graph{Id: "g", State: state}, Meta: &wire.ReadMeta{Index: 1}}, nil
}

func (f *watchHead) Watch(req *wire.WatchRequest, stream wire.MegaflowService_WatchServer) error {
	f.open.Add(1)
	defer f.open.Add(-1)
	if err := stream.Send(&wire.WatchResponse{AppliedIndex: 2, Events: []*wire.Event{
		{Index: 2, GraphId: req.GetGraphId(), GraphState: wire.GraphState_GRAPH_STATE_SUCCEEDED}}}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// Wait ends the Watch stream it opened once the graph ended: the head's
// stream closes, though the caller's context lives on. Before, every Wait
// left its stream open in the head until the caller's context ended (the
// soak's clients, with one context for the hour, left one stream per
// graph, 11,834, on the two heads they read from, each woken by every
// change).
func TestWaitEndsItsWatchStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := &watchHead{}
	c, err := client.Dial(ctx, []string{serveFake(t, f)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 5 {
		g, err := c.Wait(ctx, "g")
		if err != nil || g.GetState() != wire.GraphState_GRAPH_STATE_SUCCEEDED {
			t.Fatalf("Wait %d: %v, %v", i, g, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.open.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d Watch streams still open in the head after 5 Waits returned (the caller's context still lives)", f.open.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
