// Package attempt is the life cycle of one task attempt on a worker, as a
// deterministic state machine: Machine.Step takes an event and the current
// time and returns the effects to carry out. It does no I/O, starts no
// goroutine and reads no clock; the worker's per-attempt driver executes the
// effects against the container runtime and the event stream, and feeds the
// results back as events (etcd-io/raft's rawnode shape). Only worker/
// imports it.
//
// The states and their transitions:
//
//	            Begin                 StartDone ok
//	Assigned ─────────> Starting ─────────────────────> Running ───WaitDone───────────┐
//	   │                   │ StopRequest, deadline:        │ StopRequest, deadline:    │
//	   │                   │ CancelStart, then             │ StopContainer             │
//	   │                   │ StartDone ok ──> Stopping <───┘                           │
//	   │                   │ StartDone err ─────────────────────────────────────┐      │
//	   │ Adopt(running)    │                   │ WaitDone (exit or gone)        │      │
//	   v                   │                   v                                v      v
//	Adopting ──Confirm──> Running           Reported <─────────────────────── Reported
//	   │ StopRequest ──> Stopping              │ Acked
//	   │                                       v
//	Adopt(exited) ──> Running (wait)        Reported ──Acked──> Removing ──RemoveDone──> Done
//	                                  (no container: Acked ──> Done)
//
// A service attempt (Config.Service) in Running also has its readiness
// probed (ProbeReadiness -> ProbeDone): ready reports SERVICE_READY (not
// final); not ready in time stops it like a timeout, reported FAILED. Once
// ready it stays watched (WatchLiveness): failing its probe several times
// in a row (LivenessLost) stops it the same way, so that its endpoint is
// withdrawn and its restart policy applies.
//
// Reported means the final event (EXITED, FAILED, TIMED_OUT or STOPPED) is
// queued for the head; the container is removed only once the head acked
// it, so a worker that dies in between finds the exited container on restart
// and reports it again. The timeout deadline is armed at Begin (it counts the
// container's start, image pull included, like Kubernetes'
// activeDeadlineSeconds) and travels in a container label, so an adopted
// container keeps its deadline; with Config.TimeoutFromStart (a persistent
// attempt, exec'd in a warm container) it is armed when the start
// succeeded instead, so the wait for a container does not count.
package attempt

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
)

// Key identifies one attempt of one task.
type Key struct {
	// TaskID is "<graph id>/<task name>".
	TaskID string
	// Attempt is the attempt number, from 1.
	Attempt uint32
}

// String returns "<task id>#<attempt>".
func (k Key) String() string { return fmt.Sprintf("%s#%d", k.TaskID, k.Attempt) }

// State is where an attempt is in its life cycle; see the package doc.
type State uint8

// The states, in life-cycle order.
const (
	// Assigned: created from an assignment or a found container; nothing
	// done yet.
	Assigned State = iota
	// Starting: the container is being created and started.
	Starting
	// Adopting: a container found running at worker start, announced to the
	// head and waiting for it to object (StopRequest) or not (Confirm).
	Adopting
	// Running: the container runs; its exit is awaited.
	Running
	// Stopping: the container is being stopped (head's stop, timeout,
	// superseded); its exit is awaited.
	Stopping
	// Reported: the final event is queued; waiting for the head's ack.
	Reported
	// Removing: the container is being removed.
	Removing
	// Done: nothing is left; the driver forgets the attempt.
	Done
)

var stateNames = [...]string{"assigned", "starting", "adopting", "running", "stopping", "reported", "removing", "done"}

// String returns the state's lower-case name.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", s)
}

// Backoff bounds for retrying a Wait or Stop that failed for a reason other
// than the container being gone (runtime unavailable).
const (
	// RetryMin is the first retry's delay; each failure doubles it.
	RetryMin = time.Second
	// RetryMax caps the delay between retries.
	RetryMax = 30 * time.Second
)

// Config is what a Machine needs to know about its attempt.
type Config struct {
	// Key names the attempt.
	Key Key
	// Timeout is the attempt's timeout (spec.timeout_seconds); 0: none.
	Timeout time.Duration
	// MemoryLimit is the container's memory limit in bytes, for the OOM
	// reason; 0: unknown or none.
	MemoryLimit int64
	// StopGrace is how long a stopped container gets between SIGTERM and
	// SIGKILL.
	StopGrace time.Duration
	// Image is the task's image, named in the reason of a missing image.
	Image string
	// TimeoutFromStart makes the timeout count from a successful
	// StartDone (a persistent attempt's exec beginning in its warm
	// container) instead of from Begin, so that the wait for a warm or a
	// session's container never counts against the task's own timeout.
	TimeoutFromStart bool
	// Service marks an attempt of a service task: once its container runs
	// (started, or adopted and confirmed) the Machine asks for a readiness
	// probe (ProbeReadiness), reports SERVICE_READY with the endpoint when
	// it passes, and stops the attempt as FAILED when it does not.
	Service bool
}

