package state

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/megaflow/megaflow/internal/wire"
)

// What workers report about attempts, and what happens when attempts are
// lost. Every path that ends an attempt sets its state, reason, exit code
// and finish time; putTask then releases what it held on its worker.

const (
	// MaxLostAttempts is how many of a task's attempts may be lost (with
	// their worker, or stopped by a worker on its own) before the task
	// FAILED: the MaxLostAttempts-th loss fails it with the reason "lost 3
	// times". Losses are counted in lost_count, apart from the failures
	// charged to max_retries.
	MaxLostAttempts = 3
	// MaxResultBytes bounds the JSON result a task may record with success;
	// a longer result fails the task.
	MaxResultBytes = 64 << 10
)

// Short names for the event kinds.
const (
	evStarted  = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STARTED
	evExited   = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_EXITED
	evFailed   = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_FAILED
	evTimedOut = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_TIMED_OUT
	evStopped  = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STOPPED
	evLanded   = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_ARTIFACTS_LANDED
)

// ApplyAttemptEvent applies one event a worker reported about one attempt,
// at the leader's time unixNanos. The FSM calls it for each event of an
// OpTaskEvents, in order. It returns whether the event changed anything.
//
// Fencing: the event is ignored unless it names the task's current attempt,
// that attempt is active, and workerID (the worker whose stream delivered
// it) holds it. Events of an attempt that was lost, re-placed or already
// ended are thus rejected, and duplicates (workers deliver at least once)
// are harmless: an event that does not move the attempt is ignored too, so
// a result is recorded exactly once.
//
// For a task ASSIGNED or RUNNING:
//   - STARTED: ASSIGNED -> RUNNING (the attempt's start time).
//   - EXITED 0: SUCCEEDED with the event's result and dependents resolved;
//     a result over MaxResultBytes instead fails the task for good, with
//     the reason "result of N bytes exceeds 64 KiB".
//   - EXITED non-zero, FAILED: with retries left (retries_used <
//     max_retries) retries_used grows and the task goes back to QUEUED;
//     otherwise it FAILED and its dependents are resolved (cancelled as
//     upstream_failed). The attempt keeps the reason: the worker's, else
//     "OOM killed" or "exit code N".
//   - TIMED_OUT: the same, ending TIMED_OUT.
//   - STOPPED (the worker stopped it on its own): lost, as LoseAttempt.
//   - SERVICE_READY (service tasks): the attempt's endpoint is recorded
//     (service.go); an ASSIGNED attempt starts first.
//
// The end of an attempt of a service task whose restart policy restarts it
// sends the task back to QUEUED instead (service.go).
//
// EXITED and TIMED_OUT of an attempt still ASSIGNED start it first (the
// process ran; its STARTED was not delivered). For a task CANCELLED while
// its attempt ran, only the attempt changes: STARTED marks it RUNNING, and
// any end ends it as reported (STOPPED as CANCELLED), releasing its worker.
//
// A failure sent back to QUEUED is not placed before unixNanos +
// backoff.Wait(retries used) (Task.NotBeforeUnixNanos), a restarting
// service's before unixNanos + backoff.Wait(restarts); a lost attempt
// re-queues without a wait.
//
// Artifacts: a final event that applied with artifacts_pending marks its
// attempt ArtifactsPending; ARTIFACTS_LANDED clears it on the attempt of
// that number if workerID ran it, whatever the attempt's state (it comes
// after the end), and changes nothing else.
func (t *Txn) ApplyAttemptEvent(workerID string, ev *wire.AttemptEvent, unixNanos int64, backoff RetryBackoff) bool {
	if ev.GetKind() == evLanded {
		return t.setArtifactsPending(ev.GetTaskId(), ev.GetAttempt(), workerID, false, unixNanos)
	}
	if !t.applyAttemptEvent(workerID, ev, unixNanos, backoff) {
		return false
	}
	if ev.GetArtifactsPending() && ev.GetKind() != evStarted {
		t.setArtifactsPending(ev.GetTaskId(), ev.GetAttempt(), workerID, true, unixNanos)
	}
	return true
}

// setArtifactsPending sets ArtifactsPending of attempt number of the task
// if workerID ran it; it reports whether that changed the row.
func (t *Txn) setArtifactsPending(taskID string, number uint32, workerID string, pending bool, nanos int64) bool {
	cur := t.Task(taskID)
	if cur == nil {
		return false
	}
	for i := range cur.Attempts {
		a := &cur.Attempts[i]
		if a.Number != number || a.WorkerID != workerID || a.ArtifactsPending == pending {
			continue
		}
		n := cur.clone()
		n.Attempts = slices.Clone(n.Attempts)
		n.Attempts[i].ArtifactsPending = pending
		n.UpdateUnixNanos, n.ModifyIndex = nanos, t.index
		t.putTask(cur, n)
		return true
	}
	return false
}

