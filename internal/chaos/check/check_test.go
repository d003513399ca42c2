package check

import (
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/chaos/history"
)

const s = int64(1e9) // one second in history time

func view(id string, st history.State, attempts ...history.State) history.TaskView {
	v := history.TaskView{ID: id, Found: true, State: st}
	for i, a := range attempts {
		v.Attempts = append(v.Attempts, history.Attempt{Number: uint32(i + 1), Worker: "w1", State: a})
	}
	if st == history.Succeeded {
		v.Result = 7
	}
	return v
}

func submit(client int, call, ret int64, tasks ...string) history.Op {
	return history.Op{Client: client, Kind: history.Submit, Graph: "g", Tasks: tasks, Call: call, Return: ret}
}

func read(client int, call, ret int64, lin bool, v history.TaskView) history.Op {
	return history.Op{Client: client, Kind: history.Read, Tasks: []string{v.ID}, Call: call, Return: ret, Linearizable: lin, Views: []history.TaskView{v}, NotFound: !v.Found}
}

func cancel(client int, call, ret int64, n uint32, task string) history.Op {
	return history.Op{Client: client, Kind: history.CancelTask, Tasks: []string{task}, Call: call, Return: ret, Cancelled: n}
}

var notFound = history.TaskView{ID: "g/t"}

// good is a history a correct cluster can produce: a submit, reads that
// move forward, a concurrent read still seeing the older state, a cancel
// that found the task finished, a submit whose outcome is unknown.
func good() []history.Op {
	return []history.Op{
		submit(0, 0, 1*s, "g/t"),
		read(1, 0, 1*s, true, notFound), // concurrent with the submit: may precede it
		read(0, 2*s, 3*s, false, view("g/t", history.Queued)),
		read(1, 2*s, 3*s, true, view("g/t", history.Running, history.Running)),
		read(0, 4*s, 5*s, true, view("g/t", history.Queued, history.Failed)), // a retry after a failed attempt
		read(1, 4*s, 6*s, false, view("g/t", history.Running, history.Failed, history.Running)),
		read(0, 7*s, 8*s, true, view("g/t", history.Succeeded, history.Failed, history.Succeeded)),
		cancel(1, 9*s, 10*s, 0, "g/t"),
		read(1, 11*s, 12*s, false, view("g/t", history.Succeeded, history.Failed, history.Succeeded)),
		submit(2, 1*s, history.Unknown, "h/t"),
		read(2, 2*s, 3*s, true, history.TaskView{ID: "h/t"}),
		read(0, 4*s, 5*s, true, view("h/t", history.Cancelled)),
		{Client: 3, Kind: history.CancelGraph, Tasks: []string{"h/t"}, Call: 3 * s, Return: history.Unknown},
	}
}

func TestLinearizableAcceptsAGoodHistory(t *testing.T) {
	l := Linearizable(good(), 0)
	if !l.OK() {
		t.Fatalf("a good history was rejected: %+v", l)
	}
	if l.Partitions < 5 || l.Ops < len(good()) {
		t.Fatalf("checked %d partitions, %d ops: the history did not reach the checker", l.Partitions, l.Ops)
	}
}

func TestLinearizableRejectsBadHistories(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []history.Op
	}{
		{"an acknowledged graph then not found", []history.Op{
			submit(0, 0, 1*s, "g/t"), read(1, 2*s, 3*s, true, notFound)}},
		{"a session reads back in time", []history.Op{
			submit(0, 0, 1*s, "g/t"),
			read(0, 2*s, 3*s, false, view("g/t", history.Running, history.Running)),
			read(0, 4*s, 5*s, false, view("g/t", history.Queued))}},
		{"a session misses its own write", []history.Op{
			submit(0, 0, 1*s, "g/t"), read(0, 2*s, 3*s, false, notFound)}},
		{"linearizable reads go back in time across clients", []history.Op{
			submit(0, 0, 1*s, "g/t"),
			read(1, 2*s, 3*s, true, view("g/t", history.Succeeded, history.Succeeded)),
			read(2, 4*s, 5*s, true, view("g/t", history.Running, history.Running))}},
		{"a terminal result changes", []history.Op{
			submit(0, 0, 1*s, "g/t"),
			read(1, 2*s, 3*s, true, view("g/t", history.Failed, history.Failed)),
			read(1, 4*s, 5*s, true, view("g/t", history.Succeeded, history.Failed, history.Succeeded))}},
		{"a cancel accepted after the task ended", []history.Op{
			submit(0, 0, 1*s, "g/t"),
			read(1, 2*s, 3*s, true, view("g/t", history.Succeeded, history.Succeeded)),
			cancel(2, 4*s, 5*s, 1, "g/t")}},
		{"a cancel acknowledged, then the task runs", []history.Op{
			submit(0, 0, 1*s, "g/t"),
			cancel(0, 2*s, 3*s, 1, "g/t"),
			read(1, 4*s, 5*s, true, view("g/t", history.Running, history.Running))}},
		{"a result recorded twice", []history.Op{
			submit(0, 0, 1*s, "g/t"),
			read(1, 2*s, 3*s, true, view("g/t", history.Succeeded, history.Succeeded, history.Succeeded))}},
		{"a task succeeded with an active attempt", []history.Op{
			submit(0, 0, 1*s, "g/t"),
			read(1, 2*s, 3*s, true, view("g/t", history.Succeeded, history.Failed, history.Running))}},
		{"two attempts running at once", []history.Op{
			submit(0, 0, 1*s, "g/t"),
			read(1, 2*s, 3*s, true, view("g/t", history.Running, history.Running, history.Running))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if l := Linearizable(tc.ops, 0); len(l.Illegal) == 0 {
				t.Fatalf("accepted: %+v", l)
			}
		})
	}
}