// Machine is one attempt's state. It is not safe for concurrent use: one
// driver goroutine owns it and calls Step for every event, in order.
type Machine struct {
	cfg   Config
	state State

	containerID string
	started     bool      // the process ran (STARTED reported, or adopted running)
	deadline    time.Time // timeout deadline; zero: none
	cause       *stopCause

	startInFlight bool
	waitInFlight  bool
	// artifactsPending is the last WaitDone's ArtifactsPending, copied
	// into the final event.
	artifactsPending bool
	stopInFlight     bool
	removeWanted     bool // acked while a Stop was in flight: remove when it returns

	waitRetryAt, stopRetryAt time.Time
	waitBackoff, stopBackoff time.Duration

	timerAt time.Time // what the last SetTimer asked for
}

// stopCause is why the worker stops an attempt, and so the kind of its final
// event.
type stopCause struct {
	kind   wire.AttemptEventKind // STOPPED, TIMED_OUT or FAILED
	reason string
	// code, when set, is the final event's reason_code, and the event is
	// marked not retryable (Expire).
	code wire.ReasonCode
}

// causeEvent is the final event of an attempt stopped for m.cause.
func (m *Machine) causeEvent(now time.Time) *wire.AttemptEvent {
	e := m.event(m.cause.kind, m.cause.reason, now)
	if m.cause.code != wire.ReasonCode_REASON_CODE_UNSPECIFIED {
		e.ReasonCode, e.NotRetryable = m.cause.code, true
	}
	return e
}

// New returns a Machine in state Assigned. Feed it Begin (a fresh
// assignment) or Adopt (a container found at start) first.
func New(cfg Config) *Machine {
	return &Machine{cfg: cfg, state: Assigned}
}

// Key returns the attempt's key.
func (m *Machine) Key() Key { return m.cfg.Key }

// State returns the current state.
func (m *Machine) State() State { return m.state }

// ContainerID returns the container's id, or "" before it is known.
func (m *Machine) ContainerID() string { return m.containerID }

// Started reports whether the attempt's process ran.
func (m *Machine) Started() bool { return m.started }

// Deadline returns the timeout deadline; zero when there is none.
func (m *Machine) Deadline() time.Time { return m.deadline }

// Step applies ev at time now and returns the effects to carry out, in
// order. Events that make no sense in the current state (a late result, a
// second stop) are ignored: Step returns no effect.
func (m *Machine) Step(ev Event, now time.Time) []Effect {
	var out []Effect
	switch ev := ev.(type) {
	case Begin:
		out = m.begin(now)
	case Adopt:
		out = m.adopt(ev, now)
	case StartDone:
		out = m.startDone(ev, now)
	case WaitDone:
		out = m.waitDone(ev, now)
	case StopDone:
		out = m.stopDone(ev, now)
	case RemoveDone:
		if m.state == Removing {
			m.state = Done
			out = []Effect{Forget{}}
		}
	case StopRequest:
		out = m.stopRequest(stopCause{kind: wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STOPPED, reason: ev.Reason}, now)
	case Confirm:
		if m.state == Adopting {
			m.state = Running
			m.waitInFlight = true
			out = []Effect{WaitContainer{ContainerID: m.containerID}}
			if m.cfg.Service {
				// Probe again: a SERVICE_READY of the previous run may
				// never have reached the head (a duplicate is ignored).
				out = append(out, ProbeReadiness{})
			}
		}
	case Expire:
		if m.state == Running {
			out = m.stopRequest(stopCause{kind: wire.AttemptEventKind_ATTEMPT_EVENT_KIND_FAILED, reason: ev.Reason, code: ev.Code}, now)
		}
	case ProbeDone:
		out = m.probeDone(ev, now)
	case LivenessLost:
		if m.state == Running {
			out = m.stopRequest(stopCause{kind: wire.AttemptEventKind_ATTEMPT_EVENT_KIND_FAILED,
				reason: "service stopped answering its probe: " + ev.Err.Error()}, now)
		}
	case Acked:
		out = m.acked()
	case Tick:
		out = m.tick(now)
	default:
		panic(fmt.Sprintf("attempt: unknown event %T", ev))
	}
	return m.syncTimer(out)
}

