package head_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/version"
	"github.com/megaflow/megaflow/internal/wire"
)

// Requests with a field over its bound, through a real head's raw API
// (leader and follower): InvalidArgument naming the field and the bound,
// and the table does not change. The same fields at their bound are
// accepted. Before the bounds, the 1 MB cancel reason was stored in each
// of the 30 tasks and every later listing failed with "received message
// larger than max".
func TestOverBoundRequestsAreRefusedAndChangeNothing(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leaderIdx := c.WaitLeader(10 * time.Second)
	leader := c.Members[leaderIdx].Head()
	follower := c.Members[(leaderIdx+1)%3].Head()
	g := &wire.GraphSpec{Id: "thirty"}
	for i := range 30 {
		// An image no worker has: the tasks stay QUEUED.
		g.Tasks = append(g.Tasks, &wire.TaskSpec{Name: fmt.Sprintf("t%d", i), Image: "img", Command: []string{"true"}})
	}
	lc := wire.NewMegaflowServiceClient(dial(t, leader.GRPCAddr()))
	if _, err := lc.SubmitGraph(ctx, &wire.SubmitGraphRequest{Graph: g}); err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(leader.AppliedIndex(), 10*time.Second)

	refused := []struct {
		name string
		call func(wire.MegaflowServiceClient) error
		want string
	}{
		{"1 MB cancel reason", func(s wire.MegaflowServiceClient) error {
			_, err := s.CancelGraph(ctx, &wire.CancelGraphRequest{GraphId: "thirty", Reason: strings.Repeat("r", 1<<20)})
			return err
		}, "CancelGraphRequest.reason is 1048576 bytes; the limit is 4096 bytes"},
		{"task cancel reason over the bound", func(s wire.MegaflowServiceClient) error {
			_, err := s.CancelTask(ctx, &wire.CancelTaskRequest{TaskId: "thirty/t1", Reason: strings.Repeat("r", spec.MaxReasonBytes+1)})
			return err
		}, "CancelTaskRequest.reason is 4097 bytes"},
		{"ListTasks state 99", func(s wire.MegaflowServiceClient) error {
			_, err := s.ListTasks(ctx, &wire.ListTasksRequest{State: 99})
			return err
		}, "ListTasksRequest.state is 99, not a value of TaskState"},
		{"max_wait_millis 2^62", func(s wire.MegaflowServiceClient) error {
			_, err := s.GetGraph(ctx, &wire.GetGraphRequest{GraphId: "thirty", Read: &wire.ReadOptions{MinIndex: 1, MaxWaitMillis: 1 << 62}})
			return err
		}, "GetGraphRequest.read.max_wait_millis is 4611686018427387904, outside [0, 300000]"},
		{"max_wait_millis -1", func(s wire.MegaflowServiceClient) error {
			_, err := s.ListGraphs(ctx, &wire.ListGraphsRequest{Read: &wire.ReadOptions{MaxWaitMillis: -1}})
			return err
		}, "ListGraphsRequest.read.max_wait_millis is -1"},
		{"pool selector with too many entries", func(s wire.MegaflowServiceClient) error {
			sel := map[string]string{}
			for i := range spec.MaxWireLabels + 1 {
				sel[fmt.Sprint("k", i)] = "v"
			}
			_, err := s.PoolWarm(ctx, &wire.PoolWarmRequest{Target: &wire.PoolTarget{Image: "img", Size: 1, WorkerSelector: sel}})
			return err
		}, "PoolWarmRequest.target.worker_selector has 65 entries; the limit is 64"},
	}
	for _, tc := range refused {
		for _, h := range []*head.Head{leader, follower} {
			before, digest := leader.AppliedIndex(), tableDigest(t, leader)
			err := errs.FromStatus(tc.call(wire.NewMegaflowServiceClient(dial(t, h.GRPCAddr()))))
			if !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: err %v, want InvalidArgument containing %q", tc.name, err, tc.want)
			}
			if leader.AppliedIndex() != before || tableDigest(t, leader) != digest {
				t.Fatalf("%s: a refused request changed the table", tc.name)
			}
		}
	}

	// At the bound: accepted, and the listing of the 30 tasks still reads.
	reason := strings.Repeat("r", spec.MaxReasonBytes)
	if _, err := lc.CancelGraph(ctx, &wire.CancelGraphRequest{GraphId: "thirty", Reason: reason}); err != nil {
		t.Fatalf("cancel reason at the bound: %v", err)
	}
	res, err := lc.ListTasks(ctx, &wire.ListTasksRequest{GraphId: "thirty", Read: &wire.ReadOptions{MinIndex: leader.AppliedIndex(), MaxWaitMillis: spec.MaxReadWaitMillis}})
	if err != nil || len(res.Tasks) != 30 || res.Tasks[0].GetReason() != reason {
		t.Fatalf("listing after the cancel: %d tasks, err %v", len(res.GetTasks()), err)
	}
}

// A raw worker hello offering -1000 or 2^62 millicores is refused with an
// error naming the field and the bound, and the worker is not listed.
func TestWorkerHelloOutOfBoundsIsRefused(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader := c.Members[c.WaitLeader(10*time.Second)].Head()
	hello := func(id string, cpu int64) error {
		stream, err := wire.NewWorkerServiceClient(dial(t, leader.GRPCAddr())).Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&wire.WorkerMessage{Msg: &wire.WorkerMessage_Hello{Hello: &wire.WorkerHello{
			Info: &wire.WorkerInfo{Id: id, Runtime: "fake", Capacity: &wire.Resources{CpuMillis: cpu, MemoryBytes: 1 << 30}}}}}); err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		return errs.FromStatus(err)
	}
	// A worker at the bound is welcome, once the new leader is ready.
	testcluster.WaitFor(t, 10*time.Second, "a hello at the bound is welcome", func() bool {
		return hello("at-bound", spec.MaxWorkerCPUMillis) == nil
	})
	for _, cpu := range []int64{-1000, 1 << 62} {
		id := fmt.Sprint("bad-", cpu)
		err := hello(id, cpu)
		want := fmt.Sprintf("WorkerMessage.hello.info.capacity.cpu_millis is %d, outside [0, %d]", cpu, spec.MaxWorkerCPUMillis)
		if !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Fatalf("hello with %d millicores: %v, want InvalidArgument %q", cpu, err, want)
		}
		if w := leader.FSM().View().Worker(id); w != nil {
			t.Fatalf("worker %s offering %d millicores is in the table", id, cpu)
		}
	}
}

