// Package fileblob is the blob store in a local directory, MegaFlow's
// default artifact store (URL file:///abs/path). Any package may import it;
// it links nothing beyond the standard library.
//
// # Layout
//
// Under the store's directory:
//
//	objects/<key>   the object's bytes, exactly as put (cat-able)
//	meta/<key>      JSON: size, sha256, content_type, mtime_ns
//	tmp/            files being written; never listed
//
// Keys map one-to-one onto paths (ValidKey forbids "", ".", ".." elements,
// backslashes and NUL bytes), and every access goes through an os.Root, so
// no key and no symbolic link planted in the directory reaches outside it.
// A filesystem cannot hold a file and a directory of one name, so this store
// refuses a key below an existing object ("a/b/c" when "a/b" exists) or
// above existing keys ("a/b" when "a/b/c" exists) with ErrInvalidKey; S3 has
// no such limit. Artifact keys come from task output directories, which have
// the same limit, so the two never differ in practice.
//
// # Writes and checksums
//
// Put streams into tmp/, hashing with SHA-256 and checking the expected
// checksum and size when the caller gave them, fsyncs, then renames into
// objects/ (the commit point: a reader sees the old object or the new one,
// never a mix), writes meta/ the same way and fsyncs the directories, so an
// acknowledged Put survives a crash. tmp/ is a sibling of objects/ in the
// same directory tree and so on the same filesystem, which rename needs;
// keeping temporary files out of objects/ keeps them out of List.
//
// meta/<key> records the object file's size and modification time; Stat and
// Get use the recorded SHA-256 only when both still match the file (a crash
// between the two renames, or a concurrent overwrite, leaves them apart:
// the SHA-256 then reads as unknown, ""). Get verifies the bytes it returns
// against the recorded SHA-256 and fails with ErrChecksum at the end of a
// corrupted object.
//
// One process should own a directory; within it, Puts and Deletes of one key
// are serialized.
package fileblob

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/megaflow/megaflow/internal/blob"
)

const (
	objectsDir = "objects"
	metaDir    = "meta"
	tmpDir     = "tmp"
	// staleTemp is the age after which Open removes files left in tmp/ by
	// a crashed writer.
	staleTemp = time.Hour
)

// Store is a blob.Store in a local directory. It is safe for concurrent use.
type Store struct {
	dir   string
	root  *os.Root
	locks [64]sync.Mutex // by key hash: serializes commits of one key
}

var _ blob.Store = (*Store)(nil)

// meta is the JSON in meta/<key>.
type meta struct {
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type,omitempty"`
	MtimeNs     int64  `json:"mtime_ns"`
}

// Backend returns the blob.Backend of scheme "file" for blob.Open. URLs are
// file:///abs/path (host empty or "localhost", no query).
func Backend() blob.Backend {
	return blob.Backend{Scheme: "file", Open: func(_ context.Context, u *url.URL) (blob.Store, error) {
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("artifact store %q: file URLs name a local path, not host %q; use file:///abs/path", u.Redacted(), u.Host)
		}
		if u.Opaque != "" || !filepath.IsAbs(u.Path) {
			return nil, fmt.Errorf("artifact store %q: the path must be absolute; use file:///abs/path", u.Redacted())
		}
		if u.RawQuery != "" {
			return nil, fmt.Errorf("artifact store %q: file stores take no parameters (got %q)", u.Redacted(), u.RawQuery)
		}
		return Open(u.Path)
	}}
}

// Open opens (creating if needed, mode 0755) the store in directory dir,
// which must be absolute, and removes temporary files older than an hour
// left by a crashed writer. Errors: dir relative, or not creatable.
func Open(dir string) (*Store, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("file artifact store: directory %q is not absolute", dir)
	}
	dir = filepath.Clean(dir)
	for _, d := range []string{objectsDir, metaDir, tmpDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("file artifact store %s: %w", dir, err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("file artifact store %s: %w", dir, err)
	}
	s := &Store{dir: dir, root: root}
	s.removeStaleTemps(time.Now())
	return s, nil
}

func (s *Store) removeStaleTemps(now time.Time) {
	ents, err := fs.ReadDir(s.root.FS(), tmpDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > staleTemp {
			_ = s.root.Remove(path.Join(tmpDir, e.Name()))
		}
	}
}

// URL returns "file:///abs/path".
func (s *Store) URL() string { return (&url.URL{Scheme: "file", Path: s.dir}).String() }

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Close releases the directory handle.
func (s *Store) Close() error { return s.root.Close() }

