package state

import (
	"fmt"
	"slices"
	"strings"

	"github.com/megaflow/megaflow/internal/wire"
)

// Gangs. The tasks of a graph with the same TaskSpec.gang start all at
// once, each on its own worker, or not at all (multi-node training): the
// leader places a gang only when every task of it is QUEUED with no
// attempt still running, in one plan. The table keeps them together
// afterwards (gangFollow, called by every move of a gang's task):
//
//   - An attempt of one that fails or is lost, with a retry left, sends it
//     back to QUEUED as usual; every other task of the gang ASSIGNED or
//     RUNNING goes back to QUEUED too, its attempt left running until its
//     worker reports it stopped (Task.Stopping), and not charged to its
//     retries or its lost count: the gang restarts as a whole.
//   - One that ends without succeeding (FAILED, TIMED_OUT, CANCELLED)
//     cancels every other task of the gang not yet terminal, with the
//     reason `gang "train": task "rank-1" failed: exit code 3`.
//   - Once a task of the gang has SUCCEEDED, a failure of another is not
//     retried (gangNoRetry): the gang could only be retried whole, and a
//     succeeded task never runs again.

// gangFollow makes the other tasks of n's gang follow n's move from state
// from; see the package's notes on gangs above. It does nothing while the
// whole graph is being cancelled.
func (t *Txn) gangFollow(from wire.TaskState, n *Task, nanos int64) {
	if t.cancelling == n.GraphID {
		return
	}
	gang := n.Spec.GetGang()
	switch {
	case IsTerminal(n.State) && n.State != succeeded:
		why := fmt.Sprintf("gang %q: task %q %s", gang, n.Name(), stateWord(n.State))
		switch {
		case n.ReasonCode == wire.ReasonCode_REASON_CODE_GANG:
			why = n.Reason // n followed another task of the gang: name that one
		case n.Reason != "":
			why += ": " + n.Reason
		}
		for _, o := range t.gangOf(n) {
			if _, err := t.CancelTask(o.ID, wire.ReasonCode_REASON_CODE_GANG, why, nanos); err != nil {
				panic(fmt.Sprintf("state: index %d: %v", t.index, err))
			}
		}
	case IsActive(from) && n.State == queued:
		why := fmt.Sprintf("gang %q restarts: task %q: %s", gang, n.Name(), n.Reason)
		for _, o := range t.gangOf(n) {
			if cur := t.Task(o.ID); IsActive(cur.State) {
				t.moveTask(cur, queued, wire.ReasonCode_REASON_CODE_GANG, why, nanos, nil, true)
			}
		}
	}
}

// gangKey is the indexGang key of gang gang of graph graphID (neither
// holds a '/').
func gangKey(graphID, gang string) string { return graphID + "/" + gang }

// GangTasks returns the tasks of gang gang of graph graphID, in id order
// (an index lookup, not a scan of the graph).
func (t *Txn) GangTasks(graphID, gang string) []*Task {
	return collect[*Task](get(t.taskTxnFor(indexGang), tableTasks, indexGang, gangKey(graphID, gang)))
}

// gangOf returns the other tasks of task's gang, in id order.
func (t *Txn) gangOf(task *Task) []*Task {
	var out []*Task
	for _, o := range t.GangTasks(task.GraphID, task.Spec.GetGang()) {
		if o.ID != task.ID {
			out = append(out, o)
		}
	}
	return out
}

// gangNoRetry returns why a failed attempt of cur may not be retried
// because of its gang (a task of it already SUCCEEDED), to append to the
// failure's reason, or "".
func (t *Txn) gangNoRetry(cur *Task) string {
	if cur.Spec.GetGang() == "" {
		return ""
	}
	for _, o := range t.gangOf(cur) {
		if o.State == succeeded {
			return fmt.Sprintf(" (not retried: task %q of gang %q already succeeded, and a gang is retried only as a whole)", o.Name(), cur.Spec.GetGang())
		}
	}
	return ""
}

// stateWord is a task state in lower case without its prefix: "failed".
func stateWord(s wire.TaskState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "TASK_STATE_"))
}

// GangMembers returns the tasks of the gang named gang in the graph
// graphID, in rank order (GangLess), from the view.
func (v *View) GangMembers(graphID, gang string) []*Task {
	out := collect[*Task](get(v.txn(), tableTasks, indexGang, gangKey(graphID, gang)))
	slices.SortFunc(out, func(a, b *Task) int {
		switch {
		case GangLess(a.Name(), b.Name()):
			return -1
		case GangLess(b.Name(), a.Name()):
			return 1
		}
		return 0
	})
	return out
}

// GangLess orders the task names of a gang into ranks: by name, with runs
// of digits compared as numbers, so that "rank-2" comes before "rank-10".
// Names equal as numbers ("r01", "r1") fall back to plain byte order.
func GangLess(a, b string) bool {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		ca, cb := a[i], b[j]
		if isDigit(ca) && isDigit(cb) {
			si, sj := i, j
			for i < len(a) && isDigit(a[i]) {
				i++
			}
			for j < len(b) && isDigit(b[j]) {
				j++
			}
			na := strings.TrimLeft(a[si:i], "0")
			nb := strings.TrimLeft(b[sj:j], "0")
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			continue
		}
		if ca != cb {
			return ca < cb
		}
		i++
		j++
	}
	if len(a)-i != len(b)-j {
		return len(a)-i < len(b)-j
	}
	return a < b
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
