package head

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/megaflow/megaflow/head/consensus"
	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// Backups of the task table (OperatorService, proto/megaflow/v1/operator.proto;
// docs/operations.md). A save streams the leader's table in the snapshot
// format; a restore checks a whole snapshot in a scratch table, then hands
// it to Raft's user restore, which installs it on the leader and by
// InstallSnapshot on every other head.

// snapshotChunkBytes is the most snapshot bytes one SnapshotChunk carries.
const snapshotChunkBytes = 1 << 20

// MaxRestoreBytes bounds a snapshot SnapshotRestore accepts: 16 GiB. The
// leader spools it to its data directory and reads it once into a scratch
// table (about as much memory again as the table itself) before Raft takes
// it.
const MaxRestoreBytes = 16 << 30

// operatorService serves OperatorService on every head; the leader answers.
type operatorService struct {
	wire.UnimplementedOperatorServiceServer
	h *Head
}

// snapshotInfo describes the table v as a snapshot of size bytes with the
// given SHA-256.
func snapshotInfo(v *state.View, size int64, sum []byte) *wire.SnapshotInfo {
	info := &wire.SnapshotInfo{Index: v.Index(), Rules: v.Rules(), ClusterId: state.FormatClusterID(v.ClusterID()),
		Workers: uint64(len(v.Workers())), SizeBytes: uint64(size), Sha256: hex.EncodeToString(sum)}
	info.Graphs, info.ArchivedGraphs = uint64(countGraphs(v)), uint64(countArchived(v))
	for range v.Tasks() {
		info.Tasks++
	}
	return info
}

// SnapshotSave streams the leader's table after a barrier; see the proto.
func (s *operatorService) SnapshotSave(_ *wire.SnapshotSaveRequest, stream wire.OperatorService_SnapshotSaveServer) error {
	h, ctx := s.h, stream.Context()
	if !h.IsLeader() {
		return errs.ToStatus(h.notLeader())
	}
	// Everything committed before the call is in the table saved.
	if err := h.node.Await(ctx, h.node.Raft().Barrier(h.cfg.ApplyTimeout)); err != nil {
		return errs.ToStatus(h.raftError(err))
	}
	view := h.fsm.View()
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		err := fsm.WriteSnapshot(pw, view)
		pw.CloseWithError(err)
		written <- err
	}()
	sum, size := sha256.New(), int64(0)
	buf := make([]byte, snapshotChunkBytes)
	var sendErr error
	for sendErr == nil {
		n, err := io.ReadFull(pr, buf)
		if n > 0 {
			sum.Write(buf[:n])
			size += int64(n)
			sendErr = stream.Send(&wire.SnapshotChunk{Data: buf[:n]})
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil && sendErr == nil {
			sendErr = err
		}
	}
	pr.CloseWithError(errors.New("snapshot save: the stream ended")) // unblocks the writer after a send error
	if err := <-written; err != nil && sendErr == nil {
		sendErr = errs.New(errs.Internal, "snapshot save: writing the table: %v", err)
	}
	if sendErr != nil {
		return errs.ToStatus(sendErr)
	}
	info := snapshotInfo(view, size, sum.Sum(nil))
	h.logger.Info("table snapshot saved by an operator", "index", info.Index, "bytes", size, "graphs", info.Graphs, "archived_graphs", info.ArchivedGraphs, "tasks", info.Tasks)
	return stream.Send(&wire.SnapshotChunk{Info: info})
}

// SnapshotRestore replaces the table with a checked snapshot; see the
// proto.
func (s *operatorService) SnapshotRestore(stream wire.OperatorService_SnapshotRestoreServer) error {
	info, err := s.h.restoreSnapshot(stream.Context(), stream.Recv)
	if err != nil {
		return errs.ToStatus(err)
	}
	return stream.SendAndClose(&wire.SnapshotRestoreResponse{Info: info})
}

