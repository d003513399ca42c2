package state

import (
	"fmt"
	"maps"
	"slices"

	memdb "github.com/hashicorp/go-memdb"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/resources"
	"github.com/megaflow/megaflow/internal/wire"
)

// Quotas: per-tenant limits on what runs at once, and the cluster limit
// (the row whose Tenant is ClusterQuota). The leader's scheduler honours
// them when it plans (scheduler.Input.Quotas and Cluster), and the plan
// verifier (QuotaGuard, called by the FSM for every placement of an OpPlan)
// refuses a placement that would exceed them at apply time, so that two
// rounds in flight cannot overshoot together. Usage is what the tasks
// ASSIGNED or RUNNING ask for; it is computed from the table when needed,
// not stored.

// ClusterQuota is the tenant key of the cluster limit's row: no tenant can
// be named "" (an empty tenant becomes "default" at submission).
const ClusterQuota = ""

// Quota is a quota's row. Like every row it is immutable once inserted.
type Quota struct {
	// Tenant is the tenant limited, or ClusterQuota for the cluster limit.
	Tenant string
	// MaxRunning is the most tasks ASSIGNED or RUNNING at once; 0: none.
	MaxRunning int64
	// Max limits the sum of the running tasks' requests per dimension; a
	// zero dimension is not limited.
	Max resources.Resources
	// ModifyIndex and UpdateUnixNanos say when the quota was last set.
	ModifyIndex     uint64
	UpdateUnixNanos int64
}

// Unlimited reports whether the quota limits nothing.
func (q *Quota) Unlimited() bool { return q.MaxRunning == 0 && q.Max.IsZero() }

// ToWire converts the row into its wire form.
func (q *Quota) ToWire() *wire.Quota {
	return &wire.Quota{Tenant: q.Tenant, MaxRunning: int32(q.MaxRunning), CpuMillis: q.Max.CPUMillis,
		MemoryBytes: q.Max.MemoryBytes, Gpus: int32(q.Max.GPUs), ModifyIndex: q.ModifyIndex, UpdateUnixNanos: q.UpdateUnixNanos}
}

// QuotaFromWire converts a quota's wire form into a row. It returns an
// InvalidArgument error naming the field for a negative limit.
func QuotaFromWire(w *wire.Quota) (*Quota, error) {
	for _, f := range []struct {
		name string
		v    int64
	}{{"max_running", int64(w.GetMaxRunning())}, {"cpu_millis", w.GetCpuMillis()}, {"memory_bytes", w.GetMemoryBytes()}, {"gpus", int64(w.GetGpus())}} {
		if f.v < 0 {
			return nil, errs.New(errs.InvalidArgument, "quota of tenant %q: %s %d is negative; give 0 (no limit) or more", w.GetTenant(), f.name, f.v)
		}
	}
	return &Quota{Tenant: w.GetTenant(), MaxRunning: int64(w.GetMaxRunning()),
		Max:         resources.Resources{CPUMillis: w.GetCpuMillis(), MemoryBytes: w.GetMemoryBytes(), GPUs: int64(w.GetGpus())},
		ModifyIndex: w.GetModifyIndex(), UpdateUnixNanos: w.GetUpdateUnixNanos()}, nil
}

// Usage is what one tenant, or the cluster, runs now: the tasks ASSIGNED or
// RUNNING and the sum of their requests.
type Usage struct {
	Running int64
	Used    resources.Resources
}

func (u *Usage) add(t *Task) {
	u.Running++
	u.Used = u.Used.Add(ResourcesOf(t.Spec.GetResources()))
}

// SetQuota inserts or replaces a quota (the cluster limit for ClusterQuota);
// a quota that limits nothing is deleted. The FSM calls it for an
// OpSetQuota. It returns an InvalidArgument error for a negative limit.
func (t *Txn) SetQuota(w *wire.Quota, unixNanos int64) error {
	q, err := QuotaFromWire(w)
	if err != nil {
		return err
	}
	q.ModifyIndex, q.UpdateUnixNanos = t.index, unixNanos
	if q.Unlimited() {
		if raw := first(t.mem, tableQuotas, indexID, q.Tenant); raw != nil {
			must(t.mem.Delete(tableQuotas, raw))
		}
		return nil
	}
	must(t.mem.Insert(tableQuotas, q))
	return nil
}

// Quotas returns every tenant quota in tenant order, and the cluster limit
// (nil if none).
func (v *View) Quotas() (tenants []*Quota, cluster *Quota) {
	return quotas(v.txn())
}

func quotas(txn *memdb.Txn) (tenants []*Quota, cluster *Quota) {
	for _, q := range collect[*Quota](get(txn, tableQuotas, indexID)) {
		if q.Tenant == ClusterQuota {
			cluster = q
			continue
		}
		tenants = append(tenants, q)
	}
	return tenants, cluster
}

