package check

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"time"

	"github.com/megaflow/megaflow/internal/chaos/history"
)

// Table is one head's task table at the end of a run.
type Table struct {
	Head string
	// Applied is the Raft index the head had applied.
	Applied uint64
	// Tasks by id.
	Tasks map[string]history.TaskView
	// Graphs by id: their state's name.
	Graphs map[string]string
}

// Digest is a hash of the table's content (not of Head or Applied).
func (t Table) Digest() uint64 {
	h := fnv.New64a()
	ids := make([]string, 0, len(t.Tasks))
	for id := range t.Tasks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		v := t.Tasks[id]
		fmt.Fprintf(h, "%s %d %d;", id, v.State, v.Result)
		for _, a := range v.Attempts {
			fmt.Fprintf(h, "%d %s %d,", a.Number, a.Worker, a.State)
		}
	}
	gs := make([]string, 0, len(t.Graphs))
	for id := range t.Graphs {
		gs = append(gs, id)
	}
	sort.Strings(gs)
	for _, id := range gs {
		fmt.Fprintf(h, "g %s %s;", id, t.Graphs[id])
	}
	return h.Sum64()
}

// Execution is one line of a task's execution file: an execution of one
// attempt started (End false) or ended, on a worker, at a time (Unix ns).
// Stopped marks an end by a signal (SIGTERM or SIGINT: a cancel, a
// timeout, a lease lapse); an execution killed by SIGKILL writes no end.
type Execution struct {
	Attempt uint32
	Worker  string
	End     bool
	Stopped bool
	At      int64
}

// Freeze is a window during which a worker process was frozen (from
// before its SIGSTOP to after its SIGCONT), in Unix ns like Execution.At.
type Freeze struct {
	Worker   string
	From, To int64
}

// Input is everything the verdict is computed from.
type Input struct {
	// Ops is the recorded client history.
	Ops []history.Op
	// Tables are the heads' tables after healing and quiescence, the
	// leader's first.
	Tables []Table
	// Executions by task id, from the per-task files on the workers' hosts.
	Executions map[string][]Execution
	// LeakedProcesses counts processes left in the cluster's hosts after
	// every head and worker was stopped.
	LeakedProcesses int
	// LogProblems are lines of the logs showing a panic or a data race.
	LogProblems []string
	// QuiesceError is set when the cluster did not settle (tasks still
	// running, indexes apart) within its deadline.
	QuiesceError string
	// CheckTimeout bounds the checker per partition (0: 10 s).
	CheckTimeout time.Duration
	// Freezes are the worker freezes of the run. Two executions of one
	// task may overlap in time only while the worker of one of them was
	// frozen (docs/reliability.md, the lease rule): the overlap must begin
	// within a freeze of that worker and end at most FreezeSlack after the
	// freeze ended (the thawed worker stops its stale attempts before
	// anything else; their processes take a moment to end).
	Freezes     []Freeze
	FreezeSlack time.Duration
}

// Clone returns a copy of in whose tables can be edited without changing in's.
func (in Input) Clone() Input {
	out := in
	out.Tables = make([]Table, len(in.Tables))
	for i, t := range in.Tables {
		c := t
		c.Tasks = make(map[string]history.TaskView, len(t.Tasks))
		for id, v := range t.Tasks {
			c.Tasks[id] = v
		}
		out.Tables[i] = c
	}
	return out
}

