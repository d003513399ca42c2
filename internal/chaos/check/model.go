// Package check owns the chaos harness's verdict: a porcupine model of the
// task table, partitioned by task, against which the recorded client
// history must be linearizable, and the direct checks of the healed
// cluster at the end (every acknowledged graph present, every task
// terminal, no result recorded twice, every head with the same table).
// Everything here is pure: histories and tables in, a Verdict out.
//
// Imported by internal/chaos/harness and cmd/megaflow-bench.
package check

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/megaflow/megaflow/internal/chaos/history"
)

// taskState is the model's state of one task: what a linearizable
// observer knows of it at a point of the linearization.
type taskState struct {
	exists bool
	// attempts and rank order the life cycle: (number of attempts, rank
	// of the state) only grows.
	attempts uint32
	rank     uint8
	// final is the terminal state once one is known to hold; finalAny
	// marks "terminal, kind not known yet" (a cancel that found the task
	// finished, or cancelled it while the task's attempts are not known).
	final    history.State
	finalAny bool
	// exact: attempts and result are as last read (false after a cancel
	// moved the task without a read).
	exact  bool
	result uint64
}

func (s taskState) terminal() bool { return s.final != 0 || s.finalAny }

// rank orders states within one attempt count: PENDING, QUEUED before any
// attempt, ASSIGNED, RUNNING, QUEUED again for a retry, terminal.
func rank(st history.State, attempts int) uint8 {
	switch st {
	case history.Pending:
		return 0
	case history.Queued:
		if attempts == 0 {
			return 1
		}
		return 4
	case history.Assigned:
		return 2
	case history.Running:
		return 3
	}
	return 5
}

// input is what an operation asked, per task.
type input struct {
	kind history.Kind
	// exact: a cancel whose count is this task's alone.
	exact bool
}

// output is what an operation answered, per task.
type output struct {
	unknown   bool
	notFound  bool
	failed    bool
	cancelled uint32
	view      history.TaskView
}

// ViewProblem returns what is wrong with one read of a task on its own,
// whatever came before ("" when nothing): more than one active attempt,
// more than one succeeded attempt (a result recorded twice), a task that
// ended other than CANCELLED with an active attempt (a cancelled task's
// attempt stays active until its worker reports it stopped), a SUCCEEDED
// task without its succeeded attempt.
func ViewProblem(v history.TaskView) string {
	if !v.Found {
		return ""
	}
	active, ok := 0, 0
	for _, a := range v.Attempts {
		if a.State.Active() {
			active++
		}
		if a.State == history.Succeeded {
			ok++
		}
	}
	switch {
	case active > 1:
		return fmt.Sprintf("%s: %d attempts active at once", v.ID, active)
	case ok > 1:
		return fmt.Sprintf("%s: %d succeeded attempts (result recorded twice)", v.ID, ok)
	case v.State.Terminal() && v.State != history.Cancelled && active > 0:
		return fmt.Sprintf("%s: %s with an active attempt", v.ID, v.State)
	case v.State == history.Succeeded && ok != 1:
		return fmt.Sprintf("%s: SUCCEEDED without a succeeded attempt", v.ID)
	}
	return ""
}

// step is the model's transition: whether the operation could answer out
// in state s, and the state after it.
func step(s taskState, in input, out output) (bool, taskState) {
	if out.unknown {
		// It may have taken effect here (its linearization point); it says
		// nothing about the state.
		switch in.kind {
		case history.Submit:
			s.exists = true
		case history.CancelTask, history.CancelGraph:
			if s.exists && !s.terminal() {
				s.finalAny, s.exact = true, false
			}
		}
		return true, s
	}
	if out.failed {
		return true, s
	}
	switch in.kind {
	case history.Submit:
		s.exists = true
		return true, s
	case history.CancelTask, history.CancelGraph:
		if out.notFound {
			return !s.exists, s
		}
		// A definite answer other than NotFound: the graph exists (another
		// client may have submitted it, outside this partition).
		s.exists = true
		if in.exact {
			if out.cancelled > 0 {
				if s.terminal() {
					return false, s
				}
				s.final, s.finalAny, s.exact = history.Cancelled, false, false
				return true, s
			}
			if !s.terminal() {
				s.finalAny, s.exact = true, false
			}
			return true, s
		}
		if !s.terminal() {
			s.finalAny, s.exact = true, false
		}
		return true, s
	case history.Read:
		v := out.view
		if !v.Found {
			return !s.exists, s
		}
		if ViewProblem(v) != "" {
			return false, s
		}
		n := uint32(len(v.Attempts))
		r := rank(v.State, len(v.Attempts))
		if s.terminal() {
			if !v.State.Terminal() || n < s.attempts {
				return false, s
			}
			if s.final != 0 && v.State != s.final {
				return false, s
			}
			if s.exact && (n != s.attempts || v.Result != s.result) {
				return false, s
			}
		} else if n < s.attempts || (n == s.attempts && r < s.rank) {
			return false, s
		}
		s.exists, s.attempts, s.rank, s.exact, s.result = true, n, r, true, v.Result
		if v.State.Terminal() {
			s.final, s.finalAny = v.State, false
		}
		return true, s
	}
	return false, s
}