func (t *Txn) applyAttemptEvent(workerID string, ev *wire.AttemptEvent, unixNanos int64, backoff RetryBackoff) bool {
	cur := t.Task(ev.GetTaskId())
	if cur == nil {
		return false
	}
	a := cur.ActiveAttempt()
	if a == nil || a.Number != ev.GetAttempt() || a.WorkerID != workerID {
		return false
	}
	if cur.Stopping() {
		return t.stoppingEvent(cur, ev, unixNanos)
	}
	if serviceRestarts(cur, ev) {
		t.restartService(cur, ev, unixNanos, backoff)
		return true
	}
	end := attemptEnd{exitCode: ev.GetExitCode(), backoff: backoff}
	switch ev.GetKind() {
	case evServiceReady:
		return t.serviceReady(cur, ev, unixNanos)
	case evStarted:
		if cur.State != assigned {
			return false
		}
		t.move(cur, running, wire.ReasonCode_REASON_CODE_UNSPECIFIED, "", unixNanos, nil)
	case evExited:
		cur = t.started(cur, unixNanos)
		if ev.GetExitCode() != 0 {
			end.state, end.reason, end.code = failed, exitReason(ev), exitCodeOf(ev)
			t.failOrRetryUnless(cur, ev.GetNotRetryable(), end, unixNanos)
			break
		}
		if n := len(ev.GetResult()); n > MaxResultBytes {
			end.state, end.reason, end.code = failed, fmt.Sprintf("result of %d bytes exceeds 64 KiB", n), wire.ReasonCode_REASON_CODE_RESULT_TOO_LARGE
			t.endAttempt(cur, failed, end.reason, end, unixNanos, nil)
			break
		}
		// A zero exit's reason is the worker's note on the result (a
		// MEGAFLOW_RESULT line ignored, and why): the task and the attempt
		// keep it, so a result is never dropped without a word.
		end.state, end.reason = succeeded, ev.GetReason()
		if end.reason != "" {
			end.code = wire.ReasonCode_REASON_CODE_RESULT_NOTE
		}
		t.endAttempt(cur, succeeded, end.reason, end, unixNanos, func(n *Task) { n.Result = ev.GetResult() })
	case evFailed:
		end.state, end.reason, end.code = failed, failReason(ev), exitCodeOf(ev)
		t.failOrRetryUnless(cur, ev.GetNotRetryable(), end, unixNanos)
	case evTimedOut:
		cur = t.started(cur, unixNanos)
		end.state, end.reason, end.code = timedOut, ev.GetReason(), wire.ReasonCode_REASON_CODE_TIMEOUT
		if end.reason == "" {
			end.reason = "timed out"
		}
		t.failOrRetry(cur, timedOut, end, unixNanos)
	case evStopped:
		end.state, end.reason, end.code = failed, "stopped by worker "+workerID, wire.ReasonCode_REASON_CODE_STOPPED_BY_WORKER
		if r := ev.GetReason(); r != "" {
			end.reason += ": " + r
		}
		t.lose(cur, end, unixNanos)
	default:
		return false
	}
	return true
}

// stoppingEvent applies an event of the active attempt of a task that was
// cancelled while the attempt ran; see ApplyAttemptEvent.
func (t *Txn) stoppingEvent(cur *Task, ev *wire.AttemptEvent, nanos int64) bool {
	n := cur.clone()
	a := n.editAttempt()
	switch ev.GetKind() {
	case evStarted:
		if a.State != assigned {
			return false
		}
		a.State, a.StartUnixNanos = running, nanos
	case evExited:
		a.State, a.ExitCode = succeeded, ev.GetExitCode()
		if a.ExitCode != 0 {
			a.State, a.Reason, a.ReasonCode = failed, exitReason(ev), exitCodeOf(ev)
		}
	case evFailed:
		a.State, a.Reason, a.ReasonCode, a.ExitCode = failed, failReason(ev), exitCodeOf(ev), ev.GetExitCode()
	case evTimedOut:
		a.State, a.Reason, a.ReasonCode, a.ExitCode = timedOut, ev.GetReason(), wire.ReasonCode_REASON_CODE_TIMEOUT, ev.GetExitCode()
		if a.Reason == "" {
			a.Reason = "timed out"
		}
	case evStopped:
		a.State, a.Reason, a.ReasonCode, a.ExitCode = cancelled, ev.GetReason(), cur.ReasonCode, ev.GetExitCode()
		if a.Reason == "" {
			a.Reason = cur.Reason
		}
	default:
		return false
	}
	if !IsActive(a.State) {
		a.FinishUnixNanos = nanos
	}
	n.UpdateUnixNanos, n.ModifyIndex = nanos, t.index
	t.putTask(cur, n)
	return true
}

