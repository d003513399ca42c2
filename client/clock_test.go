package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// t0 is where the fake clocks of these tests start.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// waitFor polls cond until it holds or timeout passes (then fails the test).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// The backoff between retries runs on the client's clock (WithClock): a
// call that a head answered Unavailable waits on the fake clock, a backoff
// of an hour that only advancing the clock ends. Had the client slept on
// the system clock, no timer would be armed on the fake one and the retry
// would come an hour later: the test fails on its deadline either way.
func TestRetryBackoffWaitsOnTheClientsClock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	head := &fakeHead{answer: func(n int32) (*wire.GetGraphResponse, error) {
		if n == 1 {
			return nil, errs.ToStatus(&errs.Error{Class: errs.Unavailable, Message: "no leader yet"})
		}
		return &wire.GetGraphResponse{Graph: &wire.Graph{Id: "g"}}, nil
	}}
	clk := clock.NewFake(t0)
	c, err := client.Dial(ctx, []string{serveFake(t, head)}, client.WithClock(clk), client.WithBackoff(time.Hour, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	type result struct {
		g   *client.Graph
		err error
	}
	done := make(chan result, 1)
	go func() {
		g, _, err := c.GetGraph(ctx, "g", client.ReadOptions{})
		done <- result{g, err}
	}()

	waitFor(t, 10*time.Second, "the retry's timer on the fake clock", func() bool { return clk.Waiters() == 1 })
	if at, _ := clk.Next(); at.Before(t0.Add(30*time.Minute)) || !at.Before(t0.Add(time.Hour)) {
		t.Errorf("retry due at %v, want the jittered backoff in [t0+30m, t0+1h)", at.Sub(t0))
	}
	select {
	case r := <-done:
		t.Fatalf("GetGraph returned before the clock moved: %v, %v", r.g, r.err)
	default:
	}
	if n := head.calls.Load(); n != 1 {
		t.Fatalf("%d calls before the clock moved, want 1", n)
	}

	clk.Advance(time.Hour)
	select {
	case r := <-done:
		if r.err != nil || r.g.GetId() != "g" {
			t.Fatalf("after the backoff: %v, %v; want graph g", r.g, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("GetGraph did not retry within 10 s of the fake clock passing its backoff")
	}
	if n := head.calls.Load(); n != 2 {
		t.Errorf("%d calls, want 2", n)
	}
	if clk.Waiters() != 0 {
		t.Errorf("%d timers left armed on the fake clock, want 0", clk.Waiters())
	}
}

// submitHead records the graphs submitted to it.
type submitHead struct {
	wire.UnimplementedMegaflowServiceServer
	mu  sync.Mutex
	ids []string
}

func (s *submitHead) SubmitGraph(_ context.Context, req *wire.SubmitGraphRequest) (*wire.SubmitGraphResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = append(s.ids, req.GetGraph().GetId())
	return &wire.SubmitGraphResponse{}, nil
}

// Submit stamps the id it generates with the client's clock: its time part
// (the prefix and the first 10 characters of the ULID, 48 bits of
// milliseconds) is the fake clock's, not the system's.
func TestSubmitStampsGeneratedIDWithTheClientsClock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	head := &submitHead{}
	clk := clock.NewFake(time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC))
	c, err := client.Dial(ctx, []string{serveFake(t, head)}, client.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Submit(ctx, graph("", 1)); err != nil {
		t.Fatal(err)
	}
	const timePart = len(spec.GraphIDPrefix) + 10
	want := spec.NewGraphID(clk.Now(), nil)[:timePart]
	head.mu.Lock()
	defer head.mu.Unlock()
	if len(head.ids) != 1 || len(head.ids[0]) < timePart || head.ids[0][:timePart] != want {
		t.Fatalf("submitted ids %q, want one starting %q (the fake clock's time)", head.ids, want)
	}
}
