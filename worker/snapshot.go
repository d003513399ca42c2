package worker

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

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
	if err := box.begin(req.GetSandboxId(), s.w.clock.Now()); err != nil {
		return nil, errs.ToStatus(err)
	}
	defer func() { box.end(s.w.clock.Now()) }()
	id, size, err := sn.Commit(ctx, cid, req.GetImage(), s.w.clusterLabels(map[string]string{LabelSnapshot: req.GetSnapshotId()}))
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

// Snapshot image reconciliation. A snapshot's image is committed before
// its row (OpSnapshotAdd) is; a leader that loses its leadership in
// between, or a removal that fails after the row is deleted, leaves an
// image that no row names and no one would ever remove. The leader sends
// this worker the ids of the snapshots its table holds here
// (wire.WorkerSnapshots: after the Welcome, then whenever they change),
// and each reconcile round removes the worker's snapshot images (labels
// LabelSnapshot, LabelCluster, LabelWorker, and LabelClusterID as for
// containers) whose id is in no row and that are older than
// Config.SnapshotGrace, so that a commit whose row is still on its way is
// left alone. Without a list on the current stream (no stream, or a head
// too old to send one, or a list cut at its bound) nothing is removed.

// setTableSnapshots takes the snapshot ids the leader sent; the stream
// goroutine calls it.
func (w *Worker) setTableSnapshots(m *wire.WorkerSnapshots) {
	ids := make(map[string]bool, len(m.GetIds()))
	for _, id := range m.GetIds() {
		ids[id] = true
	}
	w.mu.Lock()
	w.snapIDs, w.snapKnown = ids, !m.GetTruncated()
	w.mu.Unlock()
	if m.GetTruncated() {
		w.log.Warn("the leader holds more snapshots of this worker than it sends: snapshot images are not reconciled; delete some (megaflow sandbox snapshot rm)",
			"sent", len(m.GetIds()))
	}
}

// reconcileSnapshots is the snapshot images' part of a reconcile round
// (reconcile's goroutine): it removes the images staleSnapshotImages
// picks, and logs once each snapshot of the table whose image the engine
// lacks.
func (w *Worker) reconcileSnapshots(ctx context.Context) {
	sn, ok := w.rt.(contract.Snapshotter)
	if !ok {
		return
	}
	w.mu.Lock()
	known, inTable := w.snapKnown, w.snapIDs
	w.mu.Unlock()
	if !known {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	match := w.ownLabels()
	match[LabelSnapshot] = ""
	images, err := sn.SnapshotImages(lctx, match)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("reconcile: cannot list snapshot images", "err", err)
		}
		return
	}
	if w.clusterID() == "" {
		// As filterOwn: another cluster's images carry its id.
		images = slices.DeleteFunc(images, func(im contract.Image) bool { _, other := im.Labels[LabelClusterID]; return other })
	}
	stale, held := staleSnapshotImages(images, inTable, w.clock.Now(), w.cfg.SnapshotGrace)
	for _, im := range stale {
		rctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
		existed, err := sn.RemoveImage(rctx, im.ref)
		cancel()
		if err != nil {
			w.log.Warn("reconcile: removing a snapshot image that no snapshot of the table names failed; retried next round",
				"snapshot", im.id, "image", im.ref, "err", err)
			continue
		}
		if existed {
			w.metrics.snapshotImages.Inc()
			w.log.Info("removed a snapshot image that no snapshot of the table names (its record never committed, or it was deleted)",
				"snapshot", im.id, "image", im.ref, "age", im.age.Round(time.Second))
		}
	}
	if w.snapMissing == nil {
		w.snapMissing = map[string]bool{}
	}
	for id := range w.snapMissing {
		if !inTable[id] || held[id] {
			delete(w.snapMissing, id)
		}
	}
	for id := range inTable {
		if !held[id] && !w.snapMissing[id] {
			w.snapMissing[id] = true
			w.log.Warn("the table lists a snapshot on this worker whose image the engine does not hold: forks of it cannot start; delete it (megaflow sandbox snapshot rm)",
				"snapshot", id, "image", mfspec.SnapshotImage(id))
		}
	}
}

// staleImage is an image staleSnapshotImages picked for removal.
type staleImage struct {
	id, ref string        // the snapshot id and the tag to remove
	age     time.Duration // how old it is
}

// staleSnapshotImages returns, from images (this worker's snapshot images),
// those to remove: tagged SnapshotImage of their LabelSnapshot id, the id
// in no row of inTable, and created more than grace before now; in id
// order. An image whose label is no snapshot id, or that lacks its tag (a
// copy someone made), is left alone. held says which snapshot ids have
// their image.
func staleSnapshotImages(images []contract.Image, inTable map[string]bool, now time.Time, grace time.Duration) (stale []staleImage, held map[string]bool) {
	held = map[string]bool{}
	for _, im := range images {
		id := im.Labels[LabelSnapshot]
		ref := mfspec.SnapshotImage(id)
		if mfspec.CheckSnapshotID("label", id) != nil || !slices.Contains(im.Tags, ref) {
			continue
		}
		held[id] = true
		if age := now.Sub(im.Created); !inTable[id] && age > grace {
			stale = append(stale, staleImage{id: id, ref: ref, age: age})
		}
	}
	slices.SortFunc(stale, func(a, b staleImage) int { return strings.Compare(a.id, b.id) })
	return stale, held
}
