package head

import (
	"context"
	"crypto/rand"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// Sandbox snapshots and forks (docs/sandboxes.md, "Snapshots and forks"):
// SnapshotSandbox commits a READY sandbox's container into an image on its
// worker, then records it (OpSnapshotAdd); DeleteSnapshot removes the row
// (OpSnapshotDelete), then the image; CreateSandbox with from_snapshot
// runs the image on that worker (sandboxFork), and the FSM checks the fork
// against the row (state.Txn.CheckForks). The three run on the leader (a
// follower forwards the call whole), under rules 3. An image whose row
// never committed, or whose removal failed, is removed by its worker's
// reconciliation (worker/snapshot.go), which the leader feeds with the
// worker's snapshot ids (snapshotsMessage).

// The errs.Error reasons of the snapshot calls' errors (errs.ReasonOf).
const (
	// ReasonSnapshotNotFound: no snapshot has the id, or it is another
	// tenant's (NotFound).
	ReasonSnapshotNotFound = state.ReasonSnapshotNotFound
	// ReasonSnapshotWorkerDown: the worker holding the snapshot's image is
	// DOWN or LEFT (FailedPrecondition); the snapshot is kept and can be
	// forked again once the worker is back with the same id.
	ReasonSnapshotWorkerDown = "SNAPSHOT_WORKER_DOWN"
	// ReasonSnapshotInUse: sandboxes created from the snapshot may still
	// run its image (FailedPrecondition).
	ReasonSnapshotInUse = state.ReasonSnapshotInUse
	// ReasonSnapshotQuota: the tenant holds its maximum of snapshots
	// (ResourceExhausted).
	ReasonSnapshotQuota = state.ReasonSnapshotQuota
)

// snapshotRemoveTimeout bounds the removal of an image left by a snapshot
// the table refused.
const snapshotRemoveTimeout = 30 * time.Second

// needSnapshotRules refuses snapshot calls until the cluster applies rules
// 3: Unavailable, so that clients retry (as CreateSandbox before rules 2).
func (s *sandboxService) needSnapshotRules() error {
	if r := s.h.fsm.View().Rules(); r < state.RulesSnapshots {
		return errs.New(errs.Unavailable,
			"head %s applies rules %d and snapshots need rules %d: every head must run a build that has them (megaflow cluster shows each head's RULES), and the leader then moves the cluster; retry",
			s.h.cfg.NodeID, r, state.RulesSnapshots)
	}
	return nil
}

// maxSnapshots is the tenant's bound on snapshots.
func (s *sandboxService) maxSnapshots() int {
	if n := s.h.cfg.MaxSnapshots; n > 0 {
		return n
	}
	return spec.SnapshotDefaultMaxPerTenant
}

// forwardSandbox runs a SandboxService call on the leader and passes its
// answer through; no leader known is NotLeader.
func forwardSandbox[Req, Resp any](ctx context.Context, f *forwarder, req Req,
	call func(wire.SandboxServiceClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	var zero Resp
	conn, fctx, err := f.leaderConn(ctx)
	if err != nil {
		if errs.ClassOf(err) == errs.Unavailable {
			// No leader known: nothing was done, so the call is safe to
			// retry (NotLeader), even for a client that does not retry an
			// Unavailable SnapshotSandbox.
			err = &errs.Error{Class: errs.NotLeader, Message: err.Error()}
		}
		return zero, errs.ToStatus(err)
	}
	return call(wire.NewSandboxServiceClient(conn), fctx, req)
}

// SnapshotSandbox commits a READY sandbox into an image on its worker and
// records it in the table.
func (s *sandboxService) SnapshotSandbox(ctx context.Context, req *wire.SnapshotSandboxRequest) (*wire.SnapshotSandboxResponse, error) {
	if err := s.needSnapshotRules(); err != nil {
		return nil, errs.ToStatus(err)
	}
	if err := spec.CheckSandboxID("sandbox_id", req.GetSandboxId()); err != nil {
		return nil, errs.ToStatus(err)
	}
	if err := spec.CheckSnapshotName(req.GetName()); err != nil {
		return nil, errs.ToStatus(err)
	}
	if !s.h.IsLeader() {
		return forwardSandbox(ctx, s.h.fwd, req, wire.SandboxServiceClient.SnapshotSandbox)
	}
	cli, n, worker, err := s.target(ctx, req.GetSandboxId(), req.GetMinIndex())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	view := s.h.fsm.View()
	tenant := view.Graph(req.GetSandboxId()).Tenant
	// A first check before the copy; the FSM checks again at apply.
	if held := len(view.Snapshots(tenant)); held >= s.maxSnapshots() {
		e := errs.New(errs.ResourceExhausted, "tenant %s holds %d snapshots, its maximum (the heads' --max-snapshots): delete one (megaflow sandbox snapshot rm) before taking another", tenant, held)
		e.Reason = ReasonSnapshotQuota
		return nil, errs.ToStatus(e)
	}
	id := spec.NewSnapshotID(rand.Reader)
	image := spec.SnapshotImage(id)
	res, err := cli.CommitSnapshot(ctx, &wire.CommitSnapshotRequest{SandboxId: req.GetSandboxId(), Attempt: n, SnapshotId: id, Image: image})
	if err != nil {
		return nil, relayErr(req.GetSandboxId(), worker, err)
	}
	snap := &wire.Snapshot{Id: id, Tenant: tenant, Name: req.GetName(), SandboxId: req.GetSandboxId(), WorkerId: worker,
		Image: image, ImageId: res.GetImageId(), SizeBytes: res.GetSizeBytes(), CreateUnixNanos: s.h.clock.Now().UnixNano()}
	out, index, err := s.h.apply(ctx, fsm.OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snap, MaxPerTenant: int32(s.maxSnapshots())})
	if err != nil {
		if index != 0 || errs.ClassOf(err) == errs.NotLeader {
			// The table refused it (over the bound since the first check),
			// or Raft never took the entry (this head no longer leads): the
			// image is no one's; remove it. Otherwise the entry may yet
			// commit, so the image stays.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotRemoveTimeout)
			if _, rerr := cli.RemoveSnapshot(rctx, &wire.RemoveSnapshotRequest{SnapshotId: id, Image: image}); rerr != nil {
				s.h.logger.Warn("removing a refused snapshot's image failed", "snapshot", id, "worker", worker, "err", rerr)
			}
			cancel()
		}
		return nil, errs.ToStatus(err)
	}
	return &wire.SnapshotSandboxResponse{Snapshot: out.(*fsm.SnapshotAddResult).Snapshot, Index: index}, nil
}

// ListSnapshots returns a tenant's snapshots (every tenant's when empty)
// from this head's table, oldest first, each with why it cannot be forked
// now (Snapshot.unavailable: its worker is not ALIVE).
func (s *sandboxService) ListSnapshots(ctx context.Context, req *wire.ListSnapshotsRequest) (*wire.ListSnapshotsResponse, error) {
	if err := s.h.waitApplied(ctx, req.GetMinIndex(), 0); err != nil {
		return nil, errs.ToStatus(err)
	}
	view := s.h.fsm.View()
	rows := view.Snapshots(req.GetTenant())
	out := make([]*wire.Snapshot, 0, len(rows))
	for _, r := range rows {
		if why := view.SnapshotUnavailable(r); why != "" {
			r = proto.CloneOf(r) // the row is shared
			r.Unavailable = why
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *wire.Snapshot) int {
		if a.GetCreateIndex() != b.GetCreateIndex() {
			return int(min(max(int64(a.GetCreateIndex())-int64(b.GetCreateIndex()), -1), 1))
		}
		return strings.Compare(a.GetId(), b.GetId())
	})
	return &wire.ListSnapshotsResponse{Snapshots: out}, nil
}

// DeleteSnapshot removes a snapshot's row, then its image from its worker
// when the worker is ALIVE. The FSM refuses the row's removal while
// sandboxes created from the snapshot may still run it. Once the row is
// gone no sandbox can start from the image, so an image left behind (the
// worker did not answer, or is down, or a fork's container is still being
// removed) is harmless and its worker's reconciliation removes it.
func (s *sandboxService) DeleteSnapshot(ctx context.Context, req *wire.DeleteSnapshotRequest) (*wire.DeleteSnapshotResponse, error) {
	if err := s.needSnapshotRules(); err != nil {
		return nil, errs.ToStatus(err)
	}
	if err := spec.CheckSnapshotID("id", req.GetId()); err != nil {
		return nil, errs.ToStatus(err)
	}
	if !s.h.IsLeader() {
		return forwardSandbox(ctx, s.h.fwd, req, wire.SandboxServiceClient.DeleteSnapshot)
	}
	if err := s.h.waitApplied(ctx, req.GetMinIndex(), 0); err != nil {
		return nil, errs.ToStatus(err)
	}
	if _, err := s.snapshot(s.h.fsm.View(), req.GetId()); err != nil {
		return nil, errs.ToStatus(err)
	}
	res, index, err := s.h.apply(ctx, fsm.OpSnapshotDelete, &wire.SnapshotDeleteCommand{Id: req.GetId()})
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	snap := res.(*fsm.SnapshotDeleteResult).Removed
	if snap == nil {
		// Deleted by a call that ran since the lookup.
		_, err := s.snapshot(s.h.fsm.View(), req.GetId())
		return nil, errs.ToStatus(err)
	}
	s.removeSnapshotImage(ctx, snap)
	return &wire.DeleteSnapshotResponse{Index: index}, nil
}

// removeSnapshotImage asks snap's worker, when ALIVE, to remove snap's
// image (its row is gone). A failure is logged only: the worker's
// reconciliation removes the image later.
func (s *sandboxService) removeSnapshotImage(ctx context.Context, snap *wire.Snapshot) {
	w := s.h.fsm.View().Worker(snap.GetWorkerId())
	if w == nil || !w.Alive() || w.Info.GetAddr() == "" {
		s.h.logger.Info("deleted snapshot's image left to its worker's reconciliation: the worker is not alive",
			"snapshot", snap.GetId(), "worker", snap.GetWorkerId())
		return
	}
	cli, err := s.conns.get(snap.GetWorkerId(), w.Info.GetAddr())
	if err == nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotRemoveTimeout)
		_, err = cli.RemoveSnapshot(rctx, &wire.RemoveSnapshotRequest{SnapshotId: snap.GetId(), Image: snap.GetImage()})
		cancel()
	}
	if err != nil {
		s.h.logger.Warn("removing a deleted snapshot's image failed; the worker's reconciliation removes it later",
			"snapshot", snap.GetId(), "worker", snap.GetWorkerId(), "err", err)
	}
}