// LoseAttempt loses attempt number attempt of the task with taskID on
// workerID if it is the task's current attempt and active there; otherwise
// it changes nothing and returns LossNone. The attempt ends FAILED with
// reason (or CANCELLED, if its task was cancelled meanwhile) and releases
// its worker. A started sandbox's loss under rules 2 fails its task at once
// (SANDBOX_LOST, sandboxLost). The task's lost_count grows: below MaxLostAttempts the task
// goes back to QUEUED, at MaxLostAttempts it FAILED ("lost 3 times") and its
// dependents are resolved. The FSM calls it for each attempt of an
// OpAttemptsLost; WorkerDown does the same for every attempt on the worker.
func (t *Txn) LoseAttempt(taskID string, attempt uint32, workerID string, code wire.ReasonCode, reason string, unixNanos int64) Loss {
	cur := t.Task(taskID)
	if cur == nil {
		return LossNone
	}
	a := cur.ActiveAttempt()
	if a == nil || a.Number != attempt || a.WorkerID != workerID {
		return LossNone
	}
	return t.lose(cur, attemptEnd{state: failed, code: code, reason: reason}, unixNanos)
}

// Loss says what losing one attempt did to its task.
type Loss uint8

// The outcomes of LoseAttempt.
const (
	// LossNone: the attempt was not current and active on the worker;
	// nothing changed.
	LossNone Loss = iota
	// LossRequeued: the task went back to QUEUED for a new attempt.
	LossRequeued
	// LossFailed: the task FAILED, lost MaxLostAttempts times.
	LossFailed
	// LossStopped: the task was already CANCELLED; only its attempt ended.
	LossStopped
)

// lose ends cur's active attempt as lost: see LoseAttempt.
func (t *Txn) lose(cur *Task, end attemptEnd, nanos int64) Loss {
	if cur.Stopping() {
		n := cur.clone()
		a := n.editAttempt()
		a.State, a.Reason, a.ReasonCode, a.ExitCode, a.FinishUnixNanos = cancelled, end.reason, end.code, end.exitCode, nanos
		n.UpdateUnixNanos, n.ModifyIndex = nanos, t.index
		t.putTask(cur, n)
		return LossStopped
	}
	count := func(n *Task) { n.LostCount++ }
	if t.sandboxLost(cur) {
		end.code = wire.ReasonCode_REASON_CODE_SANDBOX_LOST
		t.endAttempt(cur, failed, "sandbox lost: "+end.reason, end, nanos, count)
		return LossFailed
	}
	if why := t.gangNoRetry(cur); why != "" {
		t.endAttempt(cur, failed, end.reason+why, end, nanos, count)
		return LossFailed
	}
	if cur.LostCount+1 < MaxLostAttempts {
		t.endAttempt(cur, queued, end.reason, end, nanos, count)
		return LossRequeued
	}
	t.endAttempt(cur, failed, "lost "+strconv.Itoa(int(cur.LostCount)+1)+" times", end, nanos, count)
	return LossFailed
}

// sandboxLost reports whether losing cur's active attempt ends cur for good
// because cur is a sandbox whose container had started: its state lived in
// that container, so a new attempt would be a different, empty box. Only
// under rules 2 and later (fsm.RulesCurrent); before, and for a sandbox
// still ASSIGNED (its container never ran), the loss re-queues as for any
// task.
func (t *Txn) sandboxLost(cur *Task) bool {
	return cur.Spec.GetSandbox() != nil && cur.State == running && t.Rules() >= RulesSandboxLost
}

// attemptEnd is how an attempt ended.
type attemptEnd struct {
	state wire.TaskState
	// code classifies reason; the task's move takes it too.
	code     wire.ReasonCode
	reason   string
	exitCode int32
	// backoff is how long a retry waits (failOrRetry).
	backoff RetryBackoff
}

