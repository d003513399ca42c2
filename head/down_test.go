package head_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader := c.Members[c.WaitLeader(10*time.Second)].Head()
	connect := func() (wire.WorkerService_ConnectClient, error) {
		stream, err := wire.NewWorkerServiceClient(dial(t, leader.GRPCAddr())).Connect(ctx)
		if err != nil {
			return nil, err
		}
		if err := stream.Send(&wire.WorkerMessage{Msg: &wire.WorkerMessage_Hello{Hello: &wire.WorkerHello{WireVersion: version.WireCurrent,
			Info: &wire.WorkerInfo{Id: "frozen", Runtime: "fake", Capacity: &wire.Resources{CpuMillis: 1000, MemoryBytes: 1 << 30}}}}}); err != nil {
			return nil, err
		}
		if _, err := stream.Recv(); err != nil { // the Welcome
			return nil, err
		}
		return stream, nil
	}
	var stream wire.WorkerService_ConnectClient
	testcluster.WaitFor(t, 10*time.Second, "the leader welcomes the worker", func() bool {
		var err error
		stream, err = connect()
		return err == nil
	})
	var err error
	for err == nil { // no heartbeat: the lease lapses, the worker is declared down
		_, err = stream.Recv()
	}
	if errs.ClassOf(errs.FromStatus(err)) != errs.Unavailable || !strings.Contains(err.Error(), "worker frozen was declared down") {
		t.Fatalf("the silent worker's stream ended with %v; want Unavailable saying it was declared down", err)
	}
	if w := leader.FSM().View().Worker("frozen"); w == nil || w.Status != wire.WorkerStatus_WORKER_STATUS_DOWN {
		t.Fatalf("worker row %+v; want DOWN", w)
	}
	if _, err := connect(); err != nil {
		t.Fatalf("reconnecting: %v", err)
	}
	if w := leader.FSM().View().Worker("frozen"); w == nil || !w.Alive() {
		t.Fatalf("after the reconnect the worker row is %+v; want ALIVE", w)
	}
}
