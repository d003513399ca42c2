package worker

import (
	"fmt"

	"google.golang.org/protobuf/proto"

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
// (the process runtime), except the user of the built-in default policy
// for clusters with ACLs, which such a runtime does not apply (applied).
// p is applied(a), whose confinement the caller applies to the
// container's spec.
func (w *Worker) admit(a *wire.Assignment, p *wire.AdmissionPolicy) error {
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

// applied returns the policy of assignment a that the worker enforces and
// applies (nil: none): the one the leader attached, except on a runtime
// that cannot confine a process (the process runtime) when it is the
// built-in default for clusters with ACLs, whose user (65534:65534) the
// worker does not apply there: the task runs as the worker's user, and the
// worker logs so (a warning the first time, then at debug). So a cluster
// with ACLs on process workers (megaflow up --acl --runtime process) runs
// its tasks; a policy row an admin set with a user is still refused there.
func (w *Worker) applied(a *wire.Assignment) *wire.AdmissionPolicy {
	p := a.GetAdmissionPolicy()
	if p.GetRunAsUser() == "" || contract.Isolated(w.rt) ||
		a.GetAdmissionSource() != wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_DEFAULT_ACL {
		return p
	}
	msg := "the built-in default policy for clusters with ACLs runs containers as " + p.GetRunAsUser() +
		", which the " + w.rt.Name() + " runtime cannot do: tasks run as the worker's user; run docker workers (runtime: docker) for non-root tasks"
	if w.userNotApplied.CompareAndSwap(false, true) {
		w.log.Warn(msg, "task", a.GetTaskId())
	} else {
		w.log.Debug(msg, "task", a.GetTaskId())
	}
	q := proto.Clone(p).(*wire.AdmissionPolicy)
	q.RunAsUser = ""
	return q
}

// confinement lists what p forces on a container, as policy flags.
func confinement(p *wire.AdmissionPolicy) string {
	return admission.Flags(&wire.AdmissionPolicy{ReadOnlyRootFs: p.GetReadOnlyRootFs(), RunAsUser: p.GetRunAsUser(), MaxPids: p.GetMaxPids()})
}