// Verdict is the outcome of a run: figures and the reasons it failed.
type Verdict struct {
	// Acknowledged client operations (definite answers), and those whose
	// outcome is unknown.
	Acknowledged, Unknown int
	// AckedGraphs and AckedTasks: acknowledged submissions and their tasks.
	AckedGraphs, AckedTasks int
	// Lost: acknowledged tasks missing from a head's table at the end.
	Lost int
	// NotTerminal: tasks not terminal at the end.
	NotTerminal int
	// DuplicateResults: tasks with more than one succeeded attempt, at the
	// end or in any read.
	DuplicateResults int
	// ReadProblems: reads that saw an impossible task (ViewProblem).
	ReadProblems int
	// WatchProblems: watch events out of order or after a terminal event
	// of another state.
	WatchProblems int
	// Lin is the history check.
	Lin Linearizability
	// HeadsAgree: every head applied the same index and holds the same table.
	HeadsAgree bool
	// Executions counted from the hosts' files; ReExecuted: tasks executed
	// more than once (retries, allowed: tasks run at least once);
	// Overlapping: tasks with two executions running at the same time
	// outside what the lease rule allows (a failure); OverlapAllowed:
	// tasks whose executions overlapped only while the worker of one of
	// them was frozen (allowed, reported); SameAttemptTwice: one attempt
	// executed twice; Unended: executions with no end line (killed with
	// SIGKILL: when they stopped is not known, so they are not compared).
	Executions, ReExecuted, Overlapping, OverlapAllowed, SameAttemptTwice, Unended int
	// Requeued: tasks of the leader's table with an attempt lost with its
	// worker (a lapsed lease, a worker declared down) and run again.
	Requeued int
	// ActiveAtEnd: terminal tasks of the leader's table whose last attempt
	// is still active once the cluster settled (a cancelled task's attempt
	// whose stop was never reported); reported, not failed.
	ActiveAtEnd int
	// States counts the tasks of the leader's table by final state.
	States map[string]int
	// LeakedProcesses as given.
	LeakedProcesses int
	// Failures says why the run failed; empty: it passed.
	Failures []string
	// Details are examples behind the figures (at most a few per kind).
	Details []string
}

// Pass reports whether the run passed.
func (v *Verdict) Pass() bool { return len(v.Failures) == 0 }

func (v *Verdict) fail(format string, args ...any) {
	v.Failures = append(v.Failures, fmt.Sprintf(format, args...))
}

func (v *Verdict) detail(kind string, n *int, format string, args ...any) {
	if *n < 5 {
		v.Details = append(v.Details, kind+": "+fmt.Sprintf(format, args...))
	}
	*n++
}

