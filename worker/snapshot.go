package worker

import (
	"context"
	"errors"

	"github.com/megaflow/megaflow/internal/errs"
	mfspec "github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
)

// LabelSnapshot marks a sandbox snapshot's image with its snapshot id
// (docs/sandboxes.md, "Snapshots and forks"), so that an operator finds
// them: docker images --filter label=megaflow.snapshot.
const LabelSnapshot = "megaflow.snapshot"

// snapshotter returns the runtime's Snapshotter. Errors:
// FailedPrecondition (the runtime cannot snapshot).
func (s *sandboxServer) snapshotter() (contract.Snapshotter, error) {
	sn, ok := s.w.rt.(contract.Snapshotter)
	if !ok {
		return nil, errs.New(errs.FailedPrecondition, "worker %s's %s runtime cannot snapshot sandboxes", s.w.cfg.NodeID, s.w.rt.Name())
	}
	return sn, nil
}

// CommitSnapshot commits the sandbox's container into the snapshot's
// image. It counts as activity for the idle timer, as an exec does.
func (s *sandboxServer) CommitSnapshot(ctx context.Context, req *wire.CommitSnapshotRequest) (*wire.CommitSnapshotResponse, error) {
	if err := mfspec.CheckSnapshotID("snapshot_id", req.GetSnapshotId()); err != nil {
		return nil, errs.ToStatus(err)
	}
	if req.GetImage() != mfspec.SnapshotImage(req.GetSnapshotId()) {
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument, "snapshot %s: image %q: want %q", req.GetSnapshotId(), req.GetImage(), mfspec.SnapshotImage(req.GetSnapshotId())))
	}
	sn, err := s.snapshotter()
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	cid, box, err := s.w.sandboxTarget(req.GetSandboxId(), req.GetAttempt())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	if !box.begin(s.w.clock.Now()) {
		return nil, errs.ToStatus(errs.New(errs.FailedPrecondition, "sandbox %s expired: it was idle past its idle timeout and is stopping", req.GetSandboxId()))
	}
	defer func() { box.end(s.w.clock.Now()) }()
	id, size, err := sn.Commit(ctx, cid, req.GetImage(), map[string]string{
		LabelSnapshot: req.GetSnapshotId(), LabelCluster: s.w.cfg.ClusterName, LabelWorker: s.w.cfg.NodeID})
	if err != nil {
		return nil, errs.ToStatus(runtimeErr(req.GetSandboxId(), err))
	}
	s.w.log.Info("sandbox snapshot committed", "sandbox", req.GetSandboxId(), "snapshot", req.GetSnapshotId(), "image", id, "bytes", size)
	return &wire.CommitSnapshotResponse{ImageId: id, SizeBytes: size}, nil
}

// RemoveSnapshot removes a snapshot's image.
func (s *sandboxServer) RemoveSnapshot(ctx context.Context, req *wire.RemoveSnapshotRequest) (*wire.RemoveSnapshotResponse, error) {
	if err := mfspec.CheckSnapshotID("snapshot_id", req.GetSnapshotId()); err != nil {
		return nil, errs.ToStatus(err)
	}
	if req.GetImage() != mfspec.SnapshotImage(req.GetSnapshotId()) {
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument, "snapshot %s: image %q: want %q", req.GetSnapshotId(), req.GetImage(), mfspec.SnapshotImage(req.GetSnapshotId())))
	}
	sn, err := s.snapshotter()
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	existed, err := sn.RemoveImage(ctx, req.GetImage())
	if errors.Is(err, contract.ErrConflict) {
		return nil, errs.ToStatus(errs.New(errs.FailedPrecondition, "snapshot %s: a container still uses its image (a sandbox created from it is still stopping?): retry in a few seconds (%v)", req.GetSnapshotId(), err))
	}
	if err != nil {
		return nil, errs.ToStatus(runtimeErr(req.GetSnapshotId(), err))
	}
	s.w.log.Info("sandbox snapshot removed", "snapshot", req.GetSnapshotId(), "existed", existed)
	return &wire.RemoveSnapshotResponse{Existed: existed}, nil
}
