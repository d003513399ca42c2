package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// SnapshotInfo describes a snapshot of the task table: the log index it was
// taken at, the rules version, the cluster id, counts of graphs, tasks and
// workers, its size in bytes and SHA-256 (hex).
type SnapshotInfo = wire.SnapshotInfo

// snapshotChunkBytes is how many bytes a SnapshotRestore message carries.
const snapshotChunkBytes = 1 << 20

// SnapshotSave writes a snapshot of the whole task table to w, as the
// leader holds it once everything committed before the call is applied,
// and returns what it holds. Calls go to the leader (followed through
// NotLeader answers) and are retried like other calls until the first
// byte is written; a stream that breaks after that returns an error, and w
// holds an incomplete snapshot to be discarded (the CLI writes to a
// temporary file and renames it only on success). SnapshotSave hashes
// what it writes and checks the length and SHA-256 against the info the
// head sends last; on a mismatch it returns an error, w holds bytes that
// are not the head's snapshot and must be discarded. Errors: Unavailable
// (no leader within ctx), ctx's error, w's write error, a length or
// SHA-256 mismatch.
func (c *Client) SnapshotSave(ctx context.Context, w io.Writer) (*SnapshotInfo, error) {
	var info *SnapshotInfo
	var written int64
	sum := sha256.New()
	err := c.callConn(ctx, func(ctx context.Context, conn grpc.ClientConnInterface) error {
		stream, err := wire.NewOperatorServiceClient(conn).SnapshotSave(ctx, &wire.SnapshotSaveRequest{})
		if err != nil {
			return err
		}
		for {
			chunk, err := stream.Recv()
			if err != nil {
				if written > 0 {
					// Not retryable: part of the snapshot is in w already.
					return fmt.Errorf("snapshot save: the stream broke after %d bytes (%v); the output is incomplete: discard it and save again", written, errs.FromStatus(err))
				}
				if errors.Is(err, io.EOF) {
					return errs.New(errs.Unavailable, "snapshot save: the head ended the stream without the snapshot's info; save again")
				}
				return err
			}
			if i := chunk.GetInfo(); i != nil {
				if i.GetSizeBytes() != uint64(written) {
					return fmt.Errorf("snapshot save: received %d bytes, the head sent %d; the output is incomplete: save again", written, i.GetSizeBytes())
				}
				if got := hex.EncodeToString(sum.Sum(nil)); got != i.GetSha256() {
					return fmt.Errorf("snapshot save: the received bytes have SHA-256 %s, the head's snapshot has %s; the output is damaged: discard it and save again", got, i.GetSha256())
				}
				info = i
				return nil
			}
			n, err := w.Write(chunk.GetData())
			sum.Write(chunk.GetData()[:n])
			written += int64(n)
			if err != nil {
				return fmt.Errorf("snapshot save: writing: %w", err)
			}
		}
	})
	return info, err
}

// SnapshotRestore replaces the cluster's whole table with the snapshot r
// holds (one SnapshotSave wrote) and returns what it holds. The leader
// checks the whole snapshot before anything changes; a table holding
// graphs is replaced only with force (restores are for disaster recovery
// into a fresh cluster). A call refused before it was sent (no leader, a
// follower) is sent again from the start of r (hence io.ReadSeeker); one
// that breaks after the whole snapshot was sent is not (the leader may
// have installed it), and its error says so. Errors:
// InvalidArgument (not a whole snapshot this build can restore, or over
// head.MaxRestoreBytes), FailedPrecondition (graphs present, no force),
// Unavailable, ctx's error, r's read error.
func (c *Client) SnapshotRestore(ctx context.Context, r io.ReadSeeker, force bool) (*SnapshotInfo, error) {
	var info *SnapshotInfo
	err := c.callConn(ctx, func(ctx context.Context, conn grpc.ClientConnInterface) error {
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("snapshot restore: %w", err)
		}
		// A read error cancels the stream: the head must not take what was
		// sent so far for the whole snapshot.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := wire.NewOperatorServiceClient(conn).SnapshotRestore(ctx)
		if err != nil {
			return err
		}
		buf := make([]byte, snapshotChunkBytes)
		first := true
		for {
			n, rerr := io.ReadFull(r, buf)
			if n > 0 || first {
				if err := stream.Send(&wire.SnapshotChunk{Data: buf[:n], Force: force && first}); err != nil {
					break // the head's answer, from CloseAndRecv, says why
				}
				first = false
			}
			if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
				break
			}
			if rerr != nil {
				cancel()
				return fmt.Errorf("snapshot restore: reading: %w", rerr)
			}
		}
		resp, err := stream.CloseAndRecv()
		if err != nil {
			if errs.ClassOf(errs.FromStatus(err)) == errs.Unavailable && !first {
				// The leader may have installed it before the call broke:
				// sending it again could replace what was written since.
				return fmt.Errorf("snapshot restore: the call broke after the snapshot was sent (%v); it may or may not have been applied: "+
					"check the cluster (megaflow cluster, megaflow graphs) before restoring again", errs.FromStatus(err))
			}
			return err
		}
		info = resp.GetInfo()
		return nil
	})
	return info, err
}
