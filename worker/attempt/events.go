package attempt

import (
	"time"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
)

// Event is something that happened to an attempt: a request (Begin,
// StopRequest, Confirm), the result of an effect (StartDone, WaitDone,
// StopDone, RemoveDone, Acked) or the timer (Tick).
type Event interface{ isEvent() }

// Begin starts a freshly assigned attempt: the first event of a Machine
// built for an assignment.
type Begin struct{}

// Adopt takes over a container of this attempt found at worker start: the
// first event of a Machine built for a found container.
type Adopt struct {
	// ContainerID is the found container's id.
	ContainerID string
	// Running is true while the container runs: it waits for Confirm.
	// A container that exited is waited on at once (WaitContainer), so
	// that its output, result and artifacts are read as for any exit.
	Running bool
	// Deadline is the timeout deadline the container was started with
	// (from its label); zero: none. It applies to a running container
	// only.
	Deadline time.Time
}

// StartDone is the result of StartContainer: the container's id, or why it
// could not start (the runtime left no container behind).
type StartDone struct {
	// ContainerID is the started container's id (Err nil).
	ContainerID string
	// Err says why it did not start.
	Err error
}

// WaitDone is the result of WaitContainer: how the container exited, or an
// error (contract.ErrNotFound: it is gone; anything else is retried).
type WaitDone struct {
	Exit contract.Exit
	// Result is the JSON the task printed on its MEGAFLOW_RESULT line, if
	// any; ResultNote says why a result line was ignored ("" if none).
	Result     []byte
	ResultNote string
	// Failed, if set, says the attempt ended for a reason other than its
	// process's exit (persistent mode: the exec in its warm container could
	// not run or broke off): its final event is FAILED with this reason,
	// unless the attempt was being stopped. Exit is then meaningless.
	Failed string
	// Err is why the wait failed; Exit is then meaningless.
	Err error
	// ArtifactsPending says the attempt's artifacts are still in the
	// worker's spool; the final event carries it.
	ArtifactsPending bool
}

// StopDone is the result of StopContainer.
type StopDone struct{ Err error }

// RemoveDone is the result of RemoveContainer; an error is only logged (the
// worker's reconciliation removes the container later).
type RemoveDone struct{ Err error }

// StopRequest asks to stop the attempt: the head's StopAttempt, or a newer
// attempt of the same task superseding it. Its final event is STOPPED with
// Reason.
type StopRequest struct{ Reason string }

// Expire asks to stop a running attempt for good, on the worker's own
// account (a sandbox idle past its idle timeout): its final event is FAILED
// with Reason and reason_code Code, not retryable. In any other state it
// changes nothing.
type Expire struct {
	Reason string
	Code   wire.ReasonCode
}

// Confirm says the head did not object to an adopted container within one
// reconciliation round after it was announced: the worker takes it over.
type Confirm struct{}

// Acked says the head committed the attempt's final event.
type Acked struct{}

// Tick says the time asked for by the last SetTimer came.
type Tick struct{}

// ProbeDone is the result of ProbeReadiness: the service's endpoint
// ("http://host:port") once its probe passed, or why it did not pass in
// time.
type ProbeDone struct {
	// Endpoint is where the service serves (Err nil).
	Endpoint string
	// Err says why the service did not become ready.
	Err error
}

// LivenessLost is the result of WatchLiveness: the ready service failed
// its probe several times in a row; Err says how.
type LivenessLost struct{ Err error }

func (Begin) isEvent()        {}
func (Adopt) isEvent()        {}
func (StartDone) isEvent()    {}
func (WaitDone) isEvent()     {}
func (StopDone) isEvent()     {}
func (RemoveDone) isEvent()   {}
func (StopRequest) isEvent()  {}
func (Confirm) isEvent()      {}
func (Expire) isEvent()       {}
func (Acked) isEvent()        {}
func (Tick) isEvent()         {}
func (ProbeDone) isEvent()    {}
func (LivenessLost) isEvent() {}

// Effect is something the driver must do for the Machine; each that calls
// the runtime answers with the matching ...Done event.
type Effect interface{ isEffect() }

// StartContainer creates and starts the attempt's container (after any
// older attempt of the same task has stopped, and within the worker's cap on
// concurrent starts). Deadline is the timeout deadline, for the container's
// label; zero: none. Answer: StartDone.
type StartContainer struct{ Deadline time.Time }

// CancelStart abandons the StartContainer in flight; its StartDone still
// follows (with an error, or the id of a container that then gets stopped).
type CancelStart struct{}

// WaitContainer waits for the container to exit and reads its result.
// Answer: WaitDone.
type WaitContainer struct{ ContainerID string }

// StopContainer stops the container: SIGTERM, SIGKILL after Grace. Answer:
// StopDone.
type StopContainer struct {
	// ContainerID is the container to stop.
	ContainerID string
	// Grace is the time between SIGTERM and SIGKILL.
	Grace time.Duration
}

// RemoveContainer removes the exited container (its log file stays).
// Answer: RemoveDone.
type RemoveContainer struct{ ContainerID string }

// Report queues Event for the head. Final marks the attempt's last event:
// the driver answers Acked once the head committed it.
type Report struct {
	// Event is the event to send, complete.
	Event *wire.AttemptEvent
	// Final marks the attempt's last event.
	Final bool
}

// SetTimer asks for a Tick at At, replacing any earlier request; a zero At
// cancels it.
type SetTimer struct{ At time.Time }

// ProbeReadiness probes a service attempt's readiness (HTTP GET of its
// readiness path expecting 2xx, a TCP connect, or nothing) until it passes
// or the worker's readiness timeout ends; the driver abandons it once the
// attempt leaves Running. Answer: ProbeDone.
type ProbeReadiness struct{}

// WatchLiveness keeps probing a ready service attempt, as ProbeReadiness
// does, for as long as it runs; the driver answers LivenessLost when the
// worker's number of probes in a row fail, and abandons the watch once the
// attempt leaves Running.
type WatchLiveness struct{}

// Forget says the attempt is over: the driver drops it.
type Forget struct{}

func (StartContainer) isEffect()  {}
func (CancelStart) isEffect()     {}
func (WaitContainer) isEffect()   {}
func (StopContainer) isEffect()   {}
func (RemoveContainer) isEffect() {}
func (Report) isEffect()          {}
func (SetTimer) isEffect()        {}
func (Forget) isEffect()          {}
func (ProbeReadiness) isEffect()  {}
func (WatchLiveness) isEffect()   {}
