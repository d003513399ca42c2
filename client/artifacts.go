package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// ErrChecksum says a downloaded artifact's bytes do not match the SHA-256
// or size its attempt's manifest lists.
var ErrChecksum = errors.New("artifact checksum mismatch")

// ArtifactFile is one stored file of an attempt: path (relative to the
// task's output directory), size in bytes, lowercase hex SHA-256 and
// content type.
type ArtifactFile = wire.ArtifactFile

// ArtifactList is an attempt's manifest: its files, log size and
// collection notes.
type ArtifactList = wire.ArtifactListResponse

// LogsOptions tunes Logs.
type LogsOptions struct {
	// Attempt is the 1-based attempt number; 0: the task's current one.
	Attempt uint32
	// Follow streams chunks as they land until the attempt is terminal
	// and its log complete; without it, Logs returns what is stored now.
	Follow bool
}

// LogChunk is one chunk of an attempt's combined stdout and stderr.
type LogChunk struct {
	// Attempt is the attempt the log belongs to; Chunk its 1-based number.
	Attempt uint32
	Chunk   uint32
	Data    []byte
}

// Logs streams task taskID's log, chunk by chunk in order, from the
// artifact store through any head. It resumes after the last chunk it
// yielded when a head fails. The sequence ends after the last chunk, or
// with an error: errs.NotFound (task or attempt), errs.FailedPrecondition
// (the heads have no artifact store), ctx's.
func (c *Client) Logs(ctx context.Context, taskID string, o LogsOptions) iter.Seq2[LogChunk, error] {
	return func(yield func(LogChunk, error) bool) {
		number, after := o.Attempt, uint32(0)
		delay := c.opts.backoffMin
		for {
			addr, conn, err := c.pick()
			if err != nil {
				yield(LogChunk{}, err)
				return
			}
			stream, err := wire.NewMegaflowServiceClient(conn).Logs(ctx, &wire.LogsRequest{TaskId: taskID, Attempt: number, Follow: o.Follow, AfterChunk: after,
				Read: c.sessionRead()})
			for err == nil {
				var res *wire.LogsResponse
				if res, err = stream.Recv(); err != nil {
					break
				}
				delay = c.opts.backoffMin
				number, after = res.Attempt, res.Chunk
				if !yield(LogChunk{Attempt: res.Attempt, Chunk: res.Chunk, Data: res.Data}, nil) {
					return
				}
			}
			if errors.Is(err, io.EOF) {
				return
			}
			err = errs.FromStatus(err)
			if ctx.Err() != nil {
				yield(LogChunk{}, ctx.Err())
				return
			}
			if !errs.Retryable(err) {
				yield(LogChunk{}, err)
				return
			}
			c.rotate(addr)
			if !clock.Sleep(c.opts.clock, jitter(delay), ctx.Done()) {
				yield(LogChunk{}, fmt.Errorf("%w (last error from head %s: %v)", ctx.Err(), addr, err))
				return
			}
			delay = min(2*delay, c.opts.backoffMax)
		}
	}
}

// LogsReader returns Logs as a reader of the log's bytes; the caller
// closes it (which ends the stream). Read returns Logs' error.
func (c *Client) LogsReader(ctx context.Context, taskID string, o LogsOptions) io.ReadCloser {
	next, stop := iter.Pull2(c.Logs(ctx, taskID, o))
	return &logsReader{next: next, stop: stop}
}

type logsReader struct {
	next func() (LogChunk, error, bool)
	stop func()
	buf  []byte
	err  error
}

func (r *logsReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		ch, err, ok := r.next()
		switch {
		case !ok:
			r.err = io.EOF
		case err != nil:
			r.err = err
		default:
			r.buf = ch.Data
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *logsReader) Close() error {
	r.stop()
	return nil
}

// Artifacts returns the manifest of attempt (0: the current one) of task
// taskID. Errors: errs.NotFound (no such task or attempt, or its artifacts
// have not landed: the message says which), errs.FailedPrecondition (no
// artifact store), errs.Unavailable (the store did not answer).
func (c *Client) Artifacts(ctx context.Context, taskID string, attempt uint32) (*ArtifactList, error) {
	var res *ArtifactList
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.ArtifactList(ctx, &wire.ArtifactListRequest{TaskId: taskID, Attempt: attempt, Read: c.sessionRead()})
		return err
	})
	return res, err
}

// GetArtifact writes file path of attempt (0: the current one) of task
// taskID to w and returns its manifest entry. The bytes are checked
// against the entry's size and SHA-256 here (the head checks them too):
// a mismatch returns an error wrapping ErrChecksum, after w received the
// bad bytes (write to a temporary file and rename on success). Errors as
// Artifacts, and w's.
func (c *Client) GetArtifact(ctx context.Context, taskID string, attempt uint32, path string, w io.Writer) (*ArtifactFile, error) {
	var file *ArtifactFile
	var written int64
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) error {
		if written > 0 {
			return fmt.Errorf("artifact %q: broke off after %d bytes", path, written)
		}
		stream, err := s.ArtifactGet(ctx, &wire.ArtifactGetRequest{TaskId: taskID, Attempt: attempt, Path: path, Read: c.sessionRead()})
		if err != nil {
			return err
		}
		h := sha256.New()
		for {
			res, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if res.File != nil {
				file = res.File
				continue
			}
			if file == nil {
				return fmt.Errorf("artifact %q: the head sent data before the file's entry", path)
			}
			h.Write(res.Data)
			if _, err := w.Write(res.Data); err != nil {
				return fmt.Errorf("artifact %q: write: %w", path, err)
			}
			written += int64(len(res.Data))
		}
		if file == nil {
			return fmt.Errorf("artifact %q: the head sent no file entry", path)
		}
		if got := hex.EncodeToString(h.Sum(nil)); written != file.Size || got != file.Sha256 {
			return fmt.Errorf("artifact %q: %w: got %d bytes with SHA-256 %s, the manifest lists %d bytes with %s",
				path, ErrChecksum, written, got, file.Size, file.Sha256)
		}
		return nil
	})
	return file, err
}

// sessionRead makes an artifact read wait, on the head that serves it,
// until that head applied what this client wrote or read before.
func (c *Client) sessionRead() *wire.ReadOptions {
	return &wire.ReadOptions{MinIndex: c.sessionIndex()}
}

// DeleteGraphResult says what DeleteGraph removed: the Raft index of the
// deletion, the task rows and the stored artifacts (objects).
type DeleteGraphResult = wire.DeleteGraphResponse

// DeleteGraph deletes finished graph id: its artifacts from the store,
// then the graph and its tasks from the table. Errors: errs.NotFound,
// errs.FailedPrecondition (a task has not finished: cancel the graph and
// wait), errs.Unavailable (no leader, or the store did not answer; the
// graph stays, retry).
func (c *Client) DeleteGraph(ctx context.Context, id string) (*DeleteGraphResult, error) {
	var res *DeleteGraphResult
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.DeleteGraph(ctx, &wire.DeleteGraphRequest{GraphId: id})
		return err
	})
	if err != nil {
		return nil, err
	}
	c.observe(res.Index)
	return res, nil
}
