package docker

import (
	"context"
	"io"

	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/runtime/contract"
)

var _ contract.ArchiveCopier = (*Runtime)(nil)

// PutArchive extracts tar stream rd at "/" of container id through the
// engine's archive API (the engine creates missing parents and keeps
// entries inside the container's root); see contract.ArchiveCopier. The
// call has no CallTimeout: a large stream takes as long as it takes, and
// ctx bounds it.
func (r *Runtime) PutArchive(ctx context.Context, id string, rd io.Reader) error {
	_, err := r.cli.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: "/", Content: rd})
	if err != nil {
		return r.wrapFile(ctx, "copy into", id, "/", err)
	}
	return nil
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