// Usage returns what every tenant with tasks ASSIGNED or RUNNING runs now,
// and the cluster's total. It reads those tasks once: the leader calls it
// each scheduling round in which quotas are set, and GetQuotas handlers.
func (v *View) Usage() (tenants map[string]Usage, total Usage) {
	return usageOf(v.txn())
}

func usageOf(txn *memdb.Txn) (map[string]Usage, Usage) {
	tenants := map[string]Usage{}
	var total Usage
	for _, s := range []wire.TaskState{assigned, running} {
		it := get(txn, tableTasks, indexState, s)
		for raw := it.Next(); raw != nil; raw = it.Next() {
			task := raw.(*Task)
			u := tenants[task.Tenant]
			u.add(task)
			tenants[task.Tenant] = u
			total.add(task)
		}
	}
	return tenants, total
}

// QuotaGuard is the plan verifier's quota check for one OpPlan: it holds
// the quotas and the usage at the start of the plan, and counts each
// placement applied. The FSM gets one from Txn.QuotaGuard, asks Admit
// before each Place and calls Charge after each success.
type QuotaGuard struct {
	tenants map[string]*Quota
	cluster *Quota
	usage   map[string]Usage
	total   Usage
}

// QuotaGuard returns the guard for a plan, or nil when no quota and no
// cluster limit is set (nothing to check, and usage is not computed).
func (t *Txn) QuotaGuard() *QuotaGuard {
	tenants, cluster := quotas(t.mem)
	if len(tenants) == 0 && cluster == nil {
		return nil
	}
	g := &QuotaGuard{tenants: map[string]*Quota{}, cluster: cluster}
	for _, q := range tenants {
		g.tenants[q.Tenant] = q
	}
	g.usage, g.total = usageOf(t.taskTxn())
	return g
}

// Admit returns nil if task may start now without its tenant or the
// cluster going over quota, else a FailedPrecondition error saying which
// limit ("tenant team-a is at its quota of 3 running tasks").
func (g *QuotaGuard) Admit(task *Task) error {
	need := ResourcesOf(task.Spec.GetResources())
	if msg := quotaRoom(g.cluster, g.total, need, "the cluster", "limit"); msg != "" {
		return errs.New(errs.FailedPrecondition, "task %q: %s", task.ID, msg)
	}
	if msg := quotaRoom(g.tenants[task.Tenant], g.usage[task.Tenant], need, "tenant "+task.Tenant, "quota"); msg != "" {
		return errs.New(errs.FailedPrecondition, "task %q: %s", task.ID, msg)
	}
	return nil
}

// AdmitAll returns nil if every task of tasks may start now together,
// counting each on top of those before it, else Admit's error for the
// first that may not. It charges nothing.
func (g *QuotaGuard) AdmitAll(tasks []*Task) error {
	c := &QuotaGuard{tenants: g.tenants, cluster: g.cluster, usage: maps.Clone(g.usage), total: g.total}
	for _, task := range tasks {
		if err := c.Admit(task); err != nil {
			return err
		}
		c.Charge(task)
	}
	return nil
}

// Charge counts a placement applied.
func (g *QuotaGuard) Charge(task *Task) {
	u := g.usage[task.Tenant]
	u.add(task)
	g.usage[task.Tenant] = u
	g.total.add(task)
}

// quotaRoom explains why q (nil: none) has no room for need on top of u,
// in the scheduler's words, or returns "".
func quotaRoom(q *Quota, u Usage, need resources.Resources, who, noun string) string {
	if q == nil {
		return ""
	}
	if q.MaxRunning > 0 && u.Running+1 > q.MaxRunning {
		return fmt.Sprintf("%s is at its %s of %d running %s", who, noun, q.MaxRunning, plural(q.MaxRunning, "task", "tasks"))
	}
	for _, d := range []struct {
		dim              string
		used, req, limit int64
		format           func(int64) string
	}{
		{"CPU", u.Used.CPUMillis, need.CPUMillis, q.Max.CPUMillis, resources.FormatCPU},
		{"memory", u.Used.MemoryBytes, need.MemoryBytes, q.Max.MemoryBytes, resources.FormatBytes},
		{"GPU", u.Used.GPUs, need.GPUs, q.Max.GPUs, func(n int64) string { return resources.FormatGPUs(n, "") }},
	} {
		if d.limit > 0 && d.req > 0 && d.used+d.req > d.limit {
			return fmt.Sprintf("%s is at its %s %s (%s of %s in use; the task asks for %s)", who, d.dim, noun,
				d.format(d.used), d.format(d.limit), d.format(d.req))
		}
	}
	return ""
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// SortedTenants returns the keys of a usage map in order.
func SortedTenants(m map[string]Usage) []string { return slices.Sorted(maps.Keys(m)) }

// Quota adds a quota row to a restore.
func (r *Restore) Quota(q *Quota) error { return r.mem.Insert(tableQuotas, q) }

// QuotaRows iterates the quota rows, the cluster limit first, for the
// snapshot writer.
func (v *View) QuotaRows() []*Quota { return collect[*Quota](get(v.txn(), tableQuotas, indexID)) }
