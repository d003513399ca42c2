package head_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/version"
	"github.com/megaflow/megaflow/internal/wire"
)

// A worker declared down while its stream stays open (it froze past its
// lease and resumed, or only its heartbeats stopped) has the stream ended
// with the reason, and is ALIVE again once it reconnects. Before, the
// leader acked its heartbeats for ever while the table kept it DOWN and
// gave it no work (found by a fault trial: SIGSTOP past the lease, then
// SIGCONT). A raw stream that sends no heartbeat, through a real head.
func TestWorkerDeclaredDownWithAnOpenStreamRejoins(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// connect opens the worker's stream to the current leader and reads
	// its Welcome.
	connect := func() (wire.WorkerService_ConnectClient, *head.Head, error) {
		leader := c.Members[c.WaitLeader(10*time.Second)].Head()
		stream, err := connectWorker(ctx, t, leader.GRPCAddr(), &wire.WorkerHello{WireVersion: version.WireCurrent,
			Info: &wire.WorkerInfo{Id: "frozen", Runtime: "fake", Capacity: &wire.Resources{CpuMillis: 1000, MemoryBytes: 1 << 30}}})
		return stream, leader, err
	}
	// An election on a loaded machine ends the stream too (not leader):
	// the scenario then runs again with the new leader, three times at
	// most.
	var err error
	for try := 1; ; try++ {
		var stream wire.WorkerService_ConnectClient
		testcluster.WaitFor(t, 10*time.Second, "the leader welcomes the worker", func() bool {
			stream, _, err = connect()
			return err == nil
		})
		for err == nil { // no heartbeat: the lease lapses, the worker is declared down
			_, err = stream.Recv()
		}
		if strings.Contains(err.Error(), "declared down") || try == 3 {
			break
		}
		t.Logf("try %d: the stream ended with %v, not for the worker being down (a leader change?); again", try, err)
	}
	if errs.ClassOf(errs.FromStatus(err)) != errs.Unavailable || !strings.Contains(err.Error(), "worker frozen was declared down") {
		t.Fatalf("the silent worker's stream ended with %v; want Unavailable saying it was declared down", err)
	}
	var leader *head.Head
	testcluster.WaitFor(t, 10*time.Second, "the worker reconnected", func() bool {
		_, leader, err = connect()
		return err == nil
	})
	if w := leader.FSM().View().Worker("frozen"); w == nil || !w.Alive() {
		t.Fatalf("after the reconnect the worker row is %+v; want ALIVE", w)
	}
}
