package worker

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/errs"
	mfspec "github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
)

// archiveTarget resolves an archive call's sandbox; the caller ends the
// box's activity.
func (s *sandboxServer) archiveTarget(id string, n uint32) (contract.ArchiveCopier, *sandboxBox, string, error) {
	ac, ok := s.w.rt.(contract.ArchiveCopier)
	if !ok {
		return nil, nil, "", errs.New(errs.FailedPrecondition, "worker %s's %s runtime cannot copy directories of sandboxes", s.w.cfg.NodeID, s.w.rt.Name())
	}
	cid, box, err := s.w.sandboxTarget(id, n)
	if err != nil {
		return nil, nil, "", err
	}
	if err := box.begin(id, s.w.clock.Now()); err != nil {
		return nil, nil, "", err
	}
	return ac, box, cid, nil
}

// UploadArchive extracts the client's tar stream into a directory of the
// sandbox's container: every entry is checked (rearchive) and renamed under
// the directory, and the stream is bounded by mfspec.SandboxMaxArchive and
// by Config.UploadIdle between chunks. A goroutine of the call turns the
// received chunks into the tar the engine reads; it ends before
// UploadArchive returns, except after an idle client: it is then blocked
// in the stream's Recv, which fails once UploadArchive returned, and it
// ends then.
func (s *sandboxServer) UploadArchive(stream grpc.ClientStreamingServer[wire.SandboxUploadArchiveRequest, wire.SandboxUploadArchiveResponse]) error {
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return errs.ToStatus(errs.New(errs.InvalidArgument, "upload: the stream ended before its first message (sandbox_id, path)"))
	}
	if err != nil {
		return err
	}
	id, dir := first.GetSandboxId(), first.GetPath()
	if err := mfspec.CheckSandboxPath(id, dir); err != nil {
		return errs.ToStatus(err)
	}
	ac, box, cid, err := s.archiveTarget(id, first.GetAttempt())
	if err != nil {
		return errs.ToStatus(err)
	}
	defer func() { box.end(s.w.clock.Now()) }()

	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// The watch times the waits for the client's next chunk (UploadIdle),
	// not the engine's work: recv says when it starts and ends a wait.
	waiting := make(chan bool)
	pr, pw := io.Pipe()
	idle := make(chan struct{}) // closed when the client went quiet for UploadIdle
	stopWatch := make(chan struct{})
	watchDone := make(chan struct{})
	src := &chunkReader{buf: first.GetData(), recv: func() ([]byte, error) {
		select {
		case waiting <- true:
		case <-watchDone:
		}
		m, err := stream.Recv()
		select {
		case waiting <- false:
		case <-watchDone:
		}
		return m.GetData(), err
	}, limit: mfspec.SandboxMaxArchive}
	go func() { // owned by UploadArchive, which stops it and waits
		defer close(watchDone)
		var t clock.Timer
		var fired <-chan time.Time
		stop := func() {
			if t != nil {
				t.Stop()
				t, fired = nil, nil
			}
		}
		defer stop()
		for {
			select {
			case w := <-waiting:
				stop()
				if w {
					t = s.w.clock.NewTimer(s.w.cfg.UploadIdle)
					fired = t.C()
				}
			case <-fired:
				close(idle)
				// The engine's request ends. Its body is read from pr, and
				// Go's HTTP client returns only once the body's read does:
				// closing pr ends that read.
				cancel()
				pr.CloseWithError(errors.New("the client sent nothing for " + s.w.cfg.UploadIdle.String()))
				return
			case <-stopWatch:
				return
			}
		}
	}()
	defer func() {
		close(stopWatch)
		<-watchDone
	}()
	done := make(chan error, 1)
	go func() {
		err := rearchive(src, pw, path.Clean(dir))
		pw.CloseWithError(err) // nil: EOF for the engine
		done <- err
	}()
	putErr := ac.PutArchive(ctx, cid, pr)
	pr.CloseWithError(errors.New("the engine stopped reading")) // unblocks the goroutine if it is still writing
	select {
	case err = <-done:
	case <-idle:
		// The goroutine waits in Recv for a chunk that does not come; it
		// ends with the stream, once this returns. An engine that failed
		// by itself before says why.
		if putErr != nil && !errors.Is(putErr, context.Canceled) {
			return errs.ToStatus(runtimeErr(id, putErr))
		}
		return status.Errorf(codes.DeadlineExceeded, "upload into sandbox %s: the client sent nothing for %v, so the upload was ended: what came before may be extracted in %s; send the whole archive again",
			id, s.w.cfg.UploadIdle, dir)
	}
	if err != nil {
		var e *errs.Error
		if errors.As(err, &e) {
			return errs.ToStatus(err)
		}
		if putErr == nil || stream.Context().Err() != nil {
			return err // the client's stream failed
		}
	}
	if putErr != nil {
		return errs.ToStatus(runtimeErr(id, putErr))
	}
	return stream.SendAndClose(&wire.SandboxUploadArchiveResponse{Bytes: src.n})
}

