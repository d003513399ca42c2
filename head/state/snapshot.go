package state

import (
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// Sandbox snapshots (docs/sandboxes.md, "Snapshots and forks"): a READY
// sandbox's container committed into an image on its worker. The table
// keeps one row per snapshot (OpSnapshotAdd, OpSnapshotDelete), so that
// every head lists them, counts them against their tenant, and places a
// sandbox created from one on the worker that holds the image. A worker
// declared DOWN or LEFT takes its snapshots with it (WorkerDown, from
// RulesSnapshots on).

// RulesSnapshots is the first rules version that has snapshots: the ops
// OpSnapshotAdd and OpSnapshotDelete apply, and WorkerDown removes the
// worker's snapshots. Heads take snapshots only from it on.
const RulesSnapshots uint64 = 3

// Snapshot is a snapshot's row: its wire form, immutable once inserted.
type Snapshot struct {
	S *wire.Snapshot
}

// AddSnapshot inserts snapshot s unless its tenant holds maxPerTenant
// snapshots already (ResourceExhausted, naming the bound and what to do)
// or s is invalid (InvalidArgument, spec.CheckSnapshot; maxPerTenant
// below 1). A snapshot with s's id already there is AlreadyExists. The
// row's create_index is the transaction's index. The FSM calls it for an
// OpSnapshotAdd; an error changes nothing.
func (t *Txn) AddSnapshot(s *wire.Snapshot, maxPerTenant int) (*wire.Snapshot, error) {
	if err := spec.CheckSnapshot(s); err != nil {
		return nil, err
	}
	if maxPerTenant < 1 || maxPerTenant > spec.SnapshotMaxPerTenantLimit {
		return nil, errs.New(errs.InvalidArgument, "snapshot %s: max_per_tenant %d is out of range: 1 to %d", s.GetId(), maxPerTenant, spec.SnapshotMaxPerTenantLimit)
	}
	if first(t.mem, tableSnapshots, indexID, s.GetId()) != nil {
		return nil, errs.New(errs.AlreadyExists, "snapshot %s exists already", s.GetId())
	}
	// A worker declared down between its commit and this entry has had its
	// snapshots dropped already (WorkerDown): a row added now would never
	// be, and would count against its tenant for ever.
	if w := t.Worker(s.GetWorkerId()); w == nil || w.Status != wire.WorkerStatus_WORKER_STATUS_ALIVE {
		return nil, errs.New(errs.FailedPrecondition, "snapshot %s: its worker %s is not alive in the table: take the snapshot again once the sandbox's worker is back", s.GetId(), s.GetWorkerId())
	}
	n := 0
	for it := get(t.mem, tableSnapshots, indexTenant, s.GetTenant()); it.Next() != nil; {
		n++
	}
	if n >= maxPerTenant {
		e := errs.New(errs.ResourceExhausted, "tenant %s holds %d snapshots, its maximum (the heads' --max-snapshots): delete one (megaflow sandbox snapshot rm) before taking another", s.GetTenant(), n)
		e.Reason = ReasonSnapshotQuota
		return nil, e
	}
	c := proto.CloneOf(s)
	c.CreateIndex = t.index
	must(t.mem.Insert(tableSnapshots, &Snapshot{S: c}))
	return c, nil
}

// ReasonSnapshotQuota is the errs.Error reason of AddSnapshot's
// ResourceExhausted: the tenant holds its maximum of snapshots.
const ReasonSnapshotQuota = "SNAPSHOT_QUOTA_EXCEEDED"

// DeleteSnapshot removes snapshot id and returns it, or nil when there is
// none (changing nothing). The FSM calls it for an OpSnapshotDelete.
func (t *Txn) DeleteSnapshot(id string) *wire.Snapshot {
	raw := first(t.mem, tableSnapshots, indexID, id)
	if raw == nil {
		return nil
	}
	must(t.mem.Delete(tableSnapshots, raw))
	return raw.(*Snapshot).S
}

// dropWorkerSnapshots removes the snapshots held by worker id (declared
// DOWN or LEFT: its images are gone with it, as far as the table knows)
// and returns how many.
func (t *Txn) dropWorkerSnapshots(id string) int {
	held := collect[*Snapshot](get(t.mem, tableSnapshots, indexWorker, id))
	for _, s := range held {
		must(t.mem.Delete(tableSnapshots, s))
	}
	return len(held)
}

// Snapshot returns snapshot id, or nil. The row is shared: do not modify it.
func (v *View) Snapshot(id string) *wire.Snapshot {
	if raw := first(v.txn(), tableSnapshots, indexID, id); raw != nil {
		return raw.(*Snapshot).S
	}
	return nil
}

// Snapshots returns tenant's snapshots (every tenant's for ""), by id
// within a tenant, tenants in order. The rows are shared: do not modify
// them.
func (v *View) Snapshots(tenant string) []*wire.Snapshot {
	it := get(v.txn(), tableSnapshots, indexID)
	if tenant != "" {
		it = get(v.txn(), tableSnapshots, indexTenant, tenant)
	}
	var out []*wire.Snapshot
	for _, s := range collect[*Snapshot](it) {
		out = append(out, s.S)
	}
	return out
}

// Snapshot adds a snapshot row to a restore.
func (r *Restore) Snapshot(s *wire.Snapshot) error {
	return r.mem.Insert(tableSnapshots, &Snapshot{S: s})
}

// SetSandboxDeadline sets sandbox graph id's deadline_seconds (its
// lifetime from creation, which the leader's deadline loop enforces) to
// seconds, 1 to spec.SandboxMaxSeconds. The FSM calls it for an
// OpSandboxSetDeadline (rules 3). Errors, changing nothing: NotFound (no
// such sandbox), FailedPrecondition (its graph ended, or it is not a
// sandbox), InvalidArgument (seconds out of range).
func (t *Txn) SetSandboxDeadline(id string, seconds int64) error {
	if seconds < 1 || seconds > spec.SandboxMaxSeconds {
		return errs.New(errs.InvalidArgument, "sandbox %s: deadline_seconds %d is out of range: 1 to %d", id, seconds, spec.SandboxMaxSeconds)
	}
	g := t.Graph(id)
	if g == nil {
		return errs.New(errs.NotFound, "sandbox %s not found", id)
	}
	if task := t.Task(spec.SandboxTaskID(id)); task == nil || task.Spec.GetSandbox() == nil {
		return errs.New(errs.FailedPrecondition, "graph %s is not a sandbox: only a sandbox's lifetime can be set", id)
	}
	if g.State != wire.GraphState_GRAPH_STATE_RUNNING {
		return errs.New(errs.FailedPrecondition, "sandbox %s ended (%s): its lifetime can no longer change", id, g.State)
	}
	w := t.writableGraph(id)
	w.DeadlineSeconds, w.ModifyIndex = seconds, t.index
	return nil
}
