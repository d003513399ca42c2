package state

import (
	"testing"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

func TestInsertGraph(t *testing.T) {
	s := newTestStore(t)
	g, tasks := buildRows("g", "acme", "a", "b<a", "c!4")
	var ev []*wire.Event
	ev = s.write(func(txn *Txn) {
		if err := txn.InsertGraph(g, tasks, 42); err != nil {
			t.Fatal(err)
		}
	})
	if got := evString(ev); got != "1/0 g RUNNING, 1/1 g/a QUEUED, 1/2 g/b PENDING, 1/3 g/c QUEUED" {
		t.Fatal(got)
	}
	v := s.Snapshot()
	if v.Index() != 1 || v.NextQueueSeq() != 3 {
		t.Fatalf("index %d next seq %d", v.Index(), v.NextQueueSeq())
	}
	a, c := s.task("g/a"), s.task("g/c")
	if a.QueueSeq != 1 || c.QueueSeq != 2 || a.Tenant != "acme" || a.CreateUnixNanos != 42 || a.CreateIndex != 1 {
		t.Fatalf("a %+v c %+v", a, c)
	}
	gr := v.Graph("g")
	if gr.TaskCount != 3 || gr.Counts[queued] != 2 || gr.Counts[pending] != 1 || gr.CreateIndex != 1 {
		t.Fatalf("graph %+v", gr)
	}

	// Refusals change nothing.
	s.write(func(txn *Txn) {
		g2, t2 := buildRows("g", "acme", "x")
		if err := txn.InsertGraph(g2, t2, 1); errs.ClassOf(err) != errs.AlreadyExists {
			t.Errorf("existing graph: %v", err)
		}
		g3, t3 := buildRows("h", "acme", "x")
		t3[0].GraphID = "other"
		if err := txn.InsertGraph(g3, t3, 1); errs.ClassOf(err) != errs.InvalidArgument {
			t.Errorf("foreign task: %v", err)
		}
		g4, t4 := buildRows("h", "acme", "x")
		t4[0].State = running
		if err := txn.InsertGraph(g4, t4, 1); errs.ClassOf(err) != errs.InvalidArgument {
			t.Errorf("running task: %v", err)
		}
		if len(txn.TakeEvents()) != 0 {
			t.Error("refused insert emitted events")
		}
	})
	if s.Snapshot().Graph("h") != nil || s.Snapshot().Task("h/x") != nil {
		t.Fatal("refused insert left rows")
	}
}

func TestSetTaskState(t *testing.T) {
	s := newTestStore(t)
	s.insert("g", "t", "a", "b")
	s.move("g/a", "w1", assigned)
	a := s.task("g/a")
	if a.WorkerID() != "w1" || a.CurrentAttempt().State != assigned {
		t.Fatalf("a %+v", a)
	}
	var ev []*wire.Event
	ev = s.write(func(txn *Txn) {
		if _, err := txn.SetTaskState("g/a", succeeded, "", 9); errs.ClassOf(err) != errs.FailedPrecondition {
			t.Errorf("ASSIGNED -> SUCCEEDED: %v", err)
		}
		if _, err := txn.SetTaskState("g/zz", running, "", 9); errs.ClassOf(err) != errs.NotFound {
			t.Errorf("unknown task: %v", err)
		}
		if _, err := txn.SetTaskState("g/a", running, "started", 9); err != nil {
			t.Fatal(err)
		}
	})
	if got := evString(ev); got != "3/0 g/a RUNNING" || ev[0].WorkerId != "w1" || ev[0].Attempt != 1 || ev[0].UnixNanos != 9 {
		t.Fatalf("events %s %+v", got, ev)
	}
	if a := s.task("g/a"); a.CurrentAttempt().State != running || a.CurrentAttempt().StartUnixNanos != 9 || a.ModifyIndex != 3 {
		t.Fatalf("a %+v", a)
	}
	// Lost with retries left: back to QUEUED at the end of the queue.
	s.move("g/a", "", queued)
	a = s.task("g/a")
	if a.State != queued || a.QueueSeq != 3 || a.CurrentAttempt().State != failed || a.CurrentAttempt().FinishUnixNanos != 4 {
		t.Fatalf("requeued a %+v %+v", a, a.CurrentAttempt())
	}
	if got, _, _ := s.Snapshot().ListTasks(TaskFilter{WorkerID: "w1"}, "", 10); len(got) != 0 {
		t.Fatalf("requeued task still on its worker: %v", ids(got))
	}
	// Second attempt succeeds; b fails: the graph fails when the last ends.
	s.move("g/a", "w2", assigned, running, succeeded)
	if g := s.Snapshot().Graph("g"); g.State != wire.GraphState_GRAPH_STATE_RUNNING || g.Counts[succeeded] != 1 {
		t.Fatalf("graph %+v", g)
	}
	s.move("g/b", "w1", assigned, running, failed)
	a = s.task("g/a")
	if len(a.Attempts) != 2 || a.Attempts[1].State != succeeded || a.Attempts[0].State != failed {
		t.Fatalf("attempts %+v", a.Attempts)
	}
	g := s.Snapshot().Graph("g")
	if g.State != wire.GraphState_GRAPH_STATE_FAILED || g.FinishUnixNanos != int64(s.index) || g.Counts[failed] != 1 {
		t.Fatalf("graph %+v", g)
	}
}

func TestRowsAreImmutable(t *testing.T) {
	s := newTestStore(t)
	s.insert("g", "t", "a")
	old := s.Snapshot()
	a := old.Task("g/a")
	s.move("g/a", "w", assigned, running)
	if a.State != queued || len(a.Attempts) != 0 || old.Task("g/a") != a || old.Graph("g").Counts[queued] != 1 {
		t.Fatal("an old view or row changed")
	}
	r := s.task("g/a")
	s.move("g/a", "", succeeded)
	if r.Attempts[0].State != running {
		t.Fatal("attempts of an old row changed")
	}
}

func TestResolveDependents(t *testing.T) {
	// a -> b -> d, a -> c -> d (diamond); a -> e (runs on upstream
	// failure); b -> f.
	setup := func() *testStore {
		s := newTestStore(t)
		g, tasks := buildRows("g", "t", "a", "b<a", "c<a", "d<b,c", "e<a", "f<b")
		tasks[4].Spec.RunOnUpstreamFailure = true
		s.write(func(txn *Txn) {
			if err := txn.InsertGraph(g, tasks, 1); err != nil {
				t.Fatal(err)
			}
		})
		return s
	}
	t.Run("success queues in order", func(t *testing.T) {
		s := setup()
		s.move("g/a", "w", assigned, running, succeeded)
		if got := stateNames(s.task("g/b"), s.task("g/c"), s.task("g/d"), s.task("g/e")); got != "QUEUED QUEUED PENDING QUEUED" {
			t.Fatal(got)
		}
		if b, c, e := s.task("g/b"), s.task("g/c"), s.task("g/e"); !(b.QueueSeq < c.QueueSeq && c.QueueSeq < e.QueueSeq) {
			t.Fatal("queue order does not follow dependents order")
		}
		s.move("g/b", "w", assigned, running, succeeded)
		if d := s.task("g/d"); d.State != pending || d.DepsRemaining != 1 {
			t.Fatalf("d %+v", d)
		}
		s.move("g/c", "w", assigned, running, succeeded)
		if d := s.task("g/d"); d.State != queued || d.DepsRemaining != 0 {
			t.Fatalf("d %+v", d)
		}
	})
	t.Run("failure cancels transitively", func(t *testing.T) {
		s := setup()
		var n uint32
		ev := s.write(func(txn *Txn) {
			if _, err := txn.SetTaskState("g/a", cancelled, "x", 5); err != nil {
				t.Fatal(err)
			}
			var err error
			if n, err = txn.ResolveDependents(txn.Task("g/a"), 5); err != nil {
				t.Fatal(err)
			}
		})
		if n != 4 {
			t.Fatalf("cancelled %d, want 4 (b c d f)", n)
		}
		if got := stateNames(s.task("g/b"), s.task("g/c"), s.task("g/d"), s.task("g/e"), s.task("g/f")); got != "CANCELLED CANCELLED CANCELLED QUEUED CANCELLED" {
			t.Fatal(got)
		}
		if d := s.task("g/d"); d.Reason != ReasonUpstreamFailed {
			t.Fatalf("d reason %q", d.Reason)
		}
		want := "2/0 g/a CANCELLED, 2/1 g/b CANCELLED, 2/2 g/c CANCELLED, 2/3 g/e QUEUED, 2/4 g/d CANCELLED, 2/5 g/f CANCELLED"
		if got := evString(ev); got != want {
			t.Fatalf("events\n got %s\nwant %s", got, want)
		}
	})
	t.Run("not terminal", func(t *testing.T) {
		s := setup()
		s.write(func(txn *Txn) {
			if _, err := txn.ResolveDependents(txn.Task("g/a"), 1); errs.ClassOf(err) != errs.FailedPrecondition {
				t.Fatalf("got %v", err)
			}
		})
	})
}

func TestStaged(t *testing.T) {
	s := newTestStore(t)
	cmd := func(id string, chunk, chunks uint32, nanos int64) *StagedChunk {
		return &StagedChunk{GraphID: id, Chunk: chunk, Command: &wire.SubmitGraphCommand{
			Header: &wire.GraphSpec{Id: id}, Chunk: chunk, Chunks: chunks, UnixNanos: nanos}}
	}
	s.write(func(txn *Txn) {
		txn.StageChunk(cmd("b", 1, 3, 20))
		txn.StageChunk(cmd("b", 0, 3, 30))
		txn.StageChunk(cmd("a", 0, 2, 5))
		txn.StageChunk(cmd("a", 0, 2, 6)) // replaces
		txn.StageChunk(cmd("ab", 0, 2, 7))
	})
	got := s.Snapshot().StagedGraphs()
	want := []StagedGraph{{"a", 6, 2, 1}, {"ab", 7, 2, 1}, {"b", 20, 3, 2}}
	if len(got) != len(want) {
		t.Fatalf("%+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%+v, want %+v", got, want)
		}
	}
	s.write(func(txn *Txn) {
		if n := txn.DropStaged("a"); n != 1 {
			t.Errorf("dropped %d", n)
		}
		if c := txn.StagedChunks("b"); len(c) != 2 || c[0].Chunk != 0 {
			t.Errorf("chunks of b: %v", c)
		}
	})
	if got := s.Snapshot().StagedGraphs(); len(got) != 2 || got[0].GraphID != "ab" {
		t.Fatalf("%+v", got)
	}
}