// endAttempt moves cur to state to with reason, ending its active attempt
// as end says; edit, if not nil, changes the new row too. A task that ends
// terminal has its dependents resolved.
func (t *Txn) endAttempt(cur *Task, to wire.TaskState, reason string, end attemptEnd, nanos int64, edit func(*Task)) *Task {
	n := t.move(cur, to, end.code, reason, nanos, func(n *Task) {
		a := n.editAttempt()
		a.State, a.Reason, a.ReasonCode, a.ExitCode, a.FinishUnixNanos = end.state, end.reason, end.code, end.exitCode, nanos
		if edit != nil {
			edit(n)
		}
	})
	if IsTerminal(to) {
		if _, err := t.ResolveDependents(n, nanos); err != nil {
			panic(fmt.Sprintf("state: index %d: %v", t.index, err))
		}
	}
	return n
}

// failOrRetry ends cur's active attempt as a failure: back to QUEUED, not
// before end.backoff from now, while retries are left, else the task ends
// final (FAILED or TIMED_OUT).
func (t *Txn) failOrRetry(cur *Task, final wire.TaskState, end attemptEnd, nanos int64) {
	if why := t.gangNoRetry(cur); why != "" {
		t.endAttempt(cur, final, end.reason+why, end, nanos, nil)
		return
	}
	if cur.RetriesUsed < uint32(max(cur.Spec.GetMaxRetries(), 0)) {
		t.endAttempt(cur, queued, end.reason, end, nanos, func(n *Task) {
			n.NotBeforeUnixNanos = 0
			if wait := end.backoff.Wait(n.RetriesUsed); wait > 0 {
				n.NotBeforeUnixNanos = nanos + wait
			}
			n.RetriesUsed++
		})
		return
	}
	t.endAttempt(cur, final, end.reason, end, nanos, nil)
}

// failOrRetryUnless is failOrRetry to FAILED, except that an attempt the
// worker marked not retryable fails the task at once, its retries unspent,
// with the reason saying so.
func (t *Txn) failOrRetryUnless(cur *Task, notRetryable bool, end attemptEnd, nanos int64) {
	if notRetryable {
		if cur.RetriesUsed < uint32(max(cur.Spec.GetMaxRetries(), 0)) {
			end.reason += " (not retried: a retry cannot fix this)"
		}
		t.endAttempt(cur, failed, end.reason, end, nanos, nil)
		return
	}
	t.failOrRetry(cur, failed, end, nanos)
}

// started moves an ASSIGNED task to RUNNING before an event that shows its
// process ran, and returns the current row.
func (t *Txn) started(cur *Task, nanos int64) *Task {
	if cur.State != assigned {
		return cur
	}
	return t.move(cur, running, wire.ReasonCode_REASON_CODE_UNSPECIFIED, "", nanos, nil)
}

// exitReason describes an attempt's abnormal end from its event: "OOM
// killed", else the worker's reason, else "exit code N".
func exitReason(ev *wire.AttemptEvent) string {
	switch {
	case ev.GetOomKilled() && strings.HasPrefix(ev.GetReason(), "OOM killed"):
		return ev.GetReason() // the worker's own words, e.g. "OOM killed (memory limit 32 MiB)"
	case ev.GetOomKilled() && ev.GetReason() != "":
		return "OOM killed: " + ev.GetReason()
	case ev.GetOomKilled():
		return "OOM killed"
	case ev.GetReason() != "":
		return ev.GetReason()
	}
	return "exit code " + strconv.Itoa(int(ev.GetExitCode()))
}

// exitCodeOf classifies an attempt's abnormal end from its event's kind,
// oom_killed and reason_code (never from its prose): OOM when the kernel
// killed it for memory, EXIT_CODE for a non-zero EXITED, TIMEOUT for
// TIMED_OUT, and for FAILED the worker's code (START_FAILED) or
// WORKER_FAILED when it gave none.
func exitCodeOf(ev *wire.AttemptEvent) wire.ReasonCode {
	switch {
	case ev.GetOomKilled():
		return wire.ReasonCode_REASON_CODE_OOM
	case ev.GetKind() == evExited:
		return wire.ReasonCode_REASON_CODE_EXIT_CODE
	case ev.GetKind() == evTimedOut:
		return wire.ReasonCode_REASON_CODE_TIMEOUT
	case ev.GetReasonCode() != wire.ReasonCode_REASON_CODE_UNSPECIFIED:
		return ev.GetReasonCode()
	}
	return wire.ReasonCode_REASON_CODE_WORKER_FAILED
}

// failReason describes a FAILED event: as exitReason, or "failed" when the
// worker said nothing more.
func failReason(ev *wire.AttemptEvent) string {
	if ev.GetOomKilled() || ev.GetReason() != "" || ev.GetExitCode() != 0 {
		return exitReason(ev)
	}
	return "failed"
}