// restoreSnapshot spools the snapshot recv yields to a file in the data
// directory (at most MaxRestoreBytes), reads it into a scratch table
// (anything but a whole, valid snapshot this build can apply is refused
// there, before Raft sees it: Raft's restore panics on a snapshot its FSM
// refuses), refuses to replace a table holding graphs unless the first
// chunk says force, and installs it through Raft.
func (h *Head) restoreSnapshot(ctx context.Context, recv func() (*wire.SnapshotChunk, error)) (*wire.SnapshotInfo, error) {
	if !h.IsLeader() {
		return nil, h.notLeader()
	}
	f, err := os.CreateTemp(h.cfg.DataDir, "restore-*.snapshot")
	if err != nil {
		return nil, errs.New(errs.Internal, "snapshot restore: spool file in %s: %v", h.cfg.DataDir, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	sum, size, force, first := sha256.New(), int64(0), false, true
	for {
		c, err := recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if first {
			force, first = c.GetForce(), false
		}
		if size += int64(len(c.GetData())); size > MaxRestoreBytes {
			return nil, errs.New(errs.InvalidArgument, "snapshot restore: more than %d bytes; a table snapshot is never that large", int64(MaxRestoreBytes))
		}
		sum.Write(c.GetData())
		if _, err := f.Write(c.GetData()); err != nil {
			return nil, errs.New(errs.Internal, "snapshot restore: spooling to %s: %v", f.Name(), err)
		}
	}
	if size == 0 {
		return nil, errs.New(errs.InvalidArgument, "snapshot restore: no bytes received; pass a file `megaflow operator snapshot save` wrote")
	}
	// The whole snapshot, read once into a scratch table.
	scratch, err := fsm.New(fsm.Config{EventRingSize: 1})
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, errs.New(errs.Internal, "snapshot restore: %v", err)
	}
	if err := scratch.Restore(io.NopCloser(f)); err != nil {
		return nil, errs.New(errs.InvalidArgument, "snapshot restore: not a snapshot this build can restore (%v); pass a whole file `megaflow operator snapshot save` wrote", err)
	}
	info := snapshotInfo(scratch.View(), size, sum.Sum(nil))
	// Every head must apply the snapshot's rules: one that does not would
	// refuse it by InstallSnapshot for ever.
	if err := h.votersApply(info.Rules); err != nil {
		return nil, fmt.Errorf("snapshot restore: the snapshot is under rules %d: %w", info.Rules, err)
	}
	if n, a := countGraphs(h.fsm.View()), countArchived(h.fsm.View()); n+a > 0 && !force {
		return nil, errs.New(errs.FailedPrecondition, "snapshot restore: this cluster's table holds %d graphs and %d archived graph summaries, which the restore would replace; "+
			"restore into a fresh cluster, or pass --force to replace them", n, a)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, errs.New(errs.Internal, "snapshot restore: %v", err)
	}
	// Raft refuses a restore while its latest configuration entry is not
	// committed (a new cluster's bootstrap entry, until the leader's first
	// entry of its term commits): a barrier commits and applies everything
	// before it.
	if err := h.node.Raft().Barrier(h.cfg.ApplyTimeout).Error(); err != nil {
		return nil, h.raftError(fmt.Errorf("restore: waiting for the log to be applied first: %w", err))
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: info.Index, Size: size}
	if err := h.node.Raft().Restore(meta, f, h.cfg.ApplyTimeout); err != nil {
		return nil, h.raftError(fmt.Errorf("restore: %w", err))
	}
	// Raft's restore sets the FSM's table, not its applied index (the
	// snapshot's own, below Raft's): one entry brings it to Raft's, so
	// that reads waiting for an index past the restore are answered. It
	// changes nothing (the rules version in force, again).
	if _, _, err := h.apply(ctx, fsm.OpSetRules, wrapperspb.UInt64(info.Rules)); err != nil {
		h.logger.Warn("after a snapshot restore: committing an entry to catch the applied index up failed; the next write will", "err", err)
	}
	h.logger.Warn("table replaced by an operator's snapshot", "index", info.Index, "bytes", size, "graphs", info.Graphs, "archived_graphs", info.ArchivedGraphs,
		"tasks", info.Tasks, "cluster_id", info.ClusterId, "sha256", info.Sha256)
	return info, nil
}

// countArchived is how many archived graph summaries v holds.
func countArchived(v *state.View) int {
	n := 0
	for range v.ArchivedGraphs() {
		n++
	}
	return n
}

// countGraphs is how many live graphs v holds.
func countGraphs(v *state.View) int {
	n := 0
	for range v.Graphs() {
		n++
	}
	return n
}

// ExportSnapshot writes to w a snapshot of the table a stopped head left in
// dataDir (its newest Raft snapshot, then every entry of its log after it,
// committed or not, as the head would replay them on a restart) and
// returns what it holds: `megaflow-head export-snapshot`, for a cluster
// that lost its quorum (docs/operations.md). The head must be stopped (its
// data directory's lock is taken). Errors: the directory cannot be locked
// or read, an entry is missing or cannot be applied, w's write error.
func ExportSnapshot(dataDir string, w io.Writer) (*wire.SnapshotInfo, error) {
	f, err := fsm.New(fsm.Config{EventRingSize: 1})
	if err != nil {
		return nil, err
	}
	if _, err := consensus.Replay(dataDir, f, consensus.ReplayAll, 1024); err != nil {
		return nil, fmt.Errorf("export snapshot of %s: %w", dataDir, err)
	}
	sum := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(w, sum)}
	view := f.View()
	if err := fsm.WriteSnapshot(cw, view); err != nil {
		return nil, fmt.Errorf("export snapshot of %s: %w", dataDir, err)
	}
	return snapshotInfo(view, cw.n, sum.Sum(nil)), nil
}

// countingWriter counts what it passes on to w.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