// Judge computes the verdict. It fails the run on: an acknowledged task
// missing at the end, a task not terminal, a result recorded twice, a
// read of an impossible task, a watch out of order, a history that is not
// linearizable (or that the checker could not decide), heads that
// disagree, leaked processes, panics or races in the logs, a cluster
// that did not settle, or two executions of one task overlapping in time
// other than while the worker of one of them was frozen (those are
// counted apart, not failed).
func Judge(in Input) Verdict {
	v := Verdict{States: map[string]int{}, LeakedProcesses: in.LeakedProcesses}
	timeout := in.CheckTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	acked := map[string]bool{} // task ids
	var nRead int
	for _, op := range in.Ops {
		if op.Kind == history.Watch {
			continue
		}
		if op.Return == history.Unknown {
			v.Unknown++
		} else {
			v.Acknowledged++
		}
		if op.Kind == history.Submit && op.Acknowledged() {
			v.AckedGraphs++
			for _, t := range op.Tasks {
				acked[t] = true
			}
		}
		for _, view := range op.Views {
			if p := ViewProblem(view); p != "" {
				v.detail("read", &nRead, "client %d at %.3fs: %s", op.Client, float64(op.Call)/1e9, p)
				if strings.Contains(p, "recorded twice") {
					v.DuplicateResults++
				}
			}
		}
	}
	v.ReadProblems = nRead
	v.AckedTasks = len(acked)
	v.WatchProblems = watchProblems(in.Ops, &v)

	v.Lin = Linearizable(in.Ops, timeout)
	for _, e := range v.Lin.Examples {
		v.Details = append(v.Details, "not linearizable: "+e)
	}

	if in.QuiesceError != "" {
		v.fail("the cluster did not settle: %s", in.QuiesceError)
	}
	if len(in.Tables) == 0 {
		v.fail("no head's table was read at the end")
	}
	var nLost, nTerm, nDup, nBad int
	v.HeadsAgree = len(in.Tables) > 0
	for i, t := range in.Tables {
		if i > 0 && (t.Applied != in.Tables[0].Applied || t.Digest() != in.Tables[0].Digest()) {
			v.HeadsAgree = false
			v.Details = append(v.Details, fmt.Sprintf("heads: %s applied %d (table %x), %s applied %d (table %x)",
				in.Tables[0].Head, in.Tables[0].Applied, in.Tables[0].Digest(), t.Head, t.Applied, t.Digest()))
		}
		ids := make([]string, 0, len(acked))
		for id := range acked {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			if _, ok := t.Tasks[id]; !ok {
				v.detail("lost", &nLost, "%s missing from head %s", id, t.Head)
			}
		}
		if i > 0 {
			continue
		}
		tids := make([]string, 0, len(t.Tasks))
		for id := range t.Tasks {
			tids = append(tids, id)
		}
		sort.Strings(tids)
		for _, id := range tids {
			view := t.Tasks[id]
			v.States[view.State.String()]++
			if view.Lost > 0 {
				v.Requeued++
			}
			if !view.State.Terminal() {
				v.detail("not terminal", &nTerm, "%s is %s at the end", id, view.State)
			}
			ok := 0
			for _, a := range view.Attempts {
				if a.State == history.Succeeded {
					ok++
				}
			}
			if ok > 1 {
				v.detail("duplicate", &nDup, "%s has %d succeeded attempts", id, ok)
			}
			if p := ViewProblem(view); p != "" && ok <= 1 {
				v.detail("table", &nBad, "head %s: %s", t.Head, p)
			}
			if n := len(view.Attempts); view.State.Terminal() && n > 0 && view.Attempts[n-1].State.Active() {
				v.detail("active at the end", &v.ActiveAtEnd, "%s is %s, its attempt %d still %s", id, view.State, n, view.Attempts[n-1].State)
			}
		}
	}
	v.Lost, v.NotTerminal = nLost, nTerm
	v.DuplicateResults += nDup
	executions(in, &v)

	if v.Lost > 0 {
		v.fail("%d acknowledged tasks lost", v.Lost)
	}
	if v.NotTerminal > 0 {
		v.fail("%d tasks not terminal after healing", v.NotTerminal)
	}
	if v.DuplicateResults > 0 {
		v.fail("%d results recorded twice", v.DuplicateResults)
	}
	if v.ReadProblems > 0 {
		v.fail("%d reads saw an impossible task", v.ReadProblems)
	}
	if nBad > 0 {
		v.fail("%d impossible tasks in the final table", nBad)
	}
	if v.WatchProblems > 0 {
		v.fail("%d watch events out of order", v.WatchProblems)
	}
	if len(v.Lin.Illegal) > 0 {
		v.fail("history not linearizable in %d partitions: %s", len(v.Lin.Illegal), strings.Join(first(v.Lin.Illegal, 5), "; "))
	}
	if v.Lin.TimedOut > 0 {
		v.fail("the checker could not decide %d partitions within %v", v.Lin.TimedOut, timeout)
	}
	if len(in.Tables) > 0 && !v.HeadsAgree {
		v.fail("the heads disagree (applied index or table)")
	}
	if in.LeakedProcesses > 0 {
		v.fail("%d processes of the cluster left after it stopped", in.LeakedProcesses)
	}
	if v.Overlapping > 0 {
		v.fail("%d tasks ran two executions at the same time outside a worker freeze", v.Overlapping)
	}
	if len(in.LogProblems) > 0 {
		v.fail("%d panics or data races in the logs: %s", len(in.LogProblems), strings.Join(first(in.LogProblems, 3), "; "))
	}
	return v
}

