package fsm

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

func TestSubmitSingleChunk(t *testing.T) {
	f := newTestFSM(t, 0)
	g := graphSpec("g1", spec("a"), spec("b", "a"), spec("c", "a", "b"), spec("d"))
	g.Priority, g.Name = 5, "rollout"
	g.Tasks[3].Priority = 9
	res := f.submit(g)
	if *res != (SubmitResult{GraphID: "g1", Committed: true, Index: 1}) {
		t.Fatalf("result %+v", res)
	}
	v := f.View()
	gr := v.Graph("g1")
	if gr == nil || gr.Tenant != "default" || gr.Name != "rollout" || gr.State != wire.GraphState_GRAPH_STATE_RUNNING ||
		gr.TaskCount != 4 || gr.CreateIndex != 1 || gr.CreateUnixNanos != 100 {
		t.Fatalf("graph %+v", gr)
	}
	if gr.Counts[wire.TaskState_TASK_STATE_QUEUED] != 2 || gr.Counts[wire.TaskState_TASK_STATE_PENDING] != 2 {
		t.Fatalf("counts %v", gr.Counts)
	}
	tests := []struct {
		name       string
		state      wire.TaskState
		deps       uint32
		dependents []string
		prio       int32
		seq        uint64
	}{
		{"a", wire.TaskState_TASK_STATE_QUEUED, 0, []string{"b", "c"}, 5, 1},
		{"b", wire.TaskState_TASK_STATE_PENDING, 1, []string{"c"}, 5, 0},
		{"c", wire.TaskState_TASK_STATE_PENDING, 2, nil, 5, 0},
		{"d", wire.TaskState_TASK_STATE_QUEUED, 0, nil, 9, 2},
	}
	for _, tt := range tests {
		task := f.task("g1/" + tt.name)
		if task.State != tt.state || task.DepsRemaining != tt.deps || !slices.Equal(task.Dependents, tt.dependents) ||
			task.Priority != tt.prio || task.QueueSeq != tt.seq || task.GraphID != "g1" || task.Name() != tt.name ||
			task.Tenant != "default" || task.CreateIndex != 1 || task.ModifyIndex != 1 || task.CreateUnixNanos != 100 {
			t.Errorf("task %s: %+v", tt.name, task)
		}
	}
	// The scheduler's order: priority first, then FIFO.
	var order []string
	for task := range v.QueuedTasks("") {
		order = append(order, task.Name())
	}
	if !slices.Equal(order, []string{"d", "a"}) {
		t.Errorf("queue order %v", order)
	}
}

func TestSubmitMultiChunk(t *testing.T) {
	f := newTestFSM(t, 0)
	g := graphSpec("big", spec("a"), spec("b", "a"), spec("c", "b"), spec("d", "c"), spec("e"))
	g.Tenant = "acme"
	cmds := chunkCmds(g, 2, 7) // 3 chunks
	for i, c := range cmds[:2] {
		res := f.ok(OpSubmitGraph, c).(*SubmitResult)
		if res.Committed || res.Existed {
			t.Fatalf("chunk %d: %+v", i, res)
		}
		v := f.View()
		if v.Graph("big") != nil || v.Task("big/a") != nil {
			t.Fatalf("chunk %d: graph visible before its last chunk", i)
		}
		if sg := v.StagedGraphs(); len(sg) != 1 || sg[0] != (state.StagedGraph{GraphID: "big", FirstUnixNanos: 7, Chunks: 3, Staged: uint32(i + 1)}) {
			t.Fatalf("chunk %d: staged %+v", i, sg)
		}
	}
	res := f.ok(OpSubmitGraph, cmds[2]).(*SubmitResult)
	if *res != (SubmitResult{GraphID: "big", Committed: true, Index: 3}) {
		t.Fatalf("last chunk: %+v", res)
	}
	v := f.View()
	if len(v.StagedGraphs()) != 0 {
		t.Fatal("staging not dropped")
	}
	if got := len(v.TasksOfGraph("big")); got != 5 {
		t.Fatalf("%d tasks", got)
	}
	if b := f.task("big/b"); b.Tenant != "acme" || !slices.Equal(b.Dependents, []string{"c"}) {
		t.Fatalf("b: %+v", b)
	}
	if got := states(f, "big/a", "big/b", "big/e"); got != "QUEUED PENDING QUEUED" {
		t.Fatal(got)
	}
}

