package docker

import (
	"archive/tar"
	"context"
	"errors"
	"io"

	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/runtime/contract"
)

var _ contract.ArchiveCopier = (*Runtime)(nil)

// PutArchive extracts tar stream rd at "/" of container id through the
// engine's archive API (the engine creates missing parents and keeps
// entries inside the container's root); see contract.ArchiveCopier. When
// the container runs as a numeric user ("uid" or "uid:gid": an admission
// policy's run_as_user, or an image's numeric USER) every entry is given
// to that user, as WriteFile's file is, so that a non-root sandbox can
// change what it was sent; else the entries keep the owners the stream
// names, as before. The call has no CallTimeout: a large stream takes as
// long as it takes, and ctx bounds it.
func (r *Runtime) PutArchive(ctx context.Context, id string, rd io.Reader) error {
	cctx, cancel := r.callCtx(ctx)
	ins, err := r.cli.ContainerInspect(cctx, id, client.ContainerInspectOptions{})
	cancel()
	if err != nil {
		return r.wrap(ctx, "inspect", id, err, contract.ErrNotFound)
	}
	if c := ins.Container.Config; c != nil {
		if uid, gid, ok := numericUser(c.User); ok {
			src := rd
			pr, pw := io.Pipe()
			done := make(chan struct{})
			go func() {
				defer close(done)
				pw.CloseWithError(ownEntries(src, pw, uid, gid))
			}()
			defer func() {
				// Unblocks the goroutine when the engine stopped reading.
				pr.CloseWithError(errors.New("the engine stopped reading the archive"))
				<-done
			}()
			rd = pr
		}
	}
	_, err = r.cli.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: "/", Content: rd})
	if err != nil {
		return r.wrapFile(ctx, "copy into", id, "/", err)
	}
	return nil
}

// ownEntries copies tar stream r to w with every entry owned by uid:gid
// (no user or group names, which the engine ignores).
func ownEntries(r io.Reader, w io.Writer, uid, gid int) error {
	tr, tw := tar.NewReader(r), tar.NewWriter(w)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tw.Close()
		}
		if err != nil {
			return err
		}
		h.Uid, h.Gid, h.Uname, h.Gname = uid, gid, "", ""
		h.Format = tar.FormatUnknown // the writer picks one that holds the ids
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// GetArchive returns the absolute path p of container id as the engine's
// tar stream; see contract.ArchiveCopier. The engine must answer within
// CallTimeout; reading the stream is bounded by ctx only.
func (r *Runtime) GetArchive(ctx context.Context, id, p string) (io.ReadCloser, error) {
	clean, err := absPath(p)
	if err != nil {
		return nil, err
	}
	sctx, answered, cancel := r.streamCtx(ctx)
	res, err := r.cli.CopyFromContainer(sctx, id, client.CopyFromContainerOptions{SourcePath: clean})
	if !answered() && err == nil { // the timer had fired: the engine was late
		res.Content.Close()
		err = context.DeadlineExceeded
	}
	if err != nil {
		cancel()
		return nil, r.wrapFile(ctx, "copy from", id, clean, err)
	}
	return &cancelCloser{ReadCloser: res.Content, cancel: cancel}, nil
}

// cancelCloser is a stream that cancels its call's context when closed.
type cancelCloser struct {
	io.ReadCloser
	cancel context.CancelFunc
}

// Close closes the stream and ends its call.
func (c *cancelCloser) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