func (m *Machine) begin(now time.Time) []Effect {
	if m.state != Assigned {
		return nil
	}
	m.state = Starting
	m.startInFlight = true
	if m.cfg.Timeout > 0 && !m.cfg.TimeoutFromStart {
		m.deadline = now.Add(m.cfg.Timeout)
	}
	return []Effect{StartContainer{Deadline: m.deadline}}
}

func (m *Machine) adopt(ev Adopt, now time.Time) []Effect {
	if m.state != Assigned {
		return nil
	}
	m.containerID = ev.ContainerID
	m.started = true
	if ev.Running {
		m.deadline = ev.Deadline
		m.state = Adopting
		return nil
	}
	// It exited while no worker watched it: wait on it at once (no
	// deadline: it ended), so that its output is read whole and its result
	// and artifacts stored as for any exit.
	m.state = Running
	m.waitInFlight = true
	return []Effect{WaitContainer{ContainerID: m.containerID}}
}

func (m *Machine) startDone(ev StartDone, now time.Time) []Effect {
	if m.state != Starting || !m.startInFlight {
		return nil
	}
	m.startInFlight = false
	if ev.Err != nil {
		if m.cause != nil {
			return m.finish(m.causeEvent(now))
		}
		e := m.event(wire.AttemptEventKind_ATTEMPT_EVENT_KIND_FAILED, startFailure(m.cfg.Image, ev.Err), now)
		e.NotRetryable = !Retryable(ev.Err)
		e.ReasonCode = wire.ReasonCode_REASON_CODE_START_FAILED
		return m.finish(e)
	}
	m.containerID = ev.ContainerID
	m.waitInFlight = true
	if m.cause != nil {
		// Stopped or timed out while starting: it never counts as started.
		m.state = Stopping
		m.stopInFlight = true
		return []Effect{
			StopContainer{ContainerID: m.containerID, Grace: m.cfg.StopGrace},
			WaitContainer{ContainerID: m.containerID},
		}
	}
	m.state = Running
	m.started = true
	if m.cfg.Timeout > 0 && m.cfg.TimeoutFromStart {
		m.deadline = now.Add(m.cfg.Timeout)
	}
	started := m.event(wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STARTED, "", now)
	out := []Effect{Report{Event: started}, WaitContainer{ContainerID: m.containerID}}
	if m.cfg.Service {
		out = append(out, ProbeReadiness{})
	}
	return out
}

// probeDone handles the readiness probe's result of a running service
// attempt: SERVICE_READY with the endpoint, or a stop whose final event is
// FAILED with the probe's error. Once the attempt is stopping or ended the
// result is moot and ignored.
func (m *Machine) probeDone(ev ProbeDone, now time.Time) []Effect {
	if m.state != Running {
		return nil
	}
	if ev.Err != nil {
		return m.stopRequest(stopCause{kind: wire.AttemptEventKind_ATTEMPT_EVENT_KIND_FAILED,
			reason: "service not ready: " + ev.Err.Error()}, now)
	}
	e := m.event(wire.AttemptEventKind_ATTEMPT_EVENT_KIND_SERVICE_READY, "", now)
	e.Endpoint = ev.Endpoint
	return []Effect{Report{Event: e}, WatchLiveness{}}
}

// ErrNotRetryable marks a start error that a retry of the task cannot fix
// (wrap it with %w); the worker's GPU check refusal carries it.
var ErrNotRetryable = errors.New("not retryable")

// Retryable reports whether a failed start may succeed when the task is
// tried again: false for a missing image (no registry is reachable: the
// worker cannot pull), a spec the runtime refuses (contract.ErrInvalidSpec:
// no such program, a missing working directory) and errors marked with
// ErrNotRetryable; true for the rest (the runtime unavailable, timeouts,
// anything unknown), so that an unknown error never loses a retry it could
// have used.
func Retryable(err error) bool {
	return !errors.Is(err, contract.ErrImageNotFound) && !errors.Is(err, contract.ErrInvalidSpec) &&
		!errors.Is(err, ErrNotRetryable)
}

// Exit codes a shell and a container init use for a command that could not
// run (POSIX): 126 found but not executable, 127 not found.
const (
	ExitNotExecutable = 126
	ExitNotFound      = 127
)

