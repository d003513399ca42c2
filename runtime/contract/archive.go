package contract

import (
	"context"
	"io"
)

// ArchiveCopier is an optional extra of a Runtime: copying a directory
// tree into and out of a running container as a tar stream (sandboxes'
// UploadArchive and DownloadArchive, `megaflow sandbox cp`). The worker
// calls it from a sandbox call's goroutine; it checks paths and sizes
// before, so an implementation only moves bytes.
type ArchiveCopier interface {
	// PutArchive extracts tar stream r at "/" of container id: entry
	// names are absolute paths without the leading "/", and missing
	// parents are created. It reads r to its end. Errors: ErrNotFound (no
	// such container), ErrUnavailable, the engine's refusal (a read-only
	// path), or r's error.
	PutArchive(ctx context.Context, id string, r io.Reader) error
	// GetArchive returns the absolute path p of container id, a directory
	// with everything under it or one file, as a tar stream whose entries
	// are named from p's base name on; the caller closes it. Errors:
	// ErrNotFound (no such container), ErrNoSuchFile, ErrUnavailable.
	GetArchive(ctx context.Context, id, p string) (io.ReadCloser, error)
}
