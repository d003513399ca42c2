package state

import (
	memdb "github.com/hashicorp/go-memdb"
	"github.com/megaflow/megaflow/internal/admission"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// Admission policies (docs/security.md): per tenant, and a cluster row
// (tenant ClusterAdmission), bounding what a task's container may ask for
// (internal/admission). The FSM sets them (OpSetAdmissionPolicy, rules 5)
// and, from rules 5 on, checks every committed graph's tasks against its
// tenant's effective policy (CheckAdmission), so that the log's order
// decides between a policy change and a submission.

// RulesAdmission is the first rules version with admission policies:
// OpSetAdmissionPolicy applies (refused below it, changing nothing) and
// OpSubmitGraph refuses a graph whose tasks its tenant's effective policy
// does not allow. Heads set policies and attach them to assignments only
// from it on.
const RulesAdmission uint64 = 5

// ClusterAdmission is the tenant key of the cluster row: no tenant can be
// named "".
const ClusterAdmission = ""

// AdmissionPolicy is a policy's row, in normal form (admission.Normalize).
// Like every row it is immutable once inserted: P is never modified.
type AdmissionPolicy struct {
	P *wire.AdmissionPolicy
}

// SetAdmissionPolicy normalizes w and inserts or replaces its tenant's row
// (the cluster row for ClusterAdmission), stamped with the transaction's
// index and unixNanos; a policy equal to the built-in default deletes the
// row. It reports whether the row was removed (or none was left). The FSM
// calls it for an OpSetAdmissionPolicy. Errors, changing nothing:
// InvalidArgument naming the field out of its bounds.
func (t *Txn) SetAdmissionPolicy(w *wire.AdmissionPolicy, unixNanos int64) (removed bool, err error) {
	p, err := admission.Normalize(w)
	if err != nil {
		return false, err
	}
	if admission.IsDefault(p) {
		if raw := first(t.mem, tableAdmission, indexID, p.GetTenant()); raw != nil {
			must(t.mem.Delete(tableAdmission, raw))
		}
		return true, nil
	}
	p.ModifyIndex, p.UpdateUnixNanos = t.index, unixNanos
	must(t.mem.Insert(tableAdmission, &AdmissionPolicy{P: p}))
	return false, nil
}

// AdmissionPolicies returns every policy row, the cluster row first, then
// by tenant. The rows are shared: never modify them.
func (v *View) AdmissionPolicies() []*wire.AdmissionPolicy {
	var out []*wire.AdmissionPolicy
	for _, r := range collect[*AdmissionPolicy](get(v.txn(), tableAdmission, indexID)) {
		out = append(out, r.P)
	}
	return out
}

// EffectiveAdmission returns tenant's effective policy and where it comes
// from (admission.Effective). The row is shared: never modify it.
func (v *View) EffectiveAdmission(tenant string) (*wire.AdmissionPolicy, wire.AdmissionPolicySource) {
	return effectiveAdmission(v.txn(), tenant)
}

func effectiveAdmission(txn *memdb.Txn, tenant string) (*wire.AdmissionPolicy, wire.AdmissionPolicySource) {
	row := func(key string) *wire.AdmissionPolicy {
		raw := first(txn, tableAdmission, indexID, key)
		if raw == nil {
			return nil
		}
		return raw.(*AdmissionPolicy).P
	}
	var own *wire.AdmissionPolicy
	if tenant != ClusterAdmission {
		own = row(tenant)
	}
	return admission.Effective(own, row(ClusterAdmission))
}

// CheckAdmission returns nil if every task of graph g may run under its
// tenant's effective policy, else the PermissionDenied error of the first
// that may not (admission.Check). The FSM calls it for a graph about to be
// committed under rules 5 or later.
func (t *Txn) CheckAdmission(g *Graph, tasks []*Task) error {
	p, src := effectiveAdmission(t.mem, g.Tenant)
	for _, task := range tasks {
		if err := admission.Check(task.ID, task.Spec, g.Tenant, p, src); err != nil {
			return err
		}
	}
	return nil
}

// AdmissionPolicy adds a policy row to a restore. Errors: InvalidArgument
// for a row out of its bounds or not in normal form (a corrupt snapshot).
func (r *Restore) AdmissionPolicy(w *wire.AdmissionPolicy) error {
	p, err := admission.Normalize(w)
	if err != nil {
		return err
	}
	if admission.IsDefault(p) {
		return errs.New(errs.InvalidArgument, "admission policy of tenant %q equals the default: such a row is never stored", w.GetTenant())
	}
	return r.mem.Insert(tableAdmission, &AdmissionPolicy{P: p})
}