// startFailure is the reason of a FAILED event for a start error.
func startFailure(image string, err error) string {
	switch {
	case errors.Is(err, contract.ErrImageNotFound):
		return fmt.Sprintf("image %q not found (pull it on the worker or fix the task's image): %v", image, err)
	case errors.Is(err, contract.ErrUnavailable):
		return "container runtime unavailable: " + err.Error()
	}
	return "start container: " + err.Error()
}

func (m *Machine) waitDone(ev WaitDone, now time.Time) []Effect {
	if !m.waitInFlight || (m.state != Running && m.state != Stopping) {
		return nil
	}
	m.waitInFlight = false
	m.artifactsPending = ev.ArtifactsPending
	if ev.Err != nil {
		if errors.Is(ev.Err, contract.ErrNotFound) {
			m.containerID = "" // nothing left to remove
			if m.cause != nil {
				return m.finish(m.causeEvent(now))
			}
			return m.finish(m.event(wire.AttemptEventKind_ATTEMPT_EVENT_KIND_FAILED,
				"container disappeared: "+ev.Err.Error(), now))
		}
		m.waitBackoff = nextBackoff(m.waitBackoff)
		m.waitRetryAt = now.Add(m.waitBackoff)
		return nil
	}
	m.waitBackoff, m.waitRetryAt = 0, time.Time{}
	if ev.Failed != "" && m.state == Running {
		return m.finish(m.event(wire.AttemptEventKind_ATTEMPT_EVENT_KIND_FAILED, ev.Failed, now))
	}
	if m.state == Stopping && !ev.Exit.ExitedFirst {
		e := m.causeEvent(now)
		e.ExitCode = int32(ev.Exit.Code)
		e.OomKilled = ev.Exit.OOMKilled
		return m.finish(e)
	}
	// It ended on its own, though perhaps after a stop was asked for
	// (the runtime found it exited and signalled nothing): its end, and
	// its result, are its own.
	return m.finish(m.exitEvent(ev.Exit, ev.Result, ev.ResultNote, now))
}

// exitEvent is the final event of a container that exited on its own:
// EXITED with its code (and result on 0), or FAILED when OOM-killed.
func (m *Machine) exitEvent(exit contract.Exit, result []byte, note string, now time.Time) *wire.AttemptEvent {
	if exit.OOMKilled {
		e := m.event(wire.AttemptEventKind_ATTEMPT_EVENT_KIND_FAILED, oomReason(m.cfg.MemoryLimit, exit.Reason), now)
		e.ExitCode = int32(exit.Code)
		e.OomKilled = true
		return e
	}
	e := m.event(wire.AttemptEventKind_ATTEMPT_EVENT_KIND_EXITED, exit.Reason, now)
	e.ExitCode = int32(exit.Code)
	if exit.Code == ExitNotFound || exit.Code == ExitNotExecutable {
		// The init (tini) or a shell could not run the command: the same
		// command fails the same way on every retry.
		e.NotRetryable = true
		what := "not found"
		if exit.Code == ExitNotExecutable {
			what = "not executable"
		}
		e.Reason = strings.TrimSpace(fmt.Sprintf("command %s (exit code %d; fix the task's command or image) %s", what, exit.Code, exit.Reason))
	}
	if exit.Code == 0 {
		e.Result = result
		if note != "" {
			e.Reason = note
		}
	}
	return e
}

func (m *Machine) stopDone(ev StopDone, now time.Time) []Effect {
	if !m.stopInFlight {
		return nil
	}
	m.stopInFlight = false
	if m.state == Removing && m.removeWanted {
		m.removeWanted = false
		return []Effect{RemoveContainer{ContainerID: m.containerID}}
	}
	if m.state != Stopping {
		return nil
	}
	if ev.Err != nil && !errors.Is(ev.Err, contract.ErrNotFound) {
		m.stopBackoff = nextBackoff(m.stopBackoff)
		m.stopRetryAt = now.Add(m.stopBackoff)
		return nil
	}
	// Stopped (or already gone): the pending Wait reports how it ended.
	m.stopBackoff, m.stopRetryAt = 0, time.Time{}
	return nil
}

func (m *Machine) stopRequest(c stopCause, now time.Time) []Effect {
	switch m.state {
	case Assigned:
		return m.finish(m.event(c.kind, c.reason, now))
	case Starting:
		if m.cause != nil {
			return nil
		}
		m.cause = &c
		return []Effect{CancelStart{}}
	case Adopting:
		m.cause = &c
		m.state = Stopping
		m.stopInFlight, m.waitInFlight = true, true
		return []Effect{
			StopContainer{ContainerID: m.containerID, Grace: m.cfg.StopGrace},
			WaitContainer{ContainerID: m.containerID},
		}
	case Running:
		m.cause = &c
		m.state = Stopping
		m.stopInFlight = true
		return []Effect{StopContainer{ContainerID: m.containerID, Grace: m.cfg.StopGrace}}
	}
	return nil // stopping already, or finished
}

