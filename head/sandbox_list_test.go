package head_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
)

// ListSandboxes waits until the head applied the caller's min_index, as
// GetSandbox does, so that a follower never answers with a table older
// than the caller's own write (`megaflow sandbox pause` then `megaflow
// sandbox ls` showed READY in CI: the ls was answered by a follower one
// entry behind). Asked for an index far ahead, every head waits until the
// caller's deadline instead of answering at once.
func TestListSandboxesWaitsForMinIndex(t *testing.T) {
	t.Parallel() // it waits for its cluster (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	c.WaitLeader(30 * time.Second)
	for _, addr := range c.GRPCAddrs() {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := wire.NewSandboxServiceClient(dial(t, addr)).ListSandboxes(ctx, &wire.ListSandboxesRequest{MinIndex: 1 << 40})
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("ListSandboxes at min_index 2^40 on %s: %v; want DeadlineExceeded (it must wait for the index)", addr, err)
		}
	}
}
