package worker

import (
	"fmt"

	"github.com/megaflow/megaflow/internal/admission"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker/attempt"
)

// admit enforces the admission policy the leader attached to assignment a
// (docs/security.md), again, on the worker: defence in depth against a
// head that did not check (a bug, a table restored from an old backup).
// It returns nil when a carries no policy (a leader below rules 5) or the
// spec is within it, else an error marked attempt.ErrNotRetryable (the
// attempt fails, not retried) whose text names the field, the value and
// the policy. A policy that confines the container (run_as_user,
// read_only_root_fs, max_pids) is refused on a runtime that cannot do it
// (the process runtime). The caller applies the confinement to the
// container's spec.
func (w *Worker) admit(a *wire.Assignment) error {
	p := a.GetAdmissionPolicy()
	if p == nil {
		return nil
	}
	// The spec as the head checked it: the worker's own defaults ("bridge"
	// for a service) are no request of the task's.
	if err := admission.Check(a.GetTaskId(), a.GetSpec(), a.GetTenant(), p, a.GetAdmissionSource()); err != nil {
		w.metrics.startFailures.WithLabelValues("admission").Inc()
		return fmt.Errorf("worker refused the start (%w): %w", attempt.ErrNotRetryable, err)
	}
	if admission.Confines(p) && !contract.Isolated(w.rt) {
		w.metrics.startFailures.WithLabelValues("admission").Inc()
		return fmt.Errorf("worker refused the start (%w): task %q: %s sets%s, which the %s runtime of worker %s cannot enforce; run the tenant's tasks on docker workers (runtime: docker)",
			attempt.ErrNotRetryable, a.GetTaskId(), admission.SourceName(a.GetAdmissionSource(), a.GetTenant()), confinement(p), w.rt.Name(), w.cfg.NodeID)
	}
	return nil
}

// confinement lists what p forces on a container, as policy flags.
func confinement(p *wire.AdmissionPolicy) string {
	return admission.Flags(&wire.AdmissionPolicy{ReadOnlyRootFs: p.GetReadOnlyRootFs(), RunAsUser: p.GetRunAsUser(), MaxPids: p.GetMaxPids()})
}
