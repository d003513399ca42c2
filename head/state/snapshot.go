package state

import (
	"slices"
	"strings"

	memdb "github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// Sandbox snapshots (docs/sandboxes.md, "Snapshots and forks"): a READY
// sandbox's container committed into an image on its worker. The table
// keeps one row per snapshot (OpSnapshotAdd, OpSnapshotDelete), so that
// every head lists them, counts them against their tenant, and places a
// sandbox created from one on the worker that holds the image. A row
// stays while its worker is DOWN or LEFT (the image stays on the worker's
// disk: a worker restarted for an upgrade comes back with it); the
// snapshot is unavailable until the worker is ALIVE again
// (View.SnapshotUnavailable). Only OpSnapshotDelete removes a row: the
// table has no operation that forgets a worker for good.

// RulesSnapshots is the first rules version that has snapshots: the ops
// OpSnapshotAdd and OpSnapshotDelete apply (a delete is refused while a
// sandbox created from the snapshot may still hold a container), and the
// snapshot forks of a submitted graph are checked against the table
// (CheckForks). Heads take snapshots only from it on.
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
	// A worker declared down between the commit and this entry has lost
	// the sandbox (LOST); the image is in no row, so the worker's
	// reconciliation removes it.
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

// The errs.Error reasons of the snapshot rules' refusals (errs.ReasonOf).
const (
	// ReasonSnapshotQuota is AddSnapshot's ResourceExhausted: the tenant
	// holds its maximum of snapshots.
	ReasonSnapshotQuota = "SNAPSHOT_QUOTA_EXCEEDED"
	// ReasonSnapshotNotFound is CheckForks' NotFound: no such snapshot, or
	// another tenant's.
	ReasonSnapshotNotFound = "SNAPSHOT_NOT_FOUND"
	// ReasonSnapshotInUse is DeleteSnapshot's FailedPrecondition: sandboxes
	// created from the snapshot may still hold a container.
	ReasonSnapshotInUse = "SNAPSHOT_IN_USE"
)

// DeleteSnapshot removes snapshot id and returns it, or nil when there is
// none (changing nothing). It refuses, changing nothing, while a sandbox
// created from the snapshot has not ended or still has an active attempt
// (FailedPrecondition, ReasonSnapshotInUse, naming up to 5 of them): the
// row goes first and the leader removes the image after it, and no fork
// may start from a snapshot whose row is gone (CheckForks). The FSM calls
// it for an OpSnapshotDelete.
func (t *Txn) DeleteSnapshot(id string) (*wire.Snapshot, error) {
	raw := first(t.mem, tableSnapshots, indexID, id)
	if raw == nil {
		return nil, nil
	}
	if users := collect[*Task](get(t.taskTxnFor(indexSnapshotUse), tableTasks, indexSnapshotUse, id)); len(users) > 0 {
		var open, closing []string
		for _, task := range users {
			if IsTerminal(task.State) {
				closing = append(closing, task.GraphID) // ended; its container is still being removed
			} else {
				open = append(open, task.GraphID)
			}
		}
		var e *errs.Error
		if len(open) > 0 {
			e = errs.New(errs.FailedPrecondition, "snapshot %s is in use by %d sandboxes that may still run it (%s): close them first (megaflow sandbox rm)",
				id, len(users), strings.Join(open[:min(len(open), 5)], ", "))
		} else {
			e = errs.New(errs.FailedPrecondition, "snapshot %s is still in use: %d sandboxes created from it are closed, and their containers are being removed (%s): retry in a few seconds",
				id, len(closing), strings.Join(closing[:min(len(closing), 5)], ", "))
		}
		e.Reason = ReasonSnapshotInUse
		return nil, e
	}
	must(t.mem.Delete(tableSnapshots, raw))
	return raw.(*Snapshot).S, nil
}

// CheckForks checks the tasks of a graph of tenant before they enter the
// table: a task created from a snapshot (SandboxSpec.from_snapshot) must
// name a snapshot in the table that is tenant's, run its image, and be
// pinned (SandboxSpec.snapshot_worker) to the worker that holds it; any
// other task may neither be pinned to a snapshot's worker nor run a
// snapshot's image (spec.IsSnapshotImage). The head fills those fields
// when it creates a fork (spec.ForkFrom); this check makes the table, not
// the head that received the call, the authority, so that no submission
// runs another tenant's snapshot. Errors, changing nothing: NotFound
// (ReasonSnapshotNotFound) for a snapshot not in the table or another
// tenant's, InvalidArgument for the rest. The FSM calls it, from rules 3
// on, for the chunk of an OpSubmitGraph that commits the graph.
func (t *Txn) CheckForks(tenant string, tasks []*Task) error {
	for _, task := range tasks {
		sb, img := task.Spec.GetSandbox(), task.Spec.GetImage()
		from, pin := sb.GetFromSnapshot(), sb.GetSnapshotWorker()
		if from == "" {
			switch {
			case pin != "":
				return errs.New(errs.InvalidArgument, "task %s: sandbox.snapshot_worker %q without from_snapshot: only a sandbox created from a snapshot is pinned to its worker", task.ID, pin)
			case spec.IsSnapshotImage(img):
				return errs.New(errs.InvalidArgument, "task %s: image %q is a sandbox snapshot's: create a sandbox from the snapshot with CreateSandbox's from_snapshot (megaflow sandbox create --from-snapshot)", task.ID, img)
			}
			continue
		}
		raw := first(t.mem, tableSnapshots, indexID, from)
		if raw == nil || raw.(*Snapshot).S.GetTenant() != tenant {
			e := errs.New(errs.NotFound, "task %s: snapshot %s not found for tenant %s: it was deleted or never taken, or it is another tenant's (megaflow sandbox snapshots lists them)", task.ID, from, tenant)
			e.Reason = ReasonSnapshotNotFound
			return e
		}
		snap := raw.(*Snapshot).S
		switch {
		case pin != snap.GetWorkerId():
			return errs.New(errs.InvalidArgument, "task %s: sandbox.snapshot_worker %q is not worker %s, which holds snapshot %s: the head sets it; create the sandbox with CreateSandbox's from_snapshot", task.ID, pin, snap.GetWorkerId(), from)
		case img != snap.GetImage():
			return errs.New(errs.InvalidArgument, "task %s: image %q is not snapshot %s's image %s: the head sets it; create the sandbox with CreateSandbox's from_snapshot", task.ID, img, from, snap.GetImage())
		}
	}
	return nil
}

// snapshotUsers returns the ids of the sandboxes (graphs) created from
// snapshot id whose task may still hold a container (indexSnapshotUse), in
// id order.
func snapshotUsers(txn *memdb.Txn, id string) []string {
	var out []string
	for _, task := range collect[*Task](get(txn, tableTasks, indexSnapshotUse, id)) {
		out = append(out, task.GraphID)
	}
	return out
}

// SnapshotUsers returns the ids of the sandboxes created from snapshot id
// whose task may still hold a container (not ended, or with an active
// attempt): those DeleteSnapshot waits for. In id order.
func (v *View) SnapshotUsers(id string) []string { return snapshotUsers(v.txn(), id) }

// WorkerSnapshots returns the ids of the snapshots whose images worker id
// holds, in id order. The leader sends them to the worker
// (wire.WorkerSnapshots), which removes the snapshot images no row names.
func (v *View) WorkerSnapshots(id string) []string {
	var out []string
	for _, s := range collect[*Snapshot](get(v.txn(), tableSnapshots, indexWorker, id)) {
		out = append(out, s.S.GetId())
	}
	slices.Sort(out)
	return out
}

// SnapshotUnavailable says why no sandbox can be created from snapshot s
// now, or "" when one can: its worker is not ALIVE, e.g. "worker w1 is
// down (lease expired)" or "worker w1 left (shutdown)". The heads show it
// (wire.Snapshot.unavailable) and refuse forks with it.
func (v *View) SnapshotUnavailable(s *wire.Snapshot) string {
	w := v.Worker(s.GetWorkerId())
	switch {
	case w == nil:
		return "worker " + s.GetWorkerId() + " is not in the table"
	case w.Alive():
		return ""
	}
	what := "is down"
	if w.Status == wire.WorkerStatus_WORKER_STATUS_LEFT {
		what = "left"
	}
	if w.Reason != "" {
		what += " (" + w.Reason + ")"
	}
	return "worker " + s.GetWorkerId() + " " + what
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
