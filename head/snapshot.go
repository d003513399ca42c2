package head

import (
	"context"
	"crypto/rand"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// Sandbox snapshots and forks (docs/sandboxes.md, "Snapshots and forks"):
// SnapshotSandbox commits a READY sandbox's container into an image on its
// worker, then records it (OpSnapshotAdd); DeleteSnapshot removes the
// image, then the row (OpSnapshotDelete); CreateSandbox with from_snapshot
// runs the image on that worker (sandboxFork). Both writes run on the
// leader (a follower forwards the call whole), under rules 3.

// The errs.Error reasons of the snapshot calls' errors (errs.ReasonOf).
const (
	// ReasonSnapshotNotFound: no snapshot has the id (NotFound).
	ReasonSnapshotNotFound = "SNAPSHOT_NOT_FOUND"
	// ReasonSnapshotWorkerGone: the worker holding the snapshot's image is
	// not ALIVE (FailedPrecondition).
	ReasonSnapshotWorkerGone = "SNAPSHOT_WORKER_GONE"
	// ReasonSnapshotInUse: live sandboxes run the snapshot's image
	// (FailedPrecondition).
	ReasonSnapshotInUse = "SNAPSHOT_IN_USE"
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
// from this head's table, oldest first.
func (s *sandboxService) ListSnapshots(ctx context.Context, req *wire.ListSnapshotsRequest) (*wire.ListSnapshotsResponse, error) {
	if err := s.h.waitApplied(ctx, req.GetMinIndex(), 0); err != nil {
		return nil, errs.ToStatus(err)
	}
	out := slices.Clone(s.h.fsm.View().Snapshots(req.GetTenant()))
	slices.SortFunc(out, func(a, b *wire.Snapshot) int {
		if a.GetCreateIndex() != b.GetCreateIndex() {
			return int(min(max(int64(a.GetCreateIndex())-int64(b.GetCreateIndex()), -1), 1))
		}
		return strings.Compare(a.GetId(), b.GetId())
	})
	return &wire.ListSnapshotsResponse{Snapshots: out}, nil
}

// DeleteSnapshot removes a snapshot's image from its worker (when the
// worker is ALIVE; a gone worker took it along), then its row.
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
	view := s.h.fsm.View()
	snap, err := s.snapshot(view, req.GetId())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	if users := snapshotUsers(view, snap.GetId()); len(users) > 0 {
		e := errs.New(errs.FailedPrecondition, "snapshot %s is in use by %d live sandboxes (%s): close them first (megaflow sandbox rm)",
			snap.GetId(), len(users), strings.Join(users[:min(len(users), 5)], ", "))
		e.Reason = ReasonSnapshotInUse
		return nil, errs.ToStatus(e)
	}
	if w := view.Worker(snap.GetWorkerId()); w != nil && w.Alive() && w.Info.GetAddr() != "" {
		cli, err := s.conns.get(snap.GetWorkerId(), w.Info.GetAddr())
		if err != nil {
			return nil, errs.ToStatus(err)
		}
		if _, err := cli.RemoveSnapshot(ctx, &wire.RemoveSnapshotRequest{SnapshotId: snap.GetId(), Image: snap.GetImage()}); err != nil {
			return nil, relayErr(snap.GetSandboxId(), snap.GetWorkerId(), err)
		}
	}
	_, index, err := s.h.apply(ctx, fsm.OpSnapshotDelete, &wire.SnapshotDeleteCommand{Id: snap.GetId()})
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &wire.DeleteSnapshotResponse{Index: index}, nil
}

// snapshot returns snapshot id from view. Errors: NotFound.
func (s *sandboxService) snapshot(view *state.View, id string) (*wire.Snapshot, error) {
	snap := view.Snapshot(id)
	if snap == nil {
		e := errs.New(errs.NotFound, "snapshot %s not found (at index %d of head %s): it was deleted, its worker was lost, or it was never taken; megaflow sandbox snapshots lists them",
			id, view.Index(), s.h.cfg.NodeID)
		e.Reason = ReasonSnapshotNotFound
		return nil, e
	}
	return snap, nil
}

// snapshotUsers returns the ids of the live sandboxes created from
// snapshot id, in id order.
func snapshotUsers(view *state.View, id string) []string {
	var out []string
	for g := range view.Graphs() {
		if !strings.HasPrefix(g.ID, spec.SandboxIDPrefix) {
			continue
		}
		t := view.Task(spec.SandboxTaskID(g.ID))
		if t == nil || t.Spec.GetSandbox().GetFromSnapshot() != id || state.IsTerminal(t.State) {
			continue
		}
		out = append(out, g.ID)
	}
	slices.Sort(out)
	return out
}

// sandboxFork resolves sp.from_snapshot in view and makes g run the
// snapshot's image on its worker (spec.ForkFrom). Errors: NotFound (no such
// snapshot, or another tenant's), FailedPrecondition (its worker is not
// ALIVE), Unavailable (rules below 3).
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
	if w := view.Worker(snap.GetWorkerId()); w == nil || !w.Alive() {
		status := "gone from the table"
		if w != nil {
			status = w.Status.String()
		}
		e := errs.New(errs.FailedPrecondition, "snapshot %s is on worker %s, which is %s: its image went with it; take a new snapshot", snap.GetId(), snap.GetWorkerId(), status)
		e.Reason = ReasonSnapshotWorkerGone
		return e
	}
	spec.ForkFrom(g, snap)
	return nil
}
