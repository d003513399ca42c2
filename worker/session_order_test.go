package worker

import (
	"fmt"
	"testing"
	"time"
)

// execTasks returns the tasks of the runtime's Exec calls, in call order.
func (r *fakeRT) execTasks() []string {
	var out []string
	for _, c := range r.Calls() {
		if c.Op == "Exec" {
			out = append(out, c.Spec.Env["MEGAFLOW_TASK_ID"])
		}
	}
	return out
}

// Tasks of one session get its container in the order they were assigned,
// and the wait for it does not count against their timeouts: 8 tasks with
// a 10 s timeout, each exec held for 9 s of the worker's clock, all exit
// in order although the last waited 63 s. Before the fix every waiter was
// woken when the container freed up and the first to run took it, and the
// timeout counted from the assignment: tasks timed out without ever
// running (issue 18, finding 12: 9 of 200 TIMED_OUT with start == finish).
func TestSessionTasksRunInOrderAndTimeOutFromTheirExec(t *testing.T) {
	head := newFakeHead(t, "h1")
	rt := newPoolRT(t)
	clock := newFakeClock()
	cfg := poolConfig(t, rt, head, 3)
	cfg.Clock = clock
	cfg.BatchDelay = 0
	cfg.HeartbeatInterval = time.Hour
	cfg.ReconcileInterval = time.Hour
	startWorker(t, cfg)
	const n = 8
	for i := range n {
		s := pspec("s1", "work")
		s.TimeoutSeconds = 10
		head.send(assignMsg(fmt.Sprintf("g/t%d", i), 1, s))
	}
	for i := range n {
		task := fmt.Sprintf("g/t%d", i)
		waitFor(t, 10*time.Second, task+"'s exec", func() bool { return len(rt.execTasks()) == i+1 && rt.clock.Waiters() >= 1 })
		if got := rt.execTasks()[i]; got != task {
			t.Fatalf("exec %d ran %s, want %s (assignment order); execs so far %v", i, got, task, rt.execTasks())
		}
		head.waitEvent(task, 1, kindStarted) // its deadline is armed
		clock.Advance(9 * time.Second)       // within its own timeout, past the others' from assignment
		rt.clock.Advance(time.Hour)          // the exec ends
		head.waitEvent(task, 1, kindExited)
	}
	for i := range n {
		for _, e := range head.eventsOf(fmt.Sprintf("g/t%d", i), 1) {
			if e.GetKind() == kindTimedOut {
				t.Errorf("g/t%d timed out: %v", i, e)
			}
		}
	}
}
