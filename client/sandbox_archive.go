package client

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// Directories in and out of a sandbox as tar streams (UploadArchive,
// DownloadArchive; `megaflow sandbox cp`). Like WriteFile, they are not
// retried once sent.

// MaxArchiveBytes bounds one tar stream copied into or out of a sandbox:
// 256 MiB.
const MaxArchiveBytes = spec.SandboxMaxArchive

// UploadArchive extracts tar stream r (entries relative to dir, at most
// MaxArchiveBytes) into the absolute directory dir of the sandbox,
// creating dir and missing parents, and returns the tar bytes sent. The
// worker refuses entries that leave dir, absolute names, and devices; the
// tar is extracted as it streams, so entries before a refused one are
// written (as tar -x does), the refused one and those after it are not.
// Errors as WriteFile; errs.InvalidArgument for a stream over the bound or
// a refused entry.
func (s *Sandbox) UploadArchive(ctx context.Context, dir string, r io.Reader) (int64, error) {
	if err := spec.CheckSandboxPath(s.id, dir); err != nil {
		return 0, err
	}
	addr, cc, err := s.c.pick()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := wire.NewSandboxServiceClient(cc).UploadArchive(ctx)
	if err != nil {
		return 0, s.execErr(ctx, addr, err)
	}
	buf := make([]byte, spec.SandboxArchiveChunk)
	var sent int64
	first := true
	for {
		n, rerr := io.ReadFull(r, buf)
		if sent+int64(n) > MaxArchiveBytes {
			return sent, errs.New(errs.InvalidArgument, "upload into sandbox %s: the tar stream is over %d bytes: copy a smaller directory", s.id, MaxArchiveBytes)
		}
		if n > 0 || first {
			m := &wire.SandboxUploadArchiveRequest{Data: buf[:n]}
			if first {
				m.SandboxId, m.Path, m.MinIndex = s.id, dir, s.index()
				first = false
			}
			if err := st.Send(m); err != nil {
				break // the server ended the stream: CloseAndRecv says why
			}
			sent += int64(n)
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return sent, fmt.Errorf("upload into sandbox %s: reading the tar stream: %w", s.id, rerr)
		}
	}
	if _, err := st.CloseAndRecv(); err != nil {
		return sent, s.execErr(ctx, addr, err)
	}
	return sent, nil
}

// DownloadArchive writes the absolute path p of the sandbox (a directory
// with everything under it, or one file) to w as a tar stream whose
// entries are named from p's base name on, at most MaxArchiveBytes, and
// returns the bytes written. Errors as ReadFile; errs.FailedPrecondition
// (ReasonFileTooLarge) when the tar passes the bound (w then holds a
// partial stream).
func (s *Sandbox) DownloadArchive(ctx context.Context, p string, w io.Writer) (int64, error) {
	if err := spec.CheckSandboxPath(s.id, p); err != nil {
		return 0, err
	}
	addr, cc, err := s.c.pick()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := wire.NewSandboxServiceClient(cc).DownloadArchive(ctx, &wire.SandboxDownloadArchiveRequest{SandboxId: s.id, Path: p, MinIndex: s.index()},
		grpc.MaxCallRecvMsgSize(4<<20))
	if err != nil {
		return 0, s.execErr(ctx, addr, err)
	}
	var got int64
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			return got, s.execErr(ctx, addr, err)
		}
		if _, err := w.Write(m.GetData()); err != nil {
			return got, fmt.Errorf("download from sandbox %s: writing the tar stream: %w", s.id, err)
		}
		got += int64(len(m.GetData()))
	}
}

// UploadDir copies the local directory local (its contents: regular files,
// directories and symbolic links; anything else is an
// errs.InvalidArgument error) into the absolute directory dir of the
// sandbox, or a local file to dir/<its name>, and returns the tar bytes
// sent. Errors as UploadArchive, and local file system errors.
func (s *Sandbox) UploadDir(ctx context.Context, local, dir string) (int64, error) {
	fi, err := os.Lstat(local)
	if err != nil {
		return 0, err
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := writeTar(pw, local, fi)
		pw.CloseWithError(err)
		done <- err
	}()
	n, err := s.UploadArchive(ctx, dir, pr)
	pr.CloseWithError(errors.New("upload ended")) // stops writeTar if the upload ended first
	if terr := <-done; terr != nil && (err == nil || errs.ClassOf(terr) == errs.InvalidArgument) {
		return n, terr
	}
	return n, err
}

