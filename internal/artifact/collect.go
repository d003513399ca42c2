package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/megaflow/megaflow/internal/blob"
)

// MaxFiles caps the files one attempt's collection stores; the rest are
// left out with a note.
const MaxFiles = 10000

// PathProblem says why p cannot be an output path (relative to the output
// directory, clean, not leaving it through ".."), or "" when it can. It is
// the static check; symlinks are checked when the files are collected.
func PathProblem(p string) string {
	switch {
	case p == "":
		return "is empty"
	case strings.ContainsRune(p, 0) || strings.Contains(p, "\\"):
		return fmt.Sprintf("%q contains a NUL byte or a backslash", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Sprintf("%q is absolute; give a path relative to the output directory", p)
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return fmt.Sprintf("%q leaves the output directory through \"..\"", p)
	}
	if c != p {
		return fmt.Sprintf("%q is not clean; write it as %q", p, c)
	}
	return ""
}

// Collect stores the files under each of paths (declared output paths,
// relative to dir, the attempt's output directory) through spool under
// a.FileKey, and returns them sorted by path, with notes saying which
// paths were missing or refused. A path naming a directory collects every
// regular file below it. Everything is read through an os.Root at dir, so
// nothing outside dir is ever opened: "..", absolute paths and symlinks
// pointing out of dir are refused with a note; symlinks to directories are
// not followed. Errors: dir cannot be opened, the spool refused a file
// (full, disk), ctx's; files stored before the error stay queued.
func Collect(ctx context.Context, sp Spool, a Attempt, dir string, paths []string) ([]File, []string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("collect outputs: open output directory: %w", err)
	}
	defer root.Close()
	c := &collector{ctx: ctx, sp: sp, a: a, root: root, seen: map[string]bool{}}
	for _, p := range paths {
		if q := PathProblem(p); q != "" {
			c.note("output path %s: refused", q)
			continue
		}
		if err := c.path(p); err != nil {
			return c.files, c.notes, err
		}
	}
	slices.SortFunc(c.files, func(x, y File) int { return strings.Compare(x.Path, y.Path) })
	return c.files, c.notes, nil
}

type collector struct {
	ctx   context.Context
	sp    Spool
	a     Attempt
	root  *os.Root
	seen  map[string]bool
	files []File
	notes []string
}

func (c *collector) note(format string, args ...any) {
	c.notes = append(c.notes, fmt.Sprintf(format, args...))
}

// path collects declared path p.
func (c *collector) path(p string) error {
	st, err := c.root.Stat(p) // follows symlinks, only within the root
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.note("output path %q: no such file or directory", p)
		return nil
	case err != nil:
		c.note("output path %q refused: %v (symlinks must point inside the output directory)", p, err)
		return nil
	case st.IsDir():
		return fs.WalkDir(c.root.FS(), p, func(q string, d fs.DirEntry, err error) error {
			if err != nil {
				c.note("output path %q: %v", q, err)
				return nil
			}
			if d.IsDir() {
				return nil
			}
			if d.Type()&fs.ModeSymlink != 0 {
				st, err := c.root.Stat(q)
				if err != nil {
					c.note("output path %q refused: %v (symlinks must point inside the output directory)", q, err)
					return nil
				}
				if st.IsDir() {
					c.note("output path %q: a symlink to a directory, not followed", q)
					return nil
				}
			}
			return c.file(q)
		})
	}
	return c.file(p)
}

// file collects the regular file at p (checked again: it may be a device,
// a FIFO or a socket, which are skipped unopened).
func (c *collector) file(p string) error {
	if p == "." {
		return nil
	}
	if c.seen[p] {
		return nil
	}
	c.seen[p] = true
	st, err := c.root.Stat(p)
	if err != nil {
		c.note("output path %q refused: %v", p, err)
		return nil
	}
	if !st.Mode().IsRegular() {
		c.note("output path %q: not a regular file (%v), skipped", p, st.Mode().Type())
		return nil
	}
	if len(c.files) >= MaxFiles {
		c.note("output path %q: more than %d files; the rest are left out", p, MaxFiles)
		return fs.SkipAll
	}
	if err := blob.ValidKey(c.a.FileKey(p)); err != nil {
		c.note("output path %q refused: %v", p, err)
		return nil
	}
	f, err := c.root.Open(p)
	if err != nil {
		c.note("output path %q refused: %v", p, err)
		return nil
	}
	defer f.Close()
	h := sha256.New()
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	h.Write(head[:n])
	size, err := io.Copy(h, f)
	if err != nil {
		c.note("output path %q: read: %v", p, err)
		return nil
	}
	file := File{Path: p, Size: size + int64(n), SHA256: hex.EncodeToString(h.Sum(nil)), ContentType: contentType(p, head[:n])}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("collect %q: %w", p, err)
	}
	if err := c.sp.Enqueue(c.ctx, c.a.FileKey(p), io.LimitReader(f, file.Size),
		blob.PutOptions{Size: file.Size, SHA256: file.SHA256, ContentType: file.ContentType}); err != nil {
		return fmt.Errorf("collect %q: spool: %w", p, err)
	}
	c.files = append(c.files, file)
	return nil
}

// contentType guesses p's MIME type from its extension, else its content.
func contentType(p string, head []byte) string {
	if t := mime.TypeByExtension(path.Ext(p)); t != "" {
		return t
	}
	return http.DetectContentType(head)
}