func table(head string, applied uint64, views ...history.TaskView) Table {
	t := Table{Head: head, Applied: applied, Tasks: map[string]history.TaskView{}, Graphs: map[string]string{"g": "SUCCEEDED"}}
	for _, v := range views {
		t.Tasks[v.ID] = v
	}
	return t
}

func goodInput() Input {
	done := view("g/t", history.Succeeded, history.Failed, history.Succeeded)
	h := view("h/t", history.Cancelled)
	return Input{
		Ops:    good(),
		Tables: []Table{table("h1", 90, done, h), table("h2", 90, done, h), table("h3", 90, done, h)},
		Executions: map[string][]Execution{"g/t": {
			{Attempt: 1, Worker: "w1", At: 1}, {Attempt: 1, Worker: "w1", End: true, At: 5},
			{Attempt: 2, Worker: "w2", At: 6}, {Attempt: 2, Worker: "w2", End: true, At: 9}}},
	}
}

func TestJudgePassesAGoodRun(t *testing.T) {
	v := Judge(goodInput())
	if !v.Pass() {
		t.Fatalf("a good run failed: %v %v", v.Failures, v.Details)
	}
	if v.AckedGraphs != 1 || v.AckedTasks != 1 || v.Executions != 2 || v.ReExecuted != 1 || v.Overlapping != 0 || !v.HeadsAgree {
		t.Fatalf("figures: %+v", v)
	}
}

