package fileblob_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/blob"
	"github.com/megaflow/megaflow/internal/blob/blobtest"
	"github.com/megaflow/megaflow/internal/blob/fileblob"
)

func newStore(t *testing.T) *fileblob.Store {
	t.Helper()
	s, err := fileblob.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestContract(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store { return newStore(t) })
}

func TestLayoutIsPlainFiles(t *testing.T) {
	s := newStore(t)
	blobtest.Put(t, s, "acme/g/t/1/stdout", []byte("line\n"))
	b, err := os.ReadFile(filepath.Join(s.Dir(), "objects", "acme/g/t/1/stdout"))
	if err != nil || string(b) != "line\n" {
		t.Fatalf("objects/<key> = %q, %v; want the bytes as put", b, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.Dir(), "tmp")); len(ents) != 0 {
		t.Fatalf("tmp/ holds %d files after a Put", len(ents))
	}
	// Deleting prunes emptied directories.
	if err := s.Delete(context.Background(), "acme/g/t/1/stdout"); err != nil {
		t.Fatal(err)
	}
	for _, top := range []string{"objects", "meta"} {
		if ents, _ := os.ReadDir(filepath.Join(s.Dir(), top)); len(ents) != 0 {
			t.Errorf("%s/ holds %d entries after deleting the only key", top, len(ents))
		}
	}
}

func TestCorruptionDetectedOnGet(t *testing.T) {
	s := newStore(t)
	blobtest.Put(t, s, "k/v", []byte("good bytes"))
	p := filepath.Join(s.Dir(), "objects", "k/v")
	fi, _ := os.Stat(p)
	// Flip a byte in place, keeping size and modification time.
	if err := os.WriteFile(p, []byte("evil bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	rc, _, err := s.Get(context.Background(), "k/v")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := readAll(rc)
	if !errors.Is(err, blob.ErrChecksum) {
		t.Fatalf("reading a corrupted object: %q, %v; want ErrChecksum", b, err)
	}
	if len(b) >= len("evil bytes") {
		t.Fatalf("the reader delivered all %d corrupted bytes before failing", len(b))
	}
}

func readAll(r interface{ Read([]byte) (int, error) }) ([]byte, error) {
	var out []byte
	buf := make([]byte, 3)
	for {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			if err.Error() == "EOF" {
				return out, nil
			}
			return out, err
		}
	}
}

func TestSymlinkOutOfRootNotFollowed(t *testing.T) {
	s := newStore(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(s.Dir(), "objects", "evil")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := s.Get(ctx, "evil/secret"); err == nil {
		t.Fatal("Get through a symlink out of the store succeeded")
	}
	if _, err := s.Put(ctx, "evil/planted", strings.NewReader("x"), blob.PutOptions{Size: 1}); err == nil {
		t.Fatal("Put through a symlink out of the store succeeded")
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
		t.Fatal("a file was written outside the store")
	}
	if got := blobtest.Keys(t, s, ""); len(got) != 0 {
		t.Fatalf("List follows the symlink: %q", got)
	}
}

func TestConflictingKeys(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	blobtest.Put(t, s, "a/b", []byte("x"))
	if _, err := s.Put(ctx, "a/b/c", strings.NewReader("y"), blob.PutOptions{Size: 1}); !errors.Is(err, blob.ErrInvalidKey) {
		t.Errorf("Put below an object: %v, want ErrInvalidKey", err)
	}
	blobtest.Put(t, s, "d/e/f", []byte("x"))
	if _, err := s.Put(ctx, "d/e", strings.NewReader("y"), blob.PutOptions{Size: 1}); !errors.Is(err, blob.ErrInvalidKey) {
		t.Errorf("Put above keys: %v, want ErrInvalidKey", err)
	}
	if got := blobtest.Keys(t, s, ""); !slices.Equal(got, []string{"a/b", "d/e/f"}) {
		t.Errorf("after refused puts: %q", got)
	}
}

func TestOpenURLs(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	for _, u := range []string{"file://" + dir, dir, "file://localhost" + dir} {
		s, err := blob.Open(ctx, u, fileblob.Backend())
		if err != nil {
			t.Errorf("Open(%q): %v", u, err)
			continue
		}
		if s.URL() != "file://"+dir {
			t.Errorf("Open(%q).URL() = %q", u, s.URL())
		}
		s.Close()
	}
	for _, tc := range []struct{ url, want string }{
		{"s4://x", `unknown scheme "s4"`},
		{"file://host/x", `not host "host"`},
		{"file:rel/dir", "must be absolute"},
		{"file://" + dir + "?sync=0", "take no parameters"},
		{"", "empty URL"},
		{"rel/dir", "no scheme"},
	} {
		_, err := blob.Open(ctx, tc.url, fileblob.Backend())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q): %v, want an error containing %q", tc.url, err, tc.want)
		}
	}
}