// writeTar writes local (described by fi) as a tar stream: a directory's
// entries named relative to it, a file under its own name.
func writeTar(w io.Writer, local string, fi fs.FileInfo) error {
	tw := tar.NewWriter(w)
	add := func(file, name string, fi fs.FileInfo) error {
		link := ""
		switch {
		case fi.Mode().IsRegular(), fi.IsDir():
		case fi.Mode()&fs.ModeSymlink != 0:
			var err error
			if link, err = os.Readlink(file); err != nil {
				return err
			}
		default:
			return errs.New(errs.InvalidArgument, "%s is a %s: only files, directories and symbolic links are copied", file, fi.Mode().Type())
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, h.Uname, h.Gname = name, "", ""
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(file)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	}
	if !fi.IsDir() {
		if err := add(local, filepath.Base(local), fi); err != nil {
			return err
		}
		return tw.Close()
	}
	err := filepath.WalkDir(local, func(file string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(local, file)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return add(file, filepath.ToSlash(rel), info)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// DownloadDir copies the absolute path p of the sandbox into the local
// directory local (created if missing): a directory's contents into local,
// a file to local/<its name>; it returns the tar bytes received. Entries
// are written through os.Root, so none can land outside local (a name
// with "..", an absolute one, or one through a symbolic link that leaves
// local is an errs.InvalidArgument error); devices and FIFOs are refused.
// Errors as DownloadArchive, and local file system errors.
func (s *Sandbox) DownloadDir(ctx context.Context, p, local string) (int64, error) {
	if err := os.MkdirAll(local, 0o755); err != nil {
		return 0, err
	}
	root, err := os.OpenRoot(local)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := extractTar(pr, root, path.Base(path.Clean(p)))
		pr.CloseWithError(err)
		done <- err
	}()
	n, err := s.DownloadArchive(ctx, p, pw)
	pw.CloseWithError(err) // nil: the end of the stream
	if xerr := <-done; err == nil {
		err = xerr
	}
	return n, err
}

// extractTar writes tar stream r under root, the base name's own entry
// (the directory downloaded) dropped and base/ stripped from the others;
// a single file keeps its name.
func extractTar(r io.Reader, root *os.Root, base string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			_, _ = io.Copy(io.Discard, r) // the tar's padding
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(h.Name)
		if rest, ok := strings.CutPrefix(name, base+"/"); ok {
			name = rest
		} else if name == base && h.Typeflag == tar.TypeDir {
			continue
		}
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return errs.New(errs.InvalidArgument, "download: entry %q leaves the destination directory", h.Name)
		}
		if dir := path.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("download: entry %q: %w", h.Name, err)
			}
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			err = root.MkdirAll(name, mode|0o700)
		case tar.TypeReg:
			var f *os.File
			if f, err = root.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode); err == nil {
				_, err = io.Copy(f, tr)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		case tar.TypeSymlink:
			_ = root.Remove(name)
			err = root.Symlink(h.Linkname, name)
		case tar.TypeLink:
			_ = root.Remove(name)
			target, ok := strings.CutPrefix(path.Clean(h.Linkname), base+"/")
			if !ok {
				return errs.New(errs.InvalidArgument, "download: entry %q is a hard link to %q, outside the directory", h.Name, h.Linkname)
			}
			err = root.Link(target, name)
		default:
			return errs.New(errs.InvalidArgument, "download: entry %q is of tar type %q: only files, directories and links are copied", h.Name, h.Typeflag)
		}
		if err != nil {
			return fmt.Errorf("download: entry %q: %w", h.Name, err)
		}
	}
}
