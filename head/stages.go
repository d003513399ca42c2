package head

import (
	"context"

	"github.com/megaflow/megaflow/internal/wire"
)

// The stage metrics (megaflow_attempt_stage_duration_seconds,
// megaflow_attempts_ended_total) are observed by every head from its own
// FSM's committed event stream, with the leader's timestamps carried in the
// log. So each head counts each attempt's stages exactly once, whichever
// head led when it ran, and all heads agree on the values (a head that
// restarts counts again from its snapshot on: Prometheus sees a counter
// reset). Nothing is added to the FSM: the observer reads events after
// they are applied, on a goroutine the head owns.

// stageTracker follows each unfinished task through the event stream and
// turns its transitions into stage observations. It is pure (no clock, no
// I/O): observe is called for every event in commit order and returns
// what to record. The stageObserver goroutine owns it.
type stageTracker struct {
	tasks map[string]*trackedTask
	// queueOf returns a task's queue label when the tracker first meets it.
	queueOf func(taskID string) string
}

type trackedTask struct {
	state                     wire.TaskState
	queue                     string
	queued, assigned, started int64 // unix nanos of the current attempt's stages; 0: not seen
}

// stageObservation is one thing to record: a duration in a stage, or an
// ended attempt.
type stageObservation struct {
	// Stage is "queued", "starting" or "running" for a duration; "" for
	// an ended attempt only.
	Stage   string
	Queue   string
	Seconds float64
	// Outcome and ReasonClass are set when an attempt ended.
	Outcome, ReasonClass string
}

func newStageTracker(queueOf func(string) string) *stageTracker {
	return &stageTracker{tasks: map[string]*trackedTask{}, queueOf: queueOf}
}

// observe feeds one event and returns the observations it completes.
func (s *stageTracker) observe(ev *wire.Event) []stageObservation {
	if ev.TaskId == "" || ev.TaskState == wire.TaskState_TASK_STATE_UNSPECIFIED {
		return nil // a graph event
	}
	t := s.tasks[ev.TaskId]
	if t == nil {
		q := "default"
		if s.queueOf != nil {
			q = s.queueOf(ev.TaskId)
		}
		t = &trackedTask{queue: q}
		s.tasks[ev.TaskId] = t
	}
	prev := t.state
	t.state = ev.TaskState
	now := ev.UnixNanos
	var out []stageObservation
	dur := func(stage string, since int64) {
		if since > 0 && now >= since {
			out = append(out, stageObservation{Stage: stage, Queue: t.queue, Seconds: float64(now-since) / 1e9})
		}
	}
	wasActive := prev == wire.TaskState_TASK_STATE_ASSIGNED || prev == wire.TaskState_TASK_STATE_RUNNING
	ended := func(outcome string) {
		if prev == wire.TaskState_TASK_STATE_RUNNING {
			dur("running", t.started)
		}
		out = append(out, stageObservation{Queue: t.queue, Outcome: outcome, ReasonClass: ReasonClass(ev.ReasonCode)})
	}
	switch ev.TaskState {
	case wire.TaskState_TASK_STATE_QUEUED:
		if wasActive { // the attempt failed or was lost; the task retries
			outcome := "failed"
			if ReasonClass(ev.ReasonCode) == "worker_lost" {
				outcome = "lost"
			}
			ended(outcome)
		}
		t.queued, t.assigned, t.started = now, 0, 0
	case wire.TaskState_TASK_STATE_ASSIGNED:
		dur("queued", t.queued)
		t.assigned = now
	case wire.TaskState_TASK_STATE_RUNNING:
		dur("starting", t.assigned)
		t.started = now
	case wire.TaskState_TASK_STATE_SUCCEEDED, wire.TaskState_TASK_STATE_FAILED,
		wire.TaskState_TASK_STATE_TIMED_OUT, wire.TaskState_TASK_STATE_CANCELLED:
		if wasActive {
			ended(stateName(ev.TaskState))
		}
		delete(s.tasks, ev.TaskId)
	}
	return out
}

// reset forgets every task (events were missed).
func (s *stageTracker) reset() { clear(s.tasks) }

// ReasonClass sorts a task's or attempt's reason code into a small, fixed
// set of label values for metrics: "none" (no reason, or an entry recorded
// before codes existed), "exit_code", "oom", "timeout", "worker_lost" (its
// worker went down, its lease lapsed or it no longer runs the attempt),
// "cancelled" (by a user, a graph deadline, or a service stopped with its
// graph), "upstream_failed" (a dependency or a used service ended),
// "start_failed" (the container or process could not be created or
// started: image, runtime, GPU check), "infeasible" (queued or failed
// unplaceable), or "other". It reads the code only, never the prose. Pure;
// table-tested.
func ReasonClass(code wire.ReasonCode) string {
	switch code {
	case wire.ReasonCode_REASON_CODE_UNSPECIFIED:
		return "none"
	case wire.ReasonCode_REASON_CODE_OOM:
		return "oom"
	case wire.ReasonCode_REASON_CODE_EXIT_CODE:
		return "exit_code"
	case wire.ReasonCode_REASON_CODE_TIMEOUT:
		return "timeout"
	case wire.ReasonCode_REASON_CODE_WORKER_LOST, wire.ReasonCode_REASON_CODE_LEASE_LAPSED,
		wire.ReasonCode_REASON_CODE_NOT_ON_WORKER, wire.ReasonCode_REASON_CODE_SANDBOX_LOST:
		return "worker_lost"
	case wire.ReasonCode_REASON_CODE_UPSTREAM_FAILED, wire.ReasonCode_REASON_CODE_SERVICE_GONE:
		return "upstream_failed"
	case wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER, wire.ReasonCode_REASON_CODE_CANCELLED_DEADLINE,
		wire.ReasonCode_REASON_CODE_STOPPED_WITH_GRAPH:
		return "cancelled"
	case wire.ReasonCode_REASON_CODE_START_FAILED:
		return "start_failed"
	case wire.ReasonCode_REASON_CODE_UNPLACEABLE, wire.ReasonCode_REASON_CODE_QUEUED:
		return "infeasible"
	}
	return "other"
}

// runStageObserver tails this head's committed events and records the stage
// metrics until ctx ends. Run starts it on a goroutine it waits for.
func (h *Head) runStageObserver(ctx context.Context) {
	tr := newStageTracker(func(id string) string {
		if t := h.fsm.View().Task(id); t != nil {
			return queueName(t.Queue())
		}
		return "default"
	})
	cur := h.fsm.LastCursor() // events before the start are not replayed twice
	for {
		changed := h.fsm.Changed()
		evs, next, err := h.fsm.EventsAfter(cur, "", 4096)
		if err != nil { // OutOfRange: the ring moved past the cursor
			h.metrics.eventsMissed.Inc()
			tr.reset()
			cur = h.fsm.LastCursor()
			continue
		}
		cur = next
		for _, ev := range evs {
			for _, o := range tr.observe(ev) {
				if o.Stage != "" {
					h.metrics.stageSeconds.WithLabelValues(o.Stage, o.Queue).Observe(o.Seconds)
				}
				if o.Outcome != "" {
					h.metrics.attempts.WithLabelValues(o.Outcome, o.ReasonClass).Inc()
				}
			}
		}
		if len(evs) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}
