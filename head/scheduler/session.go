package scheduler

import (
	"fmt"
	"strings"
)

// SessionAttempt is an attempt of a session task, as the head's table
// knows it: where it ran, and when. PinSessions reads a list of them.
type SessionAttempt struct {
	// Graph is the graph id of the attempt's task.
	Graph string
	// Session is the task's session key.
	Session string
	// WorkerID is the worker the attempt was placed on.
	WorkerID string
	// Order orders attempts in time (the assignment's Unix nanoseconds, or
	// its commit index): the attempt with the largest Order decides.
	Order int64
}

// PinSessions sets PinnedWorker on every task of tasks with a Session to
// the worker of the most recent attempt (largest Order) of any task of the
// same graph and session in attempts. Tasks without a Session, or whose
// session has no attempt yet, are left as they are. The head leader calls
// it while it builds an Input, before Place; it modifies tasks in place and
// reads attempts only.
func PinSessions(tasks []Task, attempts []SessionAttempt) {
	type latest struct {
		worker string
		order  int64
	}
	last := map[string]latest{}
	for _, a := range attempts {
		if a.Session == "" || a.WorkerID == "" {
			continue
		}
		k := sessionKey(a.Graph, a.Session)
		if l, ok := last[k]; !ok || a.Order > l.order || a.Order == l.order && a.WorkerID < l.worker {
			last[k] = latest{a.WorkerID, a.Order}
		}
	}
	for i := range tasks {
		t := &tasks[i]
		if t.Session == "" {
			continue
		}
		if l, ok := last[sessionKey(GraphOf(t.ID), t.Session)]; ok {
			t.PinnedWorker = l.worker
		}
	}
}

// GraphOf returns the graph id of task id "<graph id>/<task name>".
func GraphOf(taskID string) string {
	g, _, _ := strings.Cut(taskID, "/")
	return g
}

// sessionKey names one session of one graph.
func sessionKey(graph, session string) string { return graph + "\x00" + session }

// pin returns the worker t must go to this round, if any: its
// PinnedWorker when that worker is in the input, else the worker a task of
// its session was placed on earlier in the round.
func (r *round) pin(t *ptask) (*worker, bool) {
	if id := t.t.PinnedWorker; id != "" {
		if i, ok := r.workerIndex[id]; ok {
			return r.workers[i], true
		}
	}
	if t.t.Session != "" {
		if w := r.sessionOn[sessionKey(GraphOf(t.t.ID), t.t.Session)]; w != nil {
			return w, true
		}
	}
	return nil, false
}

// placePinned places t on w if it fits there now, and reports whether it
// did; a pinned task never goes elsewhere and holds no worker. A task
// pinned to the worker of its session's earlier attempts runs in the
// session's existing container: it is no container start, so the worker's
// start cap does not apply to it (else starts waiting for pool room could
// block the very sessions whose end makes that room).
func (r *round) placePinned(t *ptask, w *worker, f finder) bool {
	// A task pinned without a session (a sandbox from a snapshot, pinned
	// to the worker holding the image) starts a container like any other.
	inSessionContainer := t.t.PinnedWorker == w.id && t.t.Session != ""
	fits := w.selects(t) && w.roomFor(t, true) && (inSessionContainer || w.startOK())
	if !fits {
		r.pinWait[t.idx] = w
		return false
	}
	delete(r.pinWait, t.idx)
	r.place(t, w)
	if inSessionContainer {
		w.starts-- // place counted a start slot it does not use
	}
	f.changed(w)
	return true
}

// pinReason is the reason of a pinned task that found no room on its
// worker.
func pinReason(t *ptask, w *worker) Reason {
	kind := ReasonCapacity
	if !w.startOK() && (t.t.PinnedWorker != w.id || t.t.Session == "") && w.selects(t) && w.roomFor(t, true) {
		kind = ReasonStartLimit
	}
	if t.t.Session == "" {
		return Reason{Kind: kind, Message: fmt.Sprintf("waiting for room on worker %s, the only one it may run on", w.id)}
	}
	return Reason{Kind: kind, Message: fmt.Sprintf("waiting for session %s's worker %s", t.t.Session, w.id)}
}