// A listing of tasks whose rows add up to more than a client can receive
// is cut by size: every page reads with gRPC's default 4 MiB limit, and
// the pages together hold every task once.
func TestListTasksPagesBySize(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader := c.Members[c.WaitLeader(10*time.Second)].Head()
	g := &wire.GraphSpec{Id: "wide"}
	env := map[string]string{"PAYLOAD": strings.Repeat("p", 30<<10)}
	for i := range 300 { // about 9 MB of specs
		g.Tasks = append(g.Tasks, &wire.TaskSpec{Name: fmt.Sprintf("t%03d", i), Image: "img", Command: []string{"true"}, Env: env})
	}
	s := wire.NewMegaflowServiceClient(dial(t, leader.GRPCAddr()))
	if _, err := s.SubmitGraph(ctx, &wire.SubmitGraphRequest{Graph: g}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	token, pages := "", 0
	for {
		res, err := s.ListTasks(ctx, &wire.ListTasksRequest{GraphId: "wide", PageSize: 5000, PageToken: token,
			Read: &wire.ReadOptions{MinIndex: leader.AppliedIndex()}})
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		for _, task := range res.Tasks {
			if seen[task.GetId()] {
				t.Fatalf("task %s listed twice", task.GetId())
			}
			seen[task.GetId()] = true
		}
		if token = res.NextPageToken; token == "" {
			break
		}
	}
	if len(seen) != 300 || pages < 3 {
		t.Fatalf("%d tasks in %d pages, want 300 in at least 3", len(seen), pages)
	}
}

// A Watch whose events add up to more than a client can receive in one
// message (1,024 cancel events of a 4 KiB reason each) is sent in messages
// under MaxListResponseBytes: the client reads every event. Before, the
// stream failed with "received message larger than max" and the client
// retried it until its context ended.
func TestWatchSplitsLargeBatches(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader := c.Members[c.WaitLeader(10*time.Second)].Head()
	g := &wire.GraphSpec{Id: "many"}
	for i := range 1500 {
		g.Tasks = append(g.Tasks, &wire.TaskSpec{Name: fmt.Sprintf("t%04d", i), Image: "img", Command: []string{"true"}})
	}
	s := wire.NewMegaflowServiceClient(dial(t, leader.GRPCAddr()))
	res, err := s.SubmitGraph(ctx, &wire.SubmitGraphRequest{Graph: g})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CancelGraph(ctx, &wire.CancelGraphRequest{GraphId: "many", Reason: strings.Repeat("r", spec.MaxReasonBytes)}); err != nil {
		t.Fatal(err)
	}
	cancelled := 0
	for ev, err := range cl.Watch(ctx, client.WatchOptions{GraphID: "many", After: client.Cursor{Index: res.Index, Seq: math.MaxUint32}}) {
		if err != nil {
			t.Fatalf("after %d cancel events: %v", cancelled, err)
		}
		if ev.TaskId != "" && ev.TaskState == wire.TaskState_TASK_STATE_CANCELLED {
			cancelled++
		}
		if ev.TaskId == "" && ev.GraphState == wire.GraphState_GRAPH_STATE_CANCELLED {
			break
		}
	}
	if cancelled != 1500 {
		t.Fatalf("%d cancel events, want 1500", cancelled)
	}
}

// A worker announcing a worker protocol newer than the head serves is
// refused with FailedPrecondition saying to upgrade the heads first, and is
// not listed; one from before protocol versions (0) and one of this build's
// protocol are welcome.
func TestWorkerOfAnotherProtocolIsRefused(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader := c.Members[c.WaitLeader(10*time.Second)].Head()
	hello := func(id string, wireVersion uint32) error {
		stream, err := wire.NewWorkerServiceClient(dial(t, leader.GRPCAddr())).Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&wire.WorkerMessage{Msg: &wire.WorkerMessage_Hello{Hello: &wire.WorkerHello{WireVersion: wireVersion,
			Info: &wire.WorkerInfo{Id: id, Runtime: "fake", Version: "v9.0.0", Capacity: &wire.Resources{CpuMillis: 1000, MemoryBytes: 1 << 30}}}}}); err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		return errs.FromStatus(err)
	}
	testcluster.WaitFor(t, 10*time.Second, "a worker of this build's protocol is welcome", func() bool {
		return hello("current", version.WireCurrent) == nil
	})
	if err := hello("before-versions", 0); err != nil {
		t.Fatalf("a worker from before protocol versions: %v", err)
	}
	err := hello("newer", version.WireCurrent+1)
	if errs.ClassOf(err) != errs.FailedPrecondition || !strings.Contains(err.Error(), "worker newer (build v9.0.0) speaks worker protocol") ||
		!strings.Contains(err.Error(), "upgrade the heads first") {
		t.Fatalf("a worker of a newer protocol: %v; want failed precondition naming it and saying to upgrade the heads", err)
	}
	if w := leader.FSM().View().Worker("newer"); w != nil {
		t.Fatal("the refused worker is in the table")
	}
}
