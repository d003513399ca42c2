package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// fakeHead answers GetGraph with answer(call number), counting calls.
type fakeHead struct {
	wire.UnimplementedMegaflowServiceServer
	calls  atomic.Int32
	answer func(n int32) (*wire.GetGraphResponse, error)
}

func (f *fakeHead) GetGraph(context.Context, *wire.GetGraphRequest) (*wire.GetGraphResponse, error) {
	return f.answer(f.calls.Add(1))
}

// serveFake serves f on a loopback port until the test ends and returns
// its address.
func serveFake(t *testing.T, f wire.MegaflowServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	wire.RegisterMegaflowServiceServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// Errors a retry cannot fix come back at once, not after the call's
// context (30 s, the CLI's --timeout) ends: an answer larger than the
// client's receive limit, and head addresses that do not resolve. A rate
// limit (ResourceExhausted with a RetryAfter) is still retried. Before,
// the first two waited out the context.
func TestClientFailsAtOnceOnWhatARetryCannotFix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	big := &fakeHead{answer: func(int32) (*wire.GetGraphResponse, error) {
		return &wire.GetGraphResponse{Graph: &wire.Graph{Reason: strings.Repeat("r", 5<<20)}}, nil
	}}
	c, err := client.Dial(ctx, []string{serveFake(t, big)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, _, err = c.GetGraph(ctx, "g", client.ReadOptions{})
	if !errors.Is(err, errs.ErrResourceExhausted) || time.Since(start) > 5*time.Second || big.calls.Load() != 1 {
		t.Fatalf("answer over the receive limit: err %v after %v and %d calls; want ResourceExhausted at once, 1 call",
			err, time.Since(start), big.calls.Load())
	}

	limited := &fakeHead{answer: func(n int32) (*wire.GetGraphResponse, error) {
		if n == 1 {
			return nil, errs.ToStatus(&errs.Error{Class: errs.ResourceExhausted, RetryAfter: 10 * time.Millisecond, Message: "over the rate"})
		}
		return &wire.GetGraphResponse{Graph: &wire.Graph{Id: "g"}}, nil
	}}
	c2, err := client.Dial(ctx, []string{serveFake(t, limited)})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if g, _, err := c2.GetGraph(ctx, "g", client.ReadOptions{}); err != nil || g.GetId() != "g" || limited.calls.Load() != 2 {
		t.Fatalf("rate limited once: %v, %d calls; want the retry to succeed", err, limited.calls.Load())
	}

	// Needs a DNS server that answers "no such host" (NXDOMAIN).
	var de *net.DNSError
	if _, err := net.DefaultResolver.LookupHost(ctx, "no-such-head.invalid"); !errors.As(err, &de) || !de.IsNotFound {
		t.Fatalf("this machine's resolver does not answer \"no such host\" for no-such-head.invalid (%v): the check of unresolvable heads cannot run", err)
	}
	start = time.Now()
	_, err = client.Dial(ctx, []string{"no-such-head.invalid:7070", "nor-this.invalid:7070"})
	if !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), "no-such-head.invalid:7070") || time.Since(start) > 5*time.Second {
		t.Fatalf("unresolvable heads: err %v after %v; want InvalidArgument naming the address at once", err, time.Since(start))
	}
	// One address that resolves is enough to go on.
	c3, err := client.Dial(ctx, []string{"no-such-head.invalid:7070", "127.0.0.1:1"})
	if err != nil {
		t.Fatalf("one unresolvable head of two: %v", err)
	}
	c3.Close()
}