// snapshot returns snapshot id from view. Errors: NotFound.
func (s *sandboxService) snapshot(view *state.View, id string) (*wire.Snapshot, error) {
	snap := view.Snapshot(id)
	if snap == nil {
		e := errs.New(errs.NotFound, "snapshot %s not found (at index %d of head %s): it was deleted or never taken; megaflow sandbox snapshots lists them",
			id, view.Index(), s.h.cfg.NodeID)
		e.Reason = ReasonSnapshotNotFound
		return nil, e
	}
	return snap, nil
}

// sandboxFork resolves sp.from_snapshot in view and makes g run the
// snapshot's image on its worker (spec.ForkFrom); the FSM checks the
// result again at apply (state.Txn.CheckForks). Errors: NotFound (no such
// snapshot, or another tenant's), FailedPrecondition (its worker is DOWN or
// LEFT: ReasonSnapshotWorkerDown), Unavailable (rules below 3).
func (s *sandboxService) sandboxFork(view *state.View, sp *wire.SandboxCreateSpec, g *wire.GraphSpec) error {
	if err := s.needSnapshotRules(); err != nil {
		return err
	}
	if t := view.Task(spec.SandboxTaskID(sp.GetId())); t != nil && t.Spec.GetSandbox().GetFromSnapshot() == sp.GetFromSnapshot() {
		// A retried create of a fork that exists: the same graph as the
		// first try's, even if the snapshot is gone since (SubmitGraph
		// then answers that it existed).
		spec.ForkFrom(g, &wire.Snapshot{Image: t.Spec.GetImage(), WorkerId: t.Spec.GetSandbox().GetSnapshotWorker()})
		return nil
	}
	snap, err := s.snapshot(view, sp.GetFromSnapshot())
	if err != nil {
		return err
	}
	tenant := sp.GetTenant()
	if tenant == "" {
		tenant = state.DefaultTenant
	}
	if snap.GetTenant() != tenant {
		e := errs.New(errs.NotFound, "snapshot %s not found for tenant %s (it is another tenant's): create the sandbox as its tenant", snap.GetId(), tenant)
		e.Reason = ReasonSnapshotNotFound
		return e
	}
	if why := view.SnapshotUnavailable(snap); why != "" {
		e := errs.New(errs.FailedPrecondition, "snapshot %s is unavailable: %s. Its image stays on that worker, and the snapshot can be forked again once %s rejoins with the same id; retry then, or create the sandbox from another snapshot (megaflow sandbox snapshots shows which are available)",
			snap.GetId(), why, snap.GetWorkerId())
		e.Reason = ReasonSnapshotWorkerDown
		return e
	}
	spec.ForkFrom(g, snap)
	return nil
}

// maxWorkerSnapshotIDs bounds the ids of one wire.WorkerSnapshots (about
// 1.4 MB of ids at the longest); beyond it the list is cut and marked
// truncated, and the worker removes no snapshot image.
const maxWorkerSnapshotIDs = 20_000

// snapshotsMessage returns the ids of the snapshots worker id holds, as
// the table at view has them, when they differ from last (what the stream
// sent before; nil at first: always sent, even empty, so that the worker
// knows this leader keeps it informed), else nil. The worker stream's
// goroutine calls it after each table change; the worker removes the
// images of its snapshots that are in no row (worker/snapshot.go).
func snapshotsMessage(view *state.View, id string, last *wire.WorkerSnapshots) *wire.WorkerSnapshots {
	ids := view.WorkerSnapshots(id)
	cur := &wire.WorkerSnapshots{Ids: ids}
	if len(ids) > maxWorkerSnapshotIDs {
		cur.Ids, cur.Truncated = ids[:maxWorkerSnapshotIDs], true
	}
	if last != nil && proto.Equal(cur, last) {
		return nil
	}
	return cur
}