func TestSubmitRetryIsIdempotent(t *testing.T) {
	f := newTestFSM(t, 0)
	g := graphSpec("g", spec("a"), spec("b", "a"), spec("c"))
	cmds := chunkCmds(g, 2, 1)
	for _, c := range cmds {
		f.ok(OpSubmitGraph, c)
	}
	before := dump(t, f.View())
	// Every chunk again, in any order: nothing changes but the index.
	for _, c := range []int{1, 0, 1} {
		res := f.ok(OpSubmitGraph, cmds[c]).(*SubmitResult)
		if *res != (SubmitResult{GraphID: "g", Committed: true, Existed: true, Index: 2}) {
			t.Fatalf("retry of chunk %d: %+v", c, res)
		}
	}
	if d := firstDiff(before, dump(t, f.View())); d != "" {
		t.Fatalf("retry changed the table: %s", d)
	}
}

func TestSubmitDifferentDigestRefused(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", spec("a")))
	before := dump(t, f.View())
	other := submitCmd(graphSpec("g", spec("a"), spec("b")), 2)
	e := f.refused(errs.AlreadyExists, OpSubmitGraph, other)
	if e.Message == "" {
		t.Fatal("empty message")
	}
	if d := firstDiff(before, dump(t, f.View())); d != "" {
		t.Fatalf("refused submit changed the table: %s", d)
	}
	// A staged chunk of a committed graph with another digest is refused too.
	chunked := chunkCmds(graphSpec("g", spec("x"), spec("y")), 1, 3)
	f.refused(errs.AlreadyExists, OpSubmitGraph, chunked[0])
	if len(f.View().StagedGraphs()) != 0 {
		t.Fatal("staged a chunk of a committed graph")
	}
}

func TestSubmitMissingChunkRefused(t *testing.T) {
	f := newTestFSM(t, 0)
	g := graphSpec("g", spec("a"), spec("b"), spec("c"))
	cmds := chunkCmds(g, 1, 1)
	f.ok(OpSubmitGraph, cmds[0])
	f.refused(errs.FailedPrecondition, OpSubmitGraph, cmds[2]) // chunk 1 missing
	v := f.View()
	if v.Graph("g") != nil || len(v.StagedGraphs()) != 0 {
		t.Fatal("missing chunk: graph visible or staging kept")
	}
	// The leader resends everything: it commits.
	for _, c := range cmds {
		f.ok(OpSubmitGraph, c)
	}
	if f.View().Graph("g") == nil {
		t.Fatal("resent graph not committed")
	}
}

func TestSubmitNewAttemptReplacesStaging(t *testing.T) {
	f := newTestFSM(t, 0)
	old := chunkCmds(graphSpec("g", spec("a"), spec("b"), spec("c")), 1, 1)
	f.ok(OpSubmitGraph, old[0])
	f.ok(OpSubmitGraph, old[1])
	fresh := chunkCmds(graphSpec("g", spec("x"), spec("y")), 1, 2)
	f.ok(OpSubmitGraph, fresh[0])
	if sg := f.View().StagedGraphs(); len(sg) != 1 || sg[0].Staged != 1 || sg[0].Chunks != 2 || sg[0].FirstUnixNanos != 2 {
		t.Fatalf("staged %+v", sg)
	}
	f.ok(OpSubmitGraph, fresh[1])
	if f.View().Task("g/x") == nil || f.View().Task("g/a") != nil {
		t.Fatal("wrong attempt committed")
	}
}

