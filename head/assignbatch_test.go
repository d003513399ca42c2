package head_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/version"
	"github.com/megaflow/megaflow/internal/wire"
)

// A worker whose hello accepts assignment batches gets what one plan
// placed on it in one AssignmentBatch; a worker that does not say so (a
// build from before them) gets each assignment alone, as before. Both
// through a real head, over raw worker streams. A graph submitted while no
// task waits is placed with its submission (submissionPlan).
func TestAssignmentsAreBatchedOnlyForWorkersThatAcceptThem(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader := c.Members[c.WaitLeader(10*time.Second)].Head()
	connect := func(id string, batches bool) (wire.WorkerService_ConnectClient, error) {
		return connectWorker(ctx, t, leader.GRPCAddr(), &wire.WorkerHello{WireVersion: version.WireCurrent, AcceptsAssignmentBatches: batches,
			Info: &wire.WorkerInfo{Id: id, Runtime: "fake", Labels: map[string]string{"worker": id},
				Capacity: &wire.Resources{CpuMillis: 8000, MemoryBytes: 8 << 30}}})
	}
	var old, batched wire.WorkerService_ConnectClient
	testcluster.WaitFor(t, 10*time.Second, "the leader welcomes a worker", func() bool {
		var err error
		old, err = connect("old", false)
		return err == nil
	})
	batched, err := connect("new", true)
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Client()
	for _, id := range []string{"old", "new"} {
		gs := &client.GraphSpec{Id: "g-" + id}
		for i := range 5 {
			gs.Tasks = append(gs.Tasks, &client.TaskSpec{Name: fmt.Sprint("t", i), Image: "megaflow/noop:1", Command: []string{"true"},
				Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}, NodeSelector: map[string]string{"worker": id}})
		}
		if _, err := cl.Submit(ctx, gs); err != nil {
			t.Fatal(err)
		}
	}
	// messages reads a stream until it has delivered 5 assignments and
	// returns how many came alone and in batches (batch sizes).
	messages := func(s wire.WorkerService_ConnectClient) (singles int, batches []int) {
		t.Helper()
		for n := 0; n < 5; {
			m, err := s.Recv()
			if err != nil {
				t.Fatalf("after %d assignments: %v", n, err)
			}
			if a := m.GetAssign(); a != nil {
				singles++
				n++
			}
			if b := m.GetAssignments(); b != nil {
				batches = append(batches, len(b.GetAssignments()))
				n += len(b.GetAssignments())
			}
		}
		return singles, batches
	}
	if singles, batches := messages(old); singles != 5 || len(batches) != 0 {
		t.Errorf("worker without batches got %d assignments alone and batches %v; want 5 alone", singles, batches)
	}
	if singles, batches := messages(batched); singles != 0 || len(batches) != 1 {
		t.Errorf("worker with batches got %d assignments alone and batches %v; want one batch of 5 (one plan)", singles, batches)
	}
	// Nothing waited in a queue at either submission: each graph's tasks
	// were placed in the submission's own entry (rules 8), at its time.
	for _, id := range []string{"g-old", "g-new"} {
		for _, task := range leader.FSM().View().TasksOfGraph(id) {
			if len(task.Attempts) != 1 || task.Attempts[0].AssignUnixNanos != task.QueuedUnixNanos {
				t.Errorf("task %s: attempts %+v queued at %d; want one assigned with the submission, at the same time", task.ID, task.Attempts, task.QueuedUnixNanos)
			}
		}
	}
}

// connectWorker opens a raw worker stream to the head at addr, sends hello
// and reads the head's first answer, which must be a Welcome.
func connectWorker(ctx context.Context, t *testing.T, addr string, hello *wire.WorkerHello) (wire.WorkerService_ConnectClient, error) {
	stream, err := wire.NewWorkerServiceClient(dial(t, addr)).Connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&wire.WorkerMessage{Msg: &wire.WorkerMessage_Hello{Hello: hello}}); err != nil {
		return nil, err
	}
	m, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if m.GetWelcome() == nil {
		return nil, fmt.Errorf("first answer %v, want a Welcome", m)
	}
	return stream, nil
}

// An attempt's end places the task that waited for its room in the end's
// own entry (rules 9, eventsPlan), at the same time, through a real head
// over a raw worker stream: the worker has room for one task at a time.
func TestAnEndPlacesTheWaitingTaskWithIt(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader := c.Members[c.WaitLeader(10*time.Second)].Head()
	var stream wire.WorkerService_ConnectClient
	testcluster.WaitFor(t, 10*time.Second, "the leader welcomes the worker", func() bool {
		var err error
		stream, err = connectWorker(ctx, t, leader.GRPCAddr(), &wire.WorkerHello{WireVersion: version.WireCurrent, AcceptsAssignmentBatches: true,
			Info: &wire.WorkerInfo{Id: "w1", Runtime: "fake", Capacity: &wire.Resources{CpuMillis: 100, MemoryBytes: 8 << 30}}})
		return err == nil
	})
	gs := &client.GraphSpec{Id: "g"}
	for _, name := range []string{"a", "b"} {
		gs.Tasks = append(gs.Tasks, &client.TaskSpec{Name: name, Image: "megaflow/noop:1", Command: []string{"true"},
			Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}})
	}
	if _, err := c.Client().Submit(ctx, gs); err != nil {
		t.Fatal(err)
	}
	next := func() *wire.Assignment {
		t.Helper()
		for {
			m, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if a := m.GetAssign(); a != nil {
				return a
			}
			if b := m.GetAssignments(); b != nil {
				if len(b.GetAssignments()) != 1 {
					t.Fatalf("assignments %v; want one at a time (room for one)", b.GetAssignments())
				}
				return b.GetAssignments()[0]
			}
		}
	}
	first := next()
	ev := func(kind wire.AttemptEventKind) *wire.AttemptEvent {
		return &wire.AttemptEvent{TaskId: first.GetTaskId(), Attempt: first.GetAttempt(), Kind: kind, UnixNanos: time.Now().UnixNano()}
	}
	if err := stream.Send(&wire.WorkerMessage{Msg: &wire.WorkerMessage_Events{Events: &wire.EventBatch{Seq: 1, Events: []*wire.AttemptEvent{
		ev(wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STARTED), ev(wire.AttemptEventKind_ATTEMPT_EVENT_KIND_EXITED)}}}}); err != nil {
		t.Fatal(err)
	}
	second := next()
	if second.GetTaskId() == first.GetTaskId() {
		t.Fatalf("%s assigned twice", second.GetTaskId())
	}
	ended := leader.FSM().View().Task(first.GetTaskId()).Attempts[0]
	placed := leader.FSM().View().Task(second.GetTaskId()).Attempts[0]
	if ended.FinishUnixNanos == 0 || placed.AssignUnixNanos != ended.FinishUnixNanos {
		t.Errorf("%s ended at %d, %s assigned at %d; want it assigned in the end's entry, at the same time",
			first.GetTaskId(), ended.FinishUnixNanos, second.GetTaskId(), placed.AssignUnixNanos)
	}
}
