package state

import (
	memdb "github.com/hashicorp/go-memdb"
	"github.com/megaflow/megaflow/internal/admission"
	"github.com/megaflow/megaflow/internal/wire"
)

// Admission policies (docs/security.md): per tenant, and a cluster row
// (tenant ClusterAdmission), bounding what a task's container may ask for
// (internal/admission). The FSM sets them (OpSetAdmissionPolicy, rules 5)
// and, from rules 5 on, checks every committed graph's tasks against its
// tenant's effective policy (CheckAdmission), so that the log's order
// decides between a policy change and a submission.
//
// The built-in default in force (admission.DefaultFor) depends on the
// table alone: from rules 7 (RulesACLDefault), once it holds the ACL
// bootstrap marker (ACLBootstrap), it is the default for clusters with
// ACLs, which allows no network but none and runs every container as
// 65534:65534. So every head, leader
// or follower, and every replay of the log compute the same effective
// policy. No op changed: the marker is written by OpTokenCreate (rules 6),
// and rules 7 changes which row OpSetAdmissionPolicy removes (one equal to
// the default in force).

// RulesAdmission is the first rules version with admission policies:
// OpSetAdmissionPolicy applies (refused below it, changing nothing) and
// OpSubmitGraph refuses a graph whose tasks its tenant's effective policy
// does not allow. Heads set policies and attach them to assignments only
// from it on.
const RulesAdmission uint64 = 5

// RulesACLDefault is the first rules version under which a cluster whose
// ACLs were bootstrapped has the built-in default policy for clusters with
// ACLs (admission.DefaultFor(true): no network but none, every container
// runs as 65534:65534)
// and OpSetAdmissionPolicy removes a row equal to it (and keeps one equal
// to the default without ACLs: it runs containers as the image's user).
// Below it the default is admission.Default, ACLs or not.
const RulesACLDefault uint64 = 7

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
// index and unixNanos; a policy equal to the built-in default in force
// (aclDefault: with ACLs from rules 7 if the table holds the bootstrap
// marker) deletes the row. It reports whether the row was removed (or
// none was left). The FSM calls it for an OpSetAdmissionPolicy. Errors, changing nothing:
// InvalidArgument naming the field out of its bounds.
func (t *Txn) SetAdmissionPolicy(w *wire.AdmissionPolicy, unixNanos int64) (removed bool, err error) {
	p, err := admission.Normalize(w)
	if err != nil {
		return false, err
	}
	if admission.IsDefaultFor(p, aclDefault(t.mem)) {
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
// from (admission.Effective; the built-in default is the one for clusters
// with ACLs once the table holds the ACL bootstrap marker, from rules 7:
// aclDefault). The row is shared: never modify it.
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
	return admission.Effective(own, row(ClusterAdmission), aclDefault(txn))
}

// ACLDefaultAdmission reports whether the built-in default policy in force
// is the one for clusters with ACLs (admission.DefaultFor(true)): the table
// holds the ACL bootstrap marker and the rules are 7 or later.
func (v *View) ACLDefaultAdmission() bool { return aclDefault(v.txn()) }

// aclDefault reports whether the built-in default policy as of txn is the
// one for clusters with ACLs: rules 7 or later and the bootstrap marker.
func aclDefault(txn *memdb.Txn) bool {
	return readMeta(txn, metaRules) >= RulesACLDefault && first(txn, tableTokens, indexID, "") != nil
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
// for a row out of its bounds (a corrupt snapshot). A row equal to either
// built-in default is accepted: one equal to the default for clusters
// with ACLs may have been set before the bootstrap, and one equal to the
// default without ACLs after it (it then means the image's user).
func (r *Restore) AdmissionPolicy(w *wire.AdmissionPolicy) error {
	p, err := admission.Normalize(w)
	if err != nil {
		return err
	}
	return r.mem.Insert(tableAdmission, &AdmissionPolicy{P: p})
}