// DownloadArchive streams a path of the sandbox's container as a tar
// stream in chunks of at most spec.SandboxArchiveChunk, refusing one over
// max_bytes (FailedPrecondition, FILE_TOO_LARGE) once it passes the bound;
// the client then discards what it got.
func (s *sandboxServer) DownloadArchive(req *wire.SandboxDownloadArchiveRequest, stream grpc.ServerStreamingServer[wire.SandboxDownloadArchiveResponse]) error {
	if err := mfspec.CheckSandboxPath(req.GetSandboxId(), req.GetPath()); err != nil {
		return errs.ToStatus(err)
	}
	limit := req.GetMaxBytes()
	if limit <= 0 || limit > mfspec.SandboxMaxArchive {
		limit = mfspec.SandboxMaxArchive
	}
	ac, box, cid, err := s.archiveTarget(req.GetSandboxId(), req.GetAttempt())
	if err != nil {
		return errs.ToStatus(err)
	}
	defer func() { box.end(s.w.clock.Now()) }()
	rc, err := ac.GetArchive(stream.Context(), cid, req.GetPath())
	if err != nil {
		return errs.ToStatus(runtimeErr(req.GetSandboxId(), err))
	}
	defer rc.Close()
	buf := make([]byte, mfspec.SandboxArchiveChunk)
	var total int64
	for {
		n, rerr := io.ReadFull(rc, buf)
		total += int64(n)
		if total > limit {
			e := errs.New(errs.FailedPrecondition, "sandbox %s: the tar of %s is over %d bytes (max_bytes): copy a smaller directory", req.GetSandboxId(), req.GetPath(), limit)
			e.Reason = ReasonFileTooLarge
			return errs.ToStatus(e)
		}
		if n > 0 {
			if err := stream.Send(&wire.SandboxDownloadArchiveResponse{Data: buf[:n]}); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			return nil
		}
		if rerr != nil {
			return errs.ToStatus(runtimeErr(req.GetSandboxId(), fmt.Errorf("reading the engine's tar: %w", rerr)))
		}
	}
}

// chunkReader reads a stream of chunks (recv's) as one byte stream, at
// most limit bytes: past it, an InvalidArgument error.
type chunkReader struct {
	buf   []byte
	recv  func() ([]byte, error)
	limit int64
	n     int64
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		b, err := c.recv()
		if err != nil {
			return 0, err // io.EOF at the stream's end
		}
		c.buf = b
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	c.n += int64(n)
	if c.n > c.limit {
		return 0, errs.New(errs.InvalidArgument, "upload: the tar stream is over %d bytes: copy a smaller directory", c.limit)
	}
	return n, nil
}

// rearchive copies tar stream r to w with every entry renamed under the
// absolute directory dir (a name "a/b" becomes "<dir>/a/b" without the
// leading "/", as PutArchive extracts at "/"). It refuses (InvalidArgument,
// naming the entry) absolute names, names that leave the directory
// ("../x"), hard links that do, and entries other than regular files,
// directories, symbolic links and hard links (devices, FIFOs). Entries
// named "." are dropped (dir itself).
func rearchive(r io.Reader, w io.Writer, dir string) error {
	tr, tw := tar.NewReader(r), tar.NewWriter(w)
	var total int64 // the files' sizes, as extracted
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tw.Close()
		}
		if err != nil {
			var e *errs.Error
			if errors.As(err, &e) {
				return err
			}
			return errs.New(errs.InvalidArgument, "upload: not a tar stream: %v", err)
		}
		name, err := entryUnder(dir, h.Name)
		if err != nil {
			return err
		}
		if name == "" {
			continue
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
		case tar.TypeLink:
			if h.Linkname, err = entryUnder(dir, h.Linkname); err != nil || h.Linkname == "" {
				return errs.New(errs.InvalidArgument, "upload: entry %q is a hard link to %q, outside the directory", h.Name, h.Linkname)
			}
		default:
			return errs.New(errs.InvalidArgument, "upload: entry %q is of tar type %q: only files, directories and links are copied", h.Name, h.Typeflag)
		}
		// A sparse entry (GNU or PAX) is expanded by the reader, holes as
		// zeros: a few bytes of tar could declare a terabyte. Refused, and
		// the files' total size is held to the stream's own bound.
		if h.Typeflag == tar.TypeGNUSparse || hasSparseRecords(h) {
			return errs.New(errs.InvalidArgument, "upload: entry %q is a sparse file: copy it as a regular file (tar without --sparse)", h.Name)
		}
		if total += max(h.Size, 0); total > mfspec.SandboxMaxArchive {
			return errs.New(errs.InvalidArgument, "upload: the files in the tar stream add up to over %d bytes: copy a smaller directory", int64(mfspec.SandboxMaxArchive))
		}
		h.Name = name
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return err
			}
		}
	}
}

// entryUnder returns tar entry name renamed under the absolute directory
// dir, without its leading "/"; "" for the directory itself ("." or "./").
// Errors: InvalidArgument for an absolute name or one that leaves dir.
func entryUnder(dir, name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", errs.New(errs.InvalidArgument, "upload: entry %q is an absolute path: tar entries must be relative to the directory", name)
	}
	clean := path.Clean(name)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", errs.New(errs.InvalidArgument, "upload: entry %q leaves the directory", name)
	}
	if clean == "." {
		return "", nil
	}
	return strings.TrimPrefix(path.Join(dir, clean), "/"), nil
}

// hasSparseRecords reports whether h carries PAX records of a sparse file
// (GNU.sparse.*).
func hasSparseRecords(h *tar.Header) bool {
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}
