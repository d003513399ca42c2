package spec

import "github.com/megaflow/megaflow/internal/errs"

// The errs.Error reasons of sandbox pause (docs/sandboxes.md, "Pause and
// resume"), given by the heads and by the workers alike.
const (
	// ReasonSandboxPaused: the sandbox is PAUSED, or its worker holds its
	// container paused, so an exec, a file call or a snapshot is refused:
	// resume it first (FailedPrecondition).
	ReasonSandboxPaused = "SANDBOX_PAUSED"
	// ReasonSandboxBusy: a pause refused because execs or file calls are
	// in flight in the sandbox: pause it once they end
	// (FailedPrecondition).
	ReasonSandboxBusy = "SANDBOX_BUSY"
)

// SandboxPausedError is the FailedPrecondition error, reason
// ReasonSandboxPaused, of a call refused because sandbox id is paused: the
// head relaying it gives it for a sandbox its table shows PAUSED, the
// worker for a container it holds paused.
func SandboxPausedError(id string) *errs.Error {
	e := errs.New(errs.FailedPrecondition, "sandbox %s is PAUSED (its processes are frozen): resume it first (megaflow sandbox resume %s), then retry", id, id)
	e.Reason = ReasonSandboxPaused
	return e
}

// SandboxBusyError is the FailedPrecondition error, reason
// ReasonSandboxBusy, of a pause of sandbox id refused while n execs or
// file calls run in it.
func SandboxBusyError(id string, n int) *errs.Error {
	e := errs.New(errs.FailedPrecondition, "sandbox %s has %d execs or file calls in flight, which a pause would freeze: pause it once they end", id, n)
	e.Reason = ReasonSandboxBusy
	return e
}