// model is the porcupine model of one task.
var model = porcupine.Model{
	Init: func() interface{} { return taskState{} },
	Step: func(st, in, out interface{}) (bool, interface{}) {
		return step(st.(taskState), in.(input), out.(output))
	},
	DescribeOperation: func(in, out interface{}) string {
		i, o := in.(input), out.(output)
		switch {
		case o.unknown:
			return i.kind.String() + " -> ?"
		case o.notFound:
			return i.kind.String() + " -> not found"
		case i.kind == history.Read:
			return fmt.Sprintf("read -> %s, %d attempts", o.view.State, len(o.view.Attempts))
		}
		return fmt.Sprintf("%s -> %d", i.kind, o.cancelled)
	},
	DescribeState: func(st interface{}) string { return fmt.Sprintf("%+v", st.(taskState)) },
}

// Linearizability is the outcome of the history check.
type Linearizability struct {
	// Partitions checked: one per task (writes and linearizable reads of
	// every client) and one per (client, task) (that client's writes and
	// session reads).
	Partitions int
	// Ops is how many per-task operations were checked.
	Ops int
	// Illegal lists the partitions with no linearization ("" when none).
	Illegal []string
	// TimedOut counts partitions the checker gave up on.
	TimedOut int
	// Examples describe the operations of the first illegal partitions.
	Examples []string
}

// OK reports whether every partition was linearizable.
func (l Linearizability) OK() bool { return len(l.Illegal) == 0 && l.TimedOut == 0 }

// perTask splits op into one porcupine operation per task it concerns.
func perTask(op history.Op, id int) map[string]porcupine.Operation {
	out := map[string]porcupine.Operation{}
	for i, t := range op.Tasks {
		in := input{kind: op.Kind, exact: (op.Kind == history.CancelTask || op.Kind == history.CancelGraph) && len(op.Tasks) == 1}
		o := output{unknown: op.Return == history.Unknown, notFound: op.NotFound, failed: op.Failed, cancelled: op.Cancelled}
		if op.Kind == history.Read && !o.unknown && !o.failed {
			if i < len(op.Views) {
				o.view = op.Views[i]
			}
			if op.NotFound {
				o.view = history.TaskView{ID: t}
			}
		}
		out[t] = porcupine.Operation{ClientId: op.Client, Input: in, Call: op.Call, Output: o, Return: op.Return, Metadata: meta{index: id, linear: op.Linearizable}}
	}
	return out
}

// Linearizable checks ops against the model: per task, every client's
// writes with the linearizable reads; per (client, task), that client's
// writes with its session reads (a session-consistent client reads its own
// writes and never goes back in time). timeout bounds each partition.
// Watch ops are not part of it (see Watches).
func Linearizable(ops []history.Op, timeout time.Duration) Linearizability {
	lin := map[string][]porcupine.Operation{}
	type ck struct {
		client int
		task   string
	}
	sess := map[ck][]porcupine.Operation{}
	for i, op := range ops {
		if op.Kind == history.Watch {
			continue
		}
		if op.Kind == history.Read && op.Return == history.Unknown {
			continue // a read without an answer constrains nothing
		}
		for t, p := range perTask(op, i) {
			write := op.Kind != history.Read
			if write || op.Linearizable {
				lin[t] = append(lin[t], p)
			}
			if write || !op.Linearizable {
				k := ck{op.Client, t}
				sess[k] = append(sess[k], p)
			}
		}
	}
	var res Linearizability
	run := func(name string, h []porcupine.Operation) {
		res.Partitions++
		res.Ops += len(h)
		switch porcupine.CheckOperationsTimeout(model, h, timeout) {
		case porcupine.Illegal:
			res.Illegal = append(res.Illegal, name)
			if len(res.Examples) < 3 {
				res.Examples = append(res.Examples, describe(name, h))
			}
		case porcupine.Unknown:
			res.TimedOut++
		}
	}
	keys := make([]string, 0, len(lin))
	for k := range lin {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		run("task "+k, lin[k])
	}
	skeys := make([]ck, 0, len(sess))
	for k := range sess {
		skeys = append(skeys, k)
	}
	sort.Slice(skeys, func(i, j int) bool {
		if skeys[i].task != skeys[j].task {
			return skeys[i].task < skeys[j].task
		}
		return skeys[i].client < skeys[j].client
	})
	for _, k := range skeys {
		run(fmt.Sprintf("client %d, task %s", k.client, k.task), sess[k])
	}
	return res
}

// describe renders a partition's operations, in call order, for reports.
func describe(name string, h []porcupine.Operation) string {
	ops := append([]porcupine.Operation(nil), h...)
	sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	var b strings.Builder
	fmt.Fprintf(&b, "%s:", name)
	for i, o := range ops {
		if i == 12 {
			fmt.Fprintf(&b, " ... (%d more)", len(ops)-i)
			break
		}
		ret := "?"
		if o.Return != history.Unknown {
			ret = fmt.Sprintf("%.3f", float64(o.Return)/1e9)
		}
		lin := ""
		if in := o.Input.(input); in.kind == history.Read {
			lin = " session"
			if o.Metadata != nil {
				if l, ok := o.Metadata.(meta); ok && l.linear {
					lin = " linearizable"
				}
			}
		}
		fmt.Fprintf(&b, " [c%d %.3f-%s%s %s]", o.ClientId, float64(o.Call)/1e9, ret, lin, model.DescribeOperation(o.Input, o.Output))
	}
	return b.String()
}

// meta is a porcupine operation's metadata: its index in the history and
// whether it is a linearizable read.
type meta struct {
	index  int
	linear bool
}
