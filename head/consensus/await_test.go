package consensus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// neverFuture is a Raft future that is never answered, as an Apply or a
// Barrier enqueued into a buffered apply channel as Raft stops is not.
type neverFuture struct{ block chan struct{} }

func (f neverFuture) Error() error  { <-f.block; return nil }
func (f neverFuture) Index() uint64 { return 0 }

// Await returns once the node is killed or shut down, or its context ends,
// even for a future Raft never answers (a leader's Barrier hung a head's
// Kill for 13 minutes that way); an answered future gives its own error.
func TestAwaitEndsWithTheNode(t *testing.T) {
	for _, stop := range []string{"kill", "shutdown"} {
		t.Run(stop, func(t *testing.T) {
			c := newCluster(t, 1, nil)
			nd := c.nodes[0]
			f := neverFuture{block: make(chan struct{})}
			defer close(f.block)
			done := make(chan error, 1)
			go func() { done <- nd.Await(context.Background(), f) }()
			if stop == "kill" {
				_ = nd.Kill()
			} else {
				_ = shutdown(nd)
			}
			c.nodes[0] = nil
			select {
			case err := <-done:
				if !errors.Is(err, raft.ErrRaftShutdown) {
					t.Fatalf("Await after %s: %v, want raft.ErrRaftShutdown", stop, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("Await still waiting 10 s after %s", stop)
			}
		})
	}
	t.Run("context", func(t *testing.T) {
		c := newCluster(t, 1, nil)
		f := neverFuture{block: make(chan struct{})}
		defer close(f.block)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := c.nodes[0].Await(ctx, f); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Await with an ended context: %v, want context.DeadlineExceeded", err)
		}
	})
}