func TestWireConversions(t *testing.T) {
	s := newTestStore(t)
	s.insert("g", "t", "a", "b<a")
	s.move("g/a", "w1", assigned)
	a := s.task("g/a")
	w := a.ToWire()
	back, err := TaskFromWire(w)
	if err != nil || back.ID != a.ID || back.GraphID != "g" || back.WorkerID() != "w1" || back.Spec != a.Spec ||
		len(back.Dependents) != 1 || back.QueueSeq != a.QueueSeq {
		t.Fatalf("%+v %v", back, err)
	}
	if a.ToWire(OmitSpec).Spec != nil {
		t.Fatal("OmitSpec kept the spec")
	}
	for _, bad := range []*wire.Task{{Id: "g/a"}, {Id: "ga", GraphId: "g"}, {Id: "g/", GraphId: "g"}, {Id: "h/a", GraphId: "g"}} {
		if _, err := TaskFromWire(bad); errs.ClassOf(err) != errs.InvalidArgument {
			t.Errorf("%v: %v", bad, err)
		}
	}
	g := s.Snapshot().Graph("g")
	if gb := GraphFromWire(g.ToWire()); gb.Counts != g.Counts || gb.ID != "g" || gb.TaskCount != 2 {
		t.Fatalf("%+v", gb)
	}
}
