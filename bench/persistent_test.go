package bench

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/docker"
	"github.com/megaflow/megaflow/runtime/testimage"
	"github.com/megaflow/megaflow/worker"
)

// BenchmarkPersistentDispatch measures per-task dispatch latency on one
// worker on the real Docker Engine: from the Assignment leaving the head
// to the task's EXITED event arriving back, for a task that runs `true`.
// Ephemeral tasks (a container created, started, waited for and removed
// per task) and persistent tasks (an exec in a warm container of a pool)
// alternate in the same run, one task at a time, so machine drift hits
// both alike; the figure that matters is the ratio persistent/ephemeral
// (target <= 0.2). The head is a minimal in-process WorkerService, so that
// only the worker and the engine are timed. Needs a Docker Engine (skipped
// without one, failed without one when CI is set).
func BenchmarkPersistentDispatch(b *testing.B) {
	_, image := testimage.Require(b)
	n := scaled(40, 5)
	var rows []row
	b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
		hideNsPerOp(b)
		for range b.N {
			eph, per := measureDispatch(b, image, n)
			slices.Sort(eph)
			slices.Sort(per)
			ep50, pp50 := percentile(eph, 50), percentile(per, 50)
			ep99, pp99 := percentile(eph, 99), percentile(per, 99)
			ratio := float64(pp50) / float64(ep50)
			b.ReportMetric(ms(ep50), "ephemeral-p50-ms")
			b.ReportMetric(ms(pp50), "persistent-p50-ms")
			b.ReportMetric(ratio, "ratio-p50")
			setRow(&rows, row{"ephemeral p50 / p99", fmt.Sprintf("%.1f / %.1f ms", ms(ep50), ms(ep99)), "a container per task: create, start, wait (removed after the event)"})
			setRow(&rows, row{"persistent p50 / p99", fmt.Sprintf("%.1f / %.1f ms", ms(pp50), ms(pp99)), "exec in a warm container"})
			setRow(&rows, row{"ratio p50", fmt.Sprintf("%.3fx", ratio), "target <= 0.2x"})
		}
	})
	summary(b, "per-task dispatch latency, one worker, real Docker Engine", &rows)
}

// measureDispatch runs 2 warm-up tasks of each mode, then n of each,
// alternating, and returns the latencies of the measured ones.
func measureDispatch(b *testing.B, image string, n int) (ephemeral, persistent []time.Duration) {
	b.Helper()
	rt, err := docker.New(docker.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	cluster := "mfbench-" + testimage.RunID()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, _ := rt.List(ctx, map[string]string{worker.LabelCluster: cluster})
		for _, c := range cs {
			_ = rt.Remove(ctx, c.ID)
		}
	}()
	h := startBenchHead(b)
	cfg := worker.DefaultConfig()
	cfg.NodeID = "wbench"
	cfg.ClusterName = cluster
	cfg.DataDir = b.TempDir()
	cfg.GossipAddr = "127.0.0.1:0"
	cfg.Heads = []string{h.addr}
	cfg.Runtime = rt
	cfg.Capacity = worker.Capacity{CPUMillis: 4000, MemoryBytes: 8 << 30}
	cfg.Fast = true
	cfg.BatchDelay = 0
	cfg.PoolMax = 1
	w, err := worker.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
		<-done
	}()

	run := func(id string, mode wire.ExecutionMode) time.Duration {
		spec := &wire.TaskSpec{Name: "t", Image: image, Command: []string{"true"}, Mode: mode}
		start := time.Now()
		h.out <- &wire.HeadMessage{Msg: &wire.HeadMessage_Assign{Assign: &wire.Assignment{
			TaskId: id, Attempt: 1, LeaderTerm: 1, GraphId: "g", Tenant: "default", Spec: spec,
		}}}
		timeout := time.After(2 * time.Minute)
		for {
			select {
			case e := <-h.events:
				if e.GetTaskId() != id || e.GetKind() == wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STARTED {
					continue
				}
				if e.GetKind() != wire.AttemptEventKind_ATTEMPT_EVENT_KIND_EXITED || e.GetExitCode() != 0 {
					b.Fatalf("%s: %v", id, e)
				}
				return time.Since(start)
			case <-timeout:
				b.Fatalf("%s: no final event within 2 minutes", id)
			}
		}
	}
	for i := range n + 2 {
		e := run(fmt.Sprintf("g/e%d", i), wire.ExecutionMode_EXECUTION_MODE_EPHEMERAL)
		p := run(fmt.Sprintf("g/p%d", i), wire.ExecutionMode_EXECUTION_MODE_PERSISTENT)
		if i >= 2 {
			ephemeral = append(ephemeral, e)
			persistent = append(persistent, p)
		}
	}
	return ephemeral, persistent
}

// benchHead is the head side of one worker's stream: it welcomes the
// worker, sends what is put on out, acks every event batch and passes the
// events on.
type benchHead struct {
	wire.UnimplementedWorkerServiceServer
	addr   string
	out    chan *wire.HeadMessage
	events chan *wire.AttemptEvent
}

func startBenchHead(b *testing.B) *benchHead {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	h := &benchHead{addr: lis.Addr().String(), out: make(chan *wire.HeadMessage, 16), events: make(chan *wire.AttemptEvent, 1024)}
	srv := grpc.NewServer()
	wire.RegisterWorkerServiceServer(srv, h)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	b.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return h
}

// Connect serves the worker's stream until it ends.
func (h *benchHead) Connect(stream grpc.BidiStreamingServer[wire.WorkerMessage, wire.HeadMessage]) error {
	if _, err := stream.Recv(); err != nil { // the Hello
		return err
	}
	if err := stream.Send(&wire.HeadMessage{Msg: &wire.HeadMessage_Welcome{Welcome: &wire.Welcome{LeaderId: "h", Term: 1}}}); err != nil {
		return err
	}
	ctx := stream.Context()
	acks := make(chan uint64, 1024)
	recvErr := make(chan error, 1)
	go func() { // ends when the stream does
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if batch := m.GetEvents(); batch != nil {
				for _, e := range batch.GetEvents() {
					h.events <- e
				}
				acks <- batch.GetSeq()
			}
		}
	}()
	for {
		var m *wire.HeadMessage
		select {
		case m = <-h.out:
		case seq := <-acks:
			m = &wire.HeadMessage{Msg: &wire.HeadMessage_Ack{Ack: &wire.Ack{Seq: seq}}}
		case err := <-recvErr:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := stream.Send(m); err != nil {
			return err
		}
	}
}