func TestSubmitInvalidRefused(t *testing.T) {
	tests := []struct {
		name  string
		cmd   *wire.SubmitGraphCommand
		class errs.Class
	}{
		{"no id", submitCmd(graphSpec("", spec("a")), 1), errs.InvalidArgument},
		{"slash in id", submitCmd(graphSpec("g/h", spec("a")), 1), errs.InvalidArgument},
		{"zero byte in name", submitCmd(graphSpec("g", spec("a\x00")), 1), errs.InvalidArgument},
		{"duplicate name", submitCmd(graphSpec("g", spec("a"), spec("a")), 1), errs.InvalidArgument},
		{"empty name", submitCmd(graphSpec("g", spec("")), 1), errs.InvalidArgument},
		{"slash in name", submitCmd(graphSpec("g", spec("a/b")), 1), errs.InvalidArgument},
		{"unknown dep", submitCmd(graphSpec("g", spec("a", "zz")), 1), errs.InvalidArgument},
		{"self dep", submitCmd(graphSpec("g", spec("a", "a")), 1), errs.InvalidArgument},
		{"dep twice", submitCmd(graphSpec("g", spec("a"), spec("b", "a", "a")), 1), errs.InvalidArgument},
		{"cycle", submitCmd(graphSpec("g", spec("a", "c"), spec("b", "a"), spec("c", "b"), spec("d")), 1), errs.InvalidArgument},
		{"zero chunks", &wire.SubmitGraphCommand{Header: &wire.GraphSpec{Id: "g"}}, errs.InvalidArgument},
		{"chunk past end", &wire.SubmitGraphCommand{Header: &wire.GraphSpec{Id: "g"}, Chunk: 2, Chunks: 2}, errs.InvalidArgument},
		{"task count", func() *wire.SubmitGraphCommand {
			c := submitCmd(graphSpec("g", spec("a")), 1)
			c.TaskCount = 2
			return c
		}(), errs.FailedPrecondition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTestFSM(t, 0)
			f.refused(tt.class, OpSubmitGraph, tt.cmd)
			v := f.View()
			if v.Graph("g") != nil || len(v.StagedGraphs()) != 0 || len(v.TasksOfGraph("g")) != 0 {
				t.Fatal("refused graph left rows")
			}
		})
	}
}

func TestSubmitEmptyGraphSucceeds(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("empty"))
	if g := f.View().Graph("empty"); g.State != wire.GraphState_GRAPH_STATE_SUCCEEDED || g.FinishUnixNanos != 100 {
		t.Fatalf("%+v", g)
	}
}

// A submission's plan is applied in its entry from rules 8 (each placement
// checked: one on a worker without room is skipped) and ignored below;
// Speculate shows the submission's outcome without changing the table it
// forked.
func TestSubmissionPlan(t *testing.T) {
	for _, rules := range []uint64{RulesSubmitPlan - 1, RulesSubmitPlan} {
		t.Run(fmt.Sprint("rules ", rules), func(t *testing.T) {
			f := newTestFSM(t, 0)
			f.ok(OpSetRules, wrapperspb.UInt64(rules))
			f.ok(OpWorkerUpsert, &wire.WorkerUpsertCommand{UnixNanos: 1, Info: &wire.WorkerInfo{Id: "w1",
				Capacity: &wire.Resources{CpuMillis: 1000, MemoryBytes: 1 << 30}}})
			g := graphSpec("g", spec("a"), spec("b"), spec("c", "a"))
			for _, s := range g.Tasks {
				s.Resources = &wire.Resources{CpuMillis: 1000}
			}
			cmd := submitCmd(g, 5)
			before := f.View()
			after, err := Speculate(before, cmd)
			if err != nil {
				t.Fatal(err)
			}
			if before.Graph("g") != nil || f.View().Graph("g") != nil || after.Graph("g") == nil {
				t.Fatal("Speculate: want the graph in its view only, not in the view it forked or the FSM's")
			}
			if a := after.Task("g/a"); a.State != wire.TaskState_TASK_STATE_QUEUED {
				t.Fatalf("Speculate's view: g/a is %s; want QUEUED", a.State)
			}
			cmd.Plan = &wire.PlanCommand{LeaderTerm: 3, UnixNanos: 5, Attempts: []*wire.PlannedAttempt{
				{TaskId: "g/a", Attempt: 1, WorkerId: "w1"}, {TaskId: "g/b", Attempt: 1, WorkerId: "w1"}}}

			res := f.ok(OpSubmitGraph, cmd).(*SubmitResult)
			a, b := f.task("g/a"), f.task("g/b")
			if rules < RulesSubmitPlan {
				if res.Plan != nil || a.State != wire.TaskState_TASK_STATE_QUEUED || b.State != wire.TaskState_TASK_STATE_QUEUED {
					t.Fatalf("under rules %d: plan result %+v, g/a %s, g/b %s; want the plan ignored", rules, res.Plan, a.State, b.State)
				}
				return
			}
			if a.State != wire.TaskState_TASK_STATE_ASSIGNED || a.Attempts[0].AssignUnixNanos != 5 || a.Attempts[0].LeaderTerm != 3 {
				t.Fatalf("g/a: %s %+v; want ASSIGNED by the submission's plan at 5, term 3", a.State, a.Attempts)
			}
			if b.State != wire.TaskState_TASK_STATE_QUEUED || !strings.Contains(res.Plan.Skipped["g/b"], "lacks") {
				t.Fatalf("g/b: %s, skipped %q; want QUEUED, skipped for want of room", b.State, res.Plan.Skipped["g/b"])
			}
		})
	}
}
