package head_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
)

// A tenant hammering SubmitGraph on one head gets ResourceExhausted with a
// retry-after once its burst is spent; another tenant on the same head is
// unaffected; the client library waits and gets through.
func TestRateLimitPerTenant(t *testing.T) {
	t.Parallel() // it waits out a retry-after of seconds (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) {
		// One call per 5 s after a burst of 5: a limited tenant stays
		// limited for seconds, however slow the machine.
		cfg.RateLimit, cfg.RateBurst = 0.2, 5
	}})
	// The leader's address: the raw calls below are not retried, and a
	// follower that has not heard from the new leader yet refuses them.
	addr := c.GRPCAddrs()[c.WaitLeader(30*time.Second)]
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := wire.NewMegaflowServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	submit := func(tenant string, i int) error {
		g := flatGraph(fmt.Sprintf("%s-%d", tenant, i), 1)
		g.Tenant = tenant
		_, err := api.SubmitGraph(ctx, &wire.SubmitGraphRequest{Graph: g})
		return errs.FromStatus(err)
	}
	var limited *errs.Error
	for i := range 20 {
		err := submit("team-a", i)
		if err == nil {
			continue
		}
		if !errors.As(err, &limited) || limited.Class != errs.ResourceExhausted {
			t.Fatalf("submit %d: %v, want ResourceExhausted", i, err)
		}
		break
	}
	if limited == nil {
		t.Fatal("20 submissions at once were all accepted at 0.2/s with a burst of 5")
	}
	if limited.RetryAfter <= 0 || limited.RetryAfter > 5*time.Second {
		t.Fatalf("retry-after %v, want in (0, 5s]", limited.RetryAfter)
	}
	// A call without a tenant in its request is charged by metadata.
	mctx := metadata.AppendToOutgoingContext(ctx, head.TenantMetadataKey, "team-a")
	if _, err := api.GetGraph(mctx, &wire.GetGraphRequest{GraphId: "team-a-0"}); errs.ClassOf(errs.FromStatus(err)) != errs.ResourceExhausted {
		t.Fatalf("team-a read while limited: %v", err)
	}
	for i := range 5 {
		if err := submit("team-b", i); err != nil {
			t.Fatalf("team-b submit %d while team-a is limited: %v", i, err)
		}
	}
	// The client library waits out the retry-after.
	cl, err := client.Dial(ctx, []string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	g := flatGraph("team-a-late", 1)
	g.Tenant = "team-a"
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatalf("client submit through the limit: %v", err)
	}
	l, err := cl.GetLimits(ctx, client.ReadOptions{})
	if err != nil || l.RateLimit != 0.2 || l.RateBurst != 5 {
		t.Fatalf("limits %v %v", l, err)
	}
}