// TestJudgeFailsABrokenRun is the harness's deliberately broken build:
// each case edits the input of a good run the way a bug would, and the
// verdict must fail naming it.
func TestJudgeFailsABrokenRun(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		edit       func(*Input)
	}{
		{"a result recorded twice", "recorded twice", InjectDuplicateResult},
		{"an acknowledged task lost", "lost", func(in *Input) { delete(in.Tables[1].Tasks, "g/t") }},
		{"a task left running", "not terminal", func(in *Input) {
			in.Tables[0].Tasks["h/t"] = view("h/t", history.Running, history.Running)
		}},
		{"a head behind", "disagree", func(in *Input) { in.Tables[2].Applied = 80 }},
		{"a leaked process", "processes", func(in *Input) { in.LeakedProcesses = 1 }},
		{"a data race", "data races", func(in *Input) { in.LogProblems = []string{"h2.log: WARNING: DATA RACE"} }},
		{"two executions at once", "at the same time", func(in *Input) {
			in.Executions["g/t"] = []Execution{
				{Attempt: 1, Worker: "w1", At: 1}, {Attempt: 2, Worker: "w2", At: 3},
				{Attempt: 1, Worker: "w1", End: true, At: 5}, {Attempt: 2, Worker: "w2", End: true, At: 9}}
		}},
		{"a read back in time", "linearizable", func(in *Input) {
			in.Ops = append(in.Ops, read(0, 20*s, 21*s, true, view("g/t", history.Running, history.Running)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := goodInput()
			tc.edit(&in)
			v := Judge(in)
			if v.Pass() || !strings.Contains(strings.Join(v.Failures, "\n"), tc.want) {
				t.Fatalf("verdict %v, want a failure about %q", v.Failures, tc.want)
			}
		})
	}
}

// TestACancelledTaskKeepsItsAttemptActive: a cancelled task's attempt stays
// active until its worker reports it stopped (head/state), which a read
// may see; at the end it is counted, not failed.
func TestACancelledTaskKeepsItsAttemptActive(t *testing.T) {
	ops := []history.Op{
		submit(0, 0, 1*s, "g/t"),
		cancel(0, 2*s, 3*s, 1, "g/t"),
		read(0, 4*s, 5*s, true, view("g/t", history.Cancelled, history.Running)),
		read(0, 6*s, 7*s, false, view("g/t", history.Cancelled, history.Cancelled)),
	}
	if l := Linearizable(ops, 0); !l.OK() {
		t.Fatalf("rejected: %+v", l)
	}
	in := goodInput()
	for i := range in.Tables {
		in.Tables[i].Tasks["h/t"] = view("h/t", history.Cancelled, history.Running)
	}
	if v := Judge(in); !v.Pass() || v.ActiveAtEnd != 1 {
		t.Fatalf("active at the end %d, failures %v", v.ActiveAtEnd, v.Failures)
	}
}

// TestJudgeOverlapsOnlyInAWorkerFreeze: two executions of one task may
// overlap only while the worker of one of them is frozen (the lease
// rule); such overlaps are counted apart, any other fails the run.
func TestJudgeOverlapsOnlyInAWorkerFreeze(t *testing.T) {
	// Attempt 1 on w1 runs 1..5, attempt 2 on w2 from 3: they overlap 3..5.
	overlap := []Execution{
		{Attempt: 1, Worker: "w1", At: 1 * s}, {Attempt: 2, Worker: "w2", At: 3 * s},
		{Attempt: 1, Worker: "w1", End: true, Stopped: true, At: 5 * s}, {Attempt: 2, Worker: "w2", End: true, At: 9 * s}}
	for _, tc := range []struct {
		name          string
		freezes       []Freeze
		slack         int64
		fail          bool
		over, allowed int
	}{
		{"no freeze", nil, 0, true, 1, 0},
		{"w1 frozen over the overlap", []Freeze{{Worker: "w1", From: 2 * s, To: 6 * s}}, 0, false, 0, 1},
		{"the other worker frozen", []Freeze{{Worker: "w2", From: 2 * s, To: 6 * s}}, 0, false, 0, 1},
		{"w1 thawed, stopped within the slack", []Freeze{{Worker: "w1", From: 2 * s, To: 4 * s}}, 2 * s, false, 0, 1},
		{"w1 thawed, ran past the slack", []Freeze{{Worker: "w1", From: 2 * s, To: 4 * s}}, s / 2, true, 1, 0},
		{"the overlap began before the freeze", []Freeze{{Worker: "w1", From: 4 * s, To: 6 * s}}, 0, true, 1, 0},
		{"a freeze of an unrelated worker", []Freeze{{Worker: "w3", From: 0, To: 10 * s}}, 0, true, 1, 0},
		{"a freeze long before", []Freeze{{Worker: "w1", From: 0, To: 2 * s}}, 0, true, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := goodInput()
			in.Executions["g/t"] = overlap
			in.Freezes, in.FreezeSlack = tc.freezes, time.Duration(tc.slack)
			v := Judge(in)
			failed := strings.Contains(strings.Join(v.Failures, " "), "at the same time")
			if failed != tc.fail || v.Pass() == tc.fail || v.Overlapping != tc.over || v.OverlapAllowed != tc.allowed {
				t.Fatalf("failures %v, overlapping %d, allowed %d; want fail %v, %d, %d (details %v)",
					v.Failures, v.Overlapping, v.OverlapAllowed, tc.fail, tc.over, tc.allowed, v.Details)
			}
		})
	}
}

// TestJudgeDoesNotCompareUnendedExecutions: an execution killed by
// SIGKILL has no end line; it is counted, not compared.
func TestJudgeDoesNotCompareUnendedExecutions(t *testing.T) {
	in := goodInput()
	in.Executions["g/t"] = []Execution{
		{Attempt: 1, Worker: "w1", At: 1 * s}, {Attempt: 2, Worker: "w2", At: 3 * s},
		{Attempt: 2, Worker: "w2", End: true, At: 9 * s}}
	v := Judge(in)
	if !v.Pass() || v.Unended != 1 || v.Overlapping != 0 || v.ReExecuted != 1 {
		t.Fatalf("unended %d, overlapping %d, re-executed %d, failures %v", v.Unended, v.Overlapping, v.ReExecuted, v.Failures)
	}
}