func first(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// watchProblems counts watch events delivered out of cursor order on one
// stream (client), and tasks whose events on one stream show two
// different terminal states.
func watchProblems(ops []history.Op, v *Verdict) int {
	last := map[int]uint64{}
	lastSeq := map[int]uint32{}
	final := map[string]history.State{}
	n := 0
	for _, op := range ops {
		if op.Kind != history.Watch || len(op.Views) == 0 {
			continue
		}
		seq := op.Cancelled // a watch op carries the event's seq here
		if li, ok := last[op.Client]; ok && (op.Index < li || (op.Index == li && seq <= lastSeq[op.Client])) {
			v.detail("watch", &n, "stream %d: event (%d, %d) after (%d, %d)", op.Client, op.Index, seq, li, lastSeq[op.Client])
		}
		last[op.Client], lastSeq[op.Client] = op.Index, seq
		view := op.Views[0]
		if !view.State.Terminal() {
			continue
		}
		key := fmt.Sprintf("%d %s", op.Client, view.ID)
		if f, ok := final[key]; ok && f != view.State {
			v.detail("watch", &n, "stream %d: %s ended %s, then %s", op.Client, view.ID, f, view.State)
		}
		final[key] = view.State
	}
	return n
}

// executions counts the figures of the execution files and judges each
// pair of overlapping executions of a task against the freezes.
func executions(in Input, v *Verdict) {
	ex := in.Executions
	ids := make([]string, 0, len(ex))
	for id := range ex {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var nOver, nAllowed, nSame int
	for _, id := range ids {
		var runs []run
		open := map[string]int{} // attempt/worker -> index in runs
		seen := map[uint32]int{}
		for _, e := range ex[id] {
			key := fmt.Sprintf("%d/%s", e.Attempt, e.Worker)
			if !e.End {
				v.Executions++
				seen[e.Attempt]++
				open[key] = len(runs)
				runs = append(runs, run{start: e.At, attempt: e.Attempt, worker: e.Worker})
				continue
			}
			if i, ok := open[key]; ok {
				runs[i].end = e.At
				delete(open, key)
			}
		}
		if len(runs) > 1 {
			v.ReExecuted++
		}
		for _, r := range runs {
			if r.end == 0 {
				v.Unended++
			}
		}
		for a, c := range seen {
			if c > 1 {
				v.detail("same attempt twice", &nSame, "%s attempt %d executed %d times", id, a, c)
			}
		}
		var bad, allowed string
		for i := range runs {
			for j := i + 1; j < len(runs); j++ {
				a, b := runs[i], runs[j]
				if a.end == 0 || b.end == 0 {
					continue // killed: when it stopped is not known
				}
				if !(a.start < b.end && b.start < a.end) {
					continue
				}
				from, to := max(a.start, b.start), min(a.end, b.end)
				what := fmt.Sprintf("attempt %d on %s [%s] and attempt %d on %s [%s] overlapped %.3fs",
					a.attempt, a.worker, a.span(), b.attempt, b.worker, b.span(), float64(to-from)/1e9)
				if f, ok := duringFreeze(in, from, to, a.worker, b.worker); ok {
					if allowed == "" {
						allowed = fmt.Sprintf("%s: %s, within the freeze of %s [%s]", id, what, f.Worker, span(f.From, f.To))
					}
				} else if bad == "" {
					bad = fmt.Sprintf("%s: %s, outside any freeze of their workers", id, what)
				}
			}
		}
		switch {
		case bad != "":
			v.detail("overlapping", &nOver, "%s", bad)
		case allowed != "":
			v.detail("overlapping in a freeze", &nAllowed, "%s", allowed)
		}
	}
	v.Overlapping, v.OverlapAllowed, v.SameAttemptTwice = nOver, nAllowed, nSame
}

// run is one execution of a task: from its start line to its end or stop
// line (end 0: none).
type run struct {
	start, end int64
	attempt    uint32
	worker     string
}

func (r run) span() string { return span(r.start, r.end) }

// span shows a window of Unix ns as wall-clock times of day (UTC, ms).
func span(from, to int64) string {
	f := func(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000") }
	return f(from) + " to " + f(to)
}

// duringFreeze returns the freeze of worker a or b that allows an overlap
// from..to (Unix ns): it began within the freeze and ended at most
// in.FreezeSlack after it.
func duringFreeze(in Input, from, to int64, a, b string) (Freeze, bool) {
	for _, f := range in.Freezes {
		if (f.Worker == a || f.Worker == b) && f.From <= from && from <= f.To && to <= f.To+int64(in.FreezeSlack) {
			return f, true
		}
	}
	return Freeze{}, false
}

// InjectDuplicateResult is the harness's deliberately broken build: it
// edits in as a cluster that records a result twice would have left it
// (one more succeeded attempt on the first succeeded task of the first
// table). `megaflow-bench chaos --break duplicate-result` and the tests
// use it to show that the verdict fails. It changes nothing when no task
// succeeded.
func InjectDuplicateResult(in *Input) {
	if len(in.Tables) == 0 {
		return
	}
	ids := make([]string, 0, len(in.Tables[0].Tasks))
	for id, v := range in.Tables[0].Tasks {
		if v.State == history.Succeeded {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	sort.Strings(ids)
	t := in.Tables[0].Tasks[ids[0]]
	t.Attempts = append(append([]history.Attempt(nil), t.Attempts...),
		history.Attempt{Number: uint32(len(t.Attempts) + 1), Worker: "injected", State: history.Succeeded})
	in.Tables[0].Tasks[ids[0]] = t
}