func (s *Store) lock(key string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(key))
	return &s.locks[h.Sum32()%uint32(len(s.locks))]
}

// unavailable wraps an I/O error as blob.ErrUnavailable (a disk problem may
// pass; the caller may retry).
func unavailable(op, key string, err error) error {
	return fmt.Errorf("file artifact store: %s %q: %w (%w)", op, key, blob.ErrUnavailable, err)
}

func conflict(key string, err error) error {
	return fmt.Errorf("%w: %q: the file store cannot hold an object and keys below it under one name (%v)",
		blob.ErrInvalidKey, key, err)
}

// ctxReader fails reads once ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Put implements blob.Store.Put (see the package doc for the steps).
func (s *Store) Put(ctx context.Context, key string, r io.Reader, opts blob.PutOptions) (blob.Info, error) {
	if err := blob.ValidKey(key); err != nil {
		return blob.Info{}, err
	}
	if opts.SHA256 != "" {
		if err := blob.ValidSHA256(opts.SHA256); err != nil {
			return blob.Info{}, fmt.Errorf("put %q: %w", key, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return blob.Info{}, err
	}
	tmp, f, err := s.createTemp()
	if err != nil {
		return blob.Info{}, unavailable("put", key, err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = f.Close()
			_ = s.root.Remove(tmp)
		}
	}()
	size := opts.Size
	if size < 0 {
		size = -1
	}
	vr := blob.NewVerifyingReader(ctxReader{ctx, r}, opts.SHA256, size, fmt.Sprintf("key %q", key))
	if _, err := io.Copy(f, vr); err != nil {
		if errors.Is(err, blob.ErrChecksum) || ctx.Err() != nil {
			return blob.Info{}, fmt.Errorf("put %q: %w", key, err)
		}
		return blob.Info{}, unavailable("put", key, err)
	}
	if err := f.Sync(); err != nil {
		return blob.Info{}, unavailable("put", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return blob.Info{}, unavailable("put", key, err)
	}
	if err := f.Close(); err != nil {
		return blob.Info{}, unavailable("put", key, err)
	}
	if err := ctx.Err(); err != nil {
		return blob.Info{}, err
	}
	m := meta{Size: vr.N(), SHA256: vr.Sum(), ContentType: opts.ContentType, MtimeNs: fi.ModTime().UnixNano()}
	mu := s.lock(key)
	mu.Lock()
	defer mu.Unlock()
	if err := s.commit(tmp, path.Join(objectsDir, key)); err != nil {
		return blob.Info{}, s.commitErr(key, err)
	}
	committed = true
	// From here the object is in place; a failure to record meta leaves its
	// SHA-256 unknown, which Stat reports as "".
	if err := s.writeMeta(key, m); err != nil {
		return blob.Info{}, unavailable("put (metadata)", key, err)
	}
	return blob.Info{Key: key, Size: m.Size, SHA256: m.SHA256, ContentType: m.ContentType, Modified: fi.ModTime()}, nil
}

func (s *Store) commitErr(key string, err error) error {
	if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.EEXIST) ||
		errors.Is(err, syscall.ENOTEMPTY) {
		return conflict(key, err)
	}
	return unavailable("put", key, err)
}

func (s *Store) createTemp() (string, *os.File, error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	name := path.Join(tmpDir, "put-"+hex.EncodeToString(b[:]))
	f, err := s.root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	return name, f, err
}

// commit renames tmp to dst, creating dst's directory, and fsyncs what it
// changed. A concurrent Delete may remove a directory it just created while
// pruning; the rename is then retried.
func (s *Store) commit(tmp, dst string) error {
	dir := path.Dir(dst)
	var err error
	for range 5 {
		var created bool
		if created, err = s.mkdirAll(dir); err != nil {
			return err
		}
		if err = s.root.Rename(tmp, dst); err == nil {
			if created {
				return s.syncChain(dir)
			}
			return s.syncDir(dir)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return err
}

// mkdirAll makes dir and reports whether it had to.
func (s *Store) mkdirAll(dir string) (bool, error) {
	if fi, err := s.root.Stat(dir); err == nil {
		if !fi.IsDir() {
			return false, &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return false, nil
	}
	return true, s.root.MkdirAll(dir, 0o755)
}

func (s *Store) syncDir(dir string) error {
	d, err := s.root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// syncChain fsyncs dir and its parents up to the top of its tree
// (objects/ or meta/), so newly made directories are durable too.
func (s *Store) syncChain(dir string) error {
	for {
		if err := s.syncDir(dir); err != nil {
			return err
		}
		if !strings.Contains(dir, "/") {
			return nil
		}
		dir = path.Dir(dir)
	}
}

func (s *Store) writeMeta(key string, m meta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp, f, err := s.createTemp()
	if err != nil {
		return err
	}
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.commit(tmp, path.Join(metaDir, key))
	}
	if err != nil {
		_ = s.root.Remove(tmp)
	}
	return err
}

// info returns the Info of the object file fi under key, with the recorded
// SHA-256 and content type when meta/<key> still describes that file.
func (s *Store) info(key string, fi fs.FileInfo) blob.Info {
	in := blob.Info{Key: key, Size: fi.Size(), Modified: fi.ModTime()}
	b, err := s.root.ReadFile(path.Join(metaDir, key))
	if err != nil {
		return in
	}
	var m meta
	if json.Unmarshal(b, &m) != nil || m.Size != fi.Size() || m.MtimeNs != fi.ModTime().UnixNano() {
		return in
	}
	in.SHA256, in.ContentType = m.SHA256, m.ContentType
	return in
}

func notFound(key string) error {
	return fmt.Errorf("file artifact store: %q: %w", key, blob.ErrNotFound)
}

// Get implements blob.Store.Get; the reader fails with ErrChecksum at the
// end of an object whose bytes no longer match its recorded SHA-256.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, blob.Info, error) {
	if err := blob.ValidKey(key); err != nil {
		return nil, blob.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, blob.Info{}, err
	}
	f, err := s.root.Open(path.Join(objectsDir, key))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil, blob.Info{}, notFound(key)
		}
		return nil, blob.Info{}, unavailable("get", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, blob.Info{}, unavailable("get", key, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, blob.Info{}, notFound(key)
	}
	in := s.info(key, fi)
	vr := blob.NewVerifyingReader(ctxReader{ctx, f}, in.SHA256, in.Size, fmt.Sprintf("key %q", key))
	return readCloser{vr, f}, in, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// Stat implements blob.Store.Stat.
func (s *Store) Stat(ctx context.Context, key string) (blob.Info, error) {
	if err := blob.ValidKey(key); err != nil {
		return blob.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return blob.Info{}, err
	}
	fi, err := s.root.Lstat(path.Join(objectsDir, key))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return blob.Info{}, notFound(key)
		}
		return blob.Info{}, unavailable("stat", key, err)
	}
	if !fi.Mode().IsRegular() {
		return blob.Info{}, notFound(key)
	}
	return s.info(key, fi), nil
}

// List implements blob.Store.List. A prefix no valid key can start with
// ("../", "/x") returns ErrInvalidKey.
func (s *Store) List(ctx context.Context, prefix string) ([]blob.Info, error) {
	if err := blob.ValidPrefix(prefix); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dir = prefix[:i]
	}
	start := path.Join(objectsDir, dir)
	var out []blob.Info
	err := fs.WalkDir(s.root.FS(), start, func(p string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil {
			if p == start && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		key := strings.TrimPrefix(p, objectsDir+"/")
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil // removed while walking
		}
		out = append(out, s.info(key, fi))
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, syscall.ENOTDIR) {
			return nil, nil // the prefix's directory is an object
		}
		return nil, unavailable("list", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete implements blob.Store.Delete and prunes directories it empties.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blob.ValidKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	mu := s.lock(key)
	mu.Lock()
	defer mu.Unlock()
	obj := path.Join(objectsDir, key)
	fi, err := s.root.Lstat(obj)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return nil
	case err != nil:
		return unavailable("delete", key, err)
	case fi.IsDir():
		return nil // keys below it, no object under it
	}
	if err := s.root.Remove(obj); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return unavailable("delete", key, err)
	}
	if err := s.root.Remove(path.Join(metaDir, key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return unavailable("delete (metadata)", key, err)
	}
	dir := path.Dir(key)
	if err := s.syncDir(path.Join(objectsDir, dir)); err != nil {
		return unavailable("delete", key, err)
	}
	s.prune(objectsDir, dir)
	s.prune(metaDir, dir)
	return nil
}

// prune removes dir (relative to top) and its parents while they are empty.
func (s *Store) prune(top, dir string) {
	for dir != "." && dir != "" {
		if s.root.Remove(path.Join(top, dir)) != nil {
			return // not empty, or gone
		}
		dir = path.Dir(dir)
	}
}

// DeletePrefix implements blob.Store.DeletePrefix.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	infos, err := s.List(ctx, prefix)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, in := range infos {
		if err := s.Delete(ctx, in.Key); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