func (m *Machine) acked() []Effect {
	if m.state != Reported {
		return nil
	}
	if m.containerID == "" {
		m.state = Done
		return []Effect{Forget{}}
	}
	m.state = Removing
	if m.stopInFlight {
		m.removeWanted = true
		return nil
	}
	return []Effect{RemoveContainer{ContainerID: m.containerID}}
}

func (m *Machine) tick(now time.Time) []Effect {
	var out []Effect
	if m.deadlineArmed() && !now.Before(m.deadline) {
		out = append(out, m.stopRequest(stopCause{
			kind:   wire.AttemptEventKind_ATTEMPT_EVENT_KIND_TIMED_OUT,
			reason: fmt.Sprintf("timed out after %s", m.cfg.Timeout),
		}, now)...)
	}
	if m.state != Running && m.state != Stopping {
		return out
	}
	if !m.waitRetryAt.IsZero() && !now.Before(m.waitRetryAt) && !m.waitInFlight {
		m.waitRetryAt = time.Time{}
		m.waitInFlight = true
		out = append(out, WaitContainer{ContainerID: m.containerID})
	}
	if m.state == Stopping && !m.stopRetryAt.IsZero() && !now.Before(m.stopRetryAt) && !m.stopInFlight {
		m.stopRetryAt = time.Time{}
		m.stopInFlight = true
		out = append(out, StopContainer{ContainerID: m.containerID, Grace: m.cfg.StopGrace})
	}
	return out
}

// deadlineArmed reports whether the timeout deadline counts in the current
// state: while starting or running, not while adopting (until confirmed) or
// once stopping.
func (m *Machine) deadlineArmed() bool {
	if m.deadline.IsZero() {
		return false
	}
	return (m.state == Starting && m.cause == nil) || m.state == Running
}

// finish queues the final event e and moves to Reported.
func (m *Machine) finish(e *wire.AttemptEvent) []Effect {
	m.state = Reported
	m.waitRetryAt, m.stopRetryAt = time.Time{}, time.Time{}
	e.ArtifactsPending = m.artifactsPending
	return []Effect{Report{Event: e, Final: true}}
}

// syncTimer appends a SetTimer when the earliest time the machine wants to
// be ticked at changed.
func (m *Machine) syncTimer(out []Effect) []Effect {
	var want time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (want.IsZero() || t.Before(want)) {
			want = t
		}
	}
	if m.deadlineArmed() {
		consider(m.deadline)
	}
	if m.state == Running || m.state == Stopping {
		consider(m.waitRetryAt)
	}
	if m.state == Stopping {
		consider(m.stopRetryAt)
	}
	if !want.Equal(m.timerAt) {
		m.timerAt = want
		out = append(out, SetTimer{At: want})
	}
	return out
}

func (m *Machine) event(kind wire.AttemptEventKind, reason string, now time.Time) *wire.AttemptEvent {
	return &wire.AttemptEvent{
		TaskId:      m.cfg.Key.TaskID,
		Attempt:     m.cfg.Key.Attempt,
		Kind:        kind,
		Reason:      reason,
		UnixNanos:   now.UnixNano(),
		ContainerId: m.containerID,
	}
}

func nextBackoff(d time.Duration) time.Duration {
	if d == 0 {
		return RetryMin
	}
	return min(2*d, RetryMax)
}

// oomReason says that the kernel killed the attempt for its memory, and the
// limit it had (bytes; 0: none): "OOM killed (memory limit 32 MiB)", in
// the runtime's words when it gives some (why: "probably OOM killed: ..."
// when it inferred the kill, the engine not having flagged it).
func oomReason(limit int64, why string) string {
	if why == "" {
		why = "OOM killed"
	}
	if limit <= 0 {
		return why
	}
	return fmt.Sprintf("%s (memory limit %s)", why, FormatBytes(limit))
}

// FormatBytes writes n bytes in binary units: "512 B", "32 MiB",
// "1.5 GiB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	suffix := "KMGTPE"[exp : exp+1]
	if n%div == 0 {
		return fmt.Sprintf("%d %siB", n/div, suffix)
	}
	return fmt.Sprintf("%.1f %siB", v, suffix)
}
