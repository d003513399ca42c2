// Package blobtest holds the contract test suite every blob.Store backend
// passes (Run) and Flaky, a store wrapper that fails on demand. Only tests
// import it.
package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/megaflow/megaflow/internal/blob"
)

// LargeSize is the size in bytes of the suite's large object: above 5 MiB,
// S3's smallest multipart part, so a backend with a 5 MiB part size sends
// it in two parts.
const LargeSize = 6<<20 + 12345

// Run runs the contract suite against stores made by newStore; each call
// must return a new, empty store, closed by newStore's cleanup.
func Run(t *testing.T, newStore func(t *testing.T) blob.Store) {
	t.Run("PutGetStat", func(t *testing.T) { testPutGetStat(t, newStore(t)) })
	t.Run("NotFound", func(t *testing.T) { testNotFound(t, newStore(t)) })
	t.Run("Overwrite", func(t *testing.T) { testOverwrite(t, newStore(t)) })
	t.Run("List", func(t *testing.T) { testList(t, newStore(t)) })
	t.Run("DeletePrefix", func(t *testing.T) { testDeletePrefix(t, newStore(t)) })
	t.Run("InvalidKeys", func(t *testing.T) { testInvalidKeys(t, newStore(t)) })
	t.Run("ChecksumMismatch", func(t *testing.T) { testChecksumMismatch(t, newStore(t)) })
	t.Run("Empty", func(t *testing.T) { testEmpty(t, newStore(t)) })
	t.Run("Large", func(t *testing.T) { testLarge(t, newStore(t)) })
	t.Run("ConcurrentPuts", func(t *testing.T) { testConcurrentPuts(t, newStore(t)) })
	t.Run("Cancel", func(t *testing.T) { testCancel(t, newStore(t)) })
}

// Sum returns the lowercase hex SHA-256 of b.
func Sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Bytes returns n pseudo-random bytes from seed.
func Bytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// onlyReader hides every method but Read (no Seek, no WriteTo, no Len), so
// backends take their streaming path.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// Put stores b under key with its SHA-256, failing the test on error.
func Put(t *testing.T, s blob.Store, key string, b []byte) blob.Info {
	t.Helper()
	in, err := s.Put(context.Background(), key, onlyReader{bytes.NewReader(b)},
		blob.PutOptions{Size: int64(len(b)), SHA256: Sum(b), ContentType: "application/octet-stream"})
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return in
}

// Get reads key whole, failing the test on error.
func Get(t *testing.T, s blob.Store, key string) ([]byte, blob.Info) {
	t.Helper()
	rc, in, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	return b, in
}

// Keys lists the keys under prefix, failing the test on error.
func Keys(t *testing.T, s blob.Store, prefix string) []string {
	t.Helper()
	infos, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatalf("list %q: %v", prefix, err)
	}
	keys := []string{}
	for _, in := range infos {
		keys = append(keys, in.Key)
	}
	return keys
}

func testPutGetStat(t *testing.T, s blob.Store) {
	ctx := context.Background()
	body := []byte("hello, artifacts\n")
	in, err := s.Put(ctx, "acme/g1/train/1/stdout", bytes.NewReader(body),
		blob.PutOptions{Size: int64(len(body)), SHA256: Sum(body), ContentType: "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	if in.Key != "acme/g1/train/1/stdout" || in.Size != int64(len(body)) || in.SHA256 != Sum(body) {
		t.Fatalf("Put returned %+v", in)
	}
	got, gin := Get(t, s, "acme/g1/train/1/stdout")
	if !bytes.Equal(got, body) {
		t.Fatalf("Get returned %q, want %q", got, body)
	}
	st, err := s.Stat(ctx, "acme/g1/train/1/stdout")
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []blob.Info{gin, st} {
		if x.Size != int64(len(body)) || x.SHA256 != Sum(body) || x.ContentType != "text/plain" || x.Modified.IsZero() {
			t.Errorf("Info %+v: want size %d, sha256 %s, content type text/plain, a modification time",
				x, len(body), Sum(body))
		}
	}
	// Unknown size and no checksum given: the backend computes it.
	in, err = s.Put(ctx, "acme/g1/train/1/stderr", onlyReader{strings.NewReader("oops")}, blob.PutOptions{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	if in.Size != 4 || in.SHA256 != Sum([]byte("oops")) {
		t.Fatalf("Put of unknown size returned %+v", in)
	}
	if got, _ := Get(t, s, "acme/g1/train/1/stderr"); string(got) != "oops" {
		t.Fatalf("Get returned %q", got)
	}
}

func testNotFound(t *testing.T, s blob.Store) {
	ctx := context.Background()
	if _, _, err := s.Get(ctx, "a/missing"); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Get of a missing key: %v, want ErrNotFound", err)
	}
	if _, err := s.Stat(ctx, "a/missing"); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Stat of a missing key: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "a/missing"); err != nil {
		t.Errorf("Delete of a missing key: %v, want nil", err)
	}
	Put(t, s, "a/b/c", []byte("x"))
	// "a/b" is a prefix of a key, not an object.
	if _, err := s.Stat(ctx, "a/b"); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Stat of a key's prefix: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "a/b"); err != nil {
		t.Errorf("Delete of a key's prefix: %v, want nil", err)
	}
	if got := Keys(t, s, ""); !slices.Equal(got, []string{"a/b/c"}) {
		t.Errorf("after deleting a prefix as a key: %q, want [a/b/c]", got)
	}
}

func testOverwrite(t *testing.T, s blob.Store) {
	Put(t, s, "k/v", []byte("first version"))
	Put(t, s, "k/v", []byte("second"))
	got, in := Get(t, s, "k/v")
	if string(got) != "second" || in.Size != 6 || in.SHA256 != Sum([]byte("second")) {
		t.Fatalf("after overwrite: %q %+v", got, in)
	}
	if keys := Keys(t, s, ""); !slices.Equal(keys, []string{"k/v"}) {
		t.Fatalf("after overwrite List: %q", keys)
	}
}

func testList(t *testing.T, s blob.Store) {
	keys := []string{"t/g/ab", "t/g/a/2/x", "t/g/a/1/z", "t/g/a/1/y", "t/g/a.b", "t/h/1", "u/1"}
	for i, k := range keys {
		Put(t, s, k, []byte(fmt.Sprint(i)))
	}
	cases := []struct {
		prefix string
		want   []string
	}{
		{"", []string{"t/g/a.b", "t/g/a/1/y", "t/g/a/1/z", "t/g/a/2/x", "t/g/ab", "t/h/1", "u/1"}},
		{"t/g/a/", []string{"t/g/a/1/y", "t/g/a/1/z", "t/g/a/2/x"}},
		{"t/g/a", []string{"t/g/a.b", "t/g/a/1/y", "t/g/a/1/z", "t/g/a/2/x", "t/g/ab"}},
		{"t/g/a/1/z", []string{"t/g/a/1/z"}},
		{"t/", []string{"t/g/a.b", "t/g/a/1/y", "t/g/a/1/z", "t/g/a/2/x", "t/g/ab", "t/h/1"}},
		{"nope/", []string{}},
		{"t/g/a/1/z/", []string{}},
	}
	for _, tc := range cases {
		if got := Keys(t, s, tc.prefix); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
	infos, err := s.List(context.Background(), "t/g/ab")
	if err != nil || len(infos) != 1 || infos[0].Size != 1 || infos[0].Modified.IsZero() {
		t.Errorf("List(t/g/ab) = %+v, %v: want one object of 1 byte with a modification time", infos, err)
	}
}

func testDeletePrefix(t *testing.T, s blob.Store) {
	ctx := context.Background()
	for _, k := range []string{"t/g1/a/1/out", "t/g1/a/1/err", "t/g1/b/1/out", "t/g10/a/1/out", "t/g2/a/1/out"} {
		Put(t, s, k, []byte(k))
	}
	n, err := s.DeletePrefix(ctx, "t/g1/")
	if err != nil || n != 3 {
		t.Fatalf("DeletePrefix(t/g1/) = %d, %v; want 3, nil", n, err)
	}
	if got := Keys(t, s, ""); !slices.Equal(got, []string{"t/g10/a/1/out", "t/g2/a/1/out"}) {
		t.Fatalf("after DeletePrefix: %q", got)
	}
	if err := s.Delete(ctx, "t/g2/a/1/out"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, "t/g2/a/1/out"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Stat after Delete: %v, want ErrNotFound", err)
	}
	if n, err := s.DeletePrefix(ctx, "none/"); err != nil || n != 0 {
		t.Fatalf("DeletePrefix of nothing = %d, %v", n, err)
	}
}

func testInvalidKeys(t *testing.T, s blob.Store) {
	ctx := context.Background()
	Put(t, s, "ok/key", []byte("x"))
	for _, key := range []string{"", "/abs", "../up", "a/../../up", "a//b", "a/./b", "a/", "a\\b", "a\x00b",
		strings.Repeat("k", blob.MaxKeyBytes+1)} {
		if _, err := s.Put(ctx, key, strings.NewReader("evil"), blob.PutOptions{Size: 4}); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("Put(%q): %v, want ErrInvalidKey", key, err)
		}
		if _, _, err := s.Get(ctx, key); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("Get(%q): %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.Stat(ctx, key); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("Stat(%q): %v, want ErrInvalidKey", key, err)
		}
		if err := s.Delete(ctx, key); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("Delete(%q): %v, want ErrInvalidKey", key, err)
		}
	}
	if got := Keys(t, s, ""); !slices.Equal(got, []string{"ok/key"}) {
		t.Errorf("after invalid puts the store holds %q, want [ok/key]", got)
	}
}

func testChecksumMismatch(t *testing.T, s blob.Store) {
	ctx := context.Background()
	body := Bytes(1, 1000)
	wrong := Sum([]byte("something else"))
	cases := []struct {
		name string
		opts blob.PutOptions
	}{
		{"wrong sha256", blob.PutOptions{Size: int64(len(body)), SHA256: wrong}},
		{"wrong sha256, unknown size", blob.PutOptions{Size: -1, SHA256: wrong}},
		{"short", blob.PutOptions{Size: int64(len(body)) + 1, SHA256: Sum(body)}},
		{"long", blob.PutOptions{Size: int64(len(body)) - 1}},
		{"malformed sha256", blob.PutOptions{Size: int64(len(body)), SHA256: "ABC"}},
	}
	for _, tc := range cases {
		_, err := s.Put(ctx, "fresh/key", onlyReader{bytes.NewReader(body)}, tc.opts)
		if !errors.Is(err, blob.ErrChecksum) {
			t.Errorf("%s: Put: %v, want ErrChecksum", tc.name, err)
		}
		if _, err := s.Stat(ctx, "fresh/key"); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("%s: Stat after a refused Put: %v, want ErrNotFound", tc.name, err)
		}
	}
	// A refused overwrite keeps the old object.
	Put(t, s, "old/key", []byte("old"))
	if _, err := s.Put(ctx, "old/key", bytes.NewReader(body), blob.PutOptions{Size: int64(len(body)), SHA256: wrong}); !errors.Is(err, blob.ErrChecksum) {
		t.Errorf("overwrite: Put: %v, want ErrChecksum", err)
	}
	if got, _ := Get(t, s, "old/key"); string(got) != "old" {
		t.Errorf("after a refused overwrite the key holds %q, want %q", got, "old")
	}
	if got := Keys(t, s, ""); !slices.Equal(got, []string{"old/key"}) {
		t.Errorf("after refused puts the store holds %q", got)
	}
}

func testEmpty(t *testing.T, s blob.Store) {
	in := Put(t, s, "e/empty", nil)
	if in.Size != 0 || in.SHA256 != blob.EmptySHA256 {
		t.Fatalf("Put of empty: %+v", in)
	}
	got, gin := Get(t, s, "e/empty")
	if len(got) != 0 || gin.Size != 0 {
		t.Fatalf("Get of empty: %q %+v", got, gin)
	}
	if _, err := s.Put(context.Background(), "e/empty2", strings.NewReader(""), blob.PutOptions{Size: 0, SHA256: Sum([]byte("x"))}); !errors.Is(err, blob.ErrChecksum) {
		t.Fatalf("Put of empty with a wrong checksum: %v, want ErrChecksum", err)
	}
}

func testLarge(t *testing.T, s blob.Store) {
	body := Bytes(7, LargeSize)
	for _, size := range []int64{int64(len(body)), -1} {
		key := fmt.Sprintf("big/size%d", size)
		in, err := s.Put(context.Background(), key, onlyReader{bytes.NewReader(body)},
			blob.PutOptions{Size: size, SHA256: Sum(body)})
		if err != nil {
			t.Fatalf("Put of %d bytes (size given %d): %v", len(body), size, err)
		}
		if in.Size != int64(len(body)) {
			t.Fatalf("Put returned %+v", in)
		}
		got, gin := Get(t, s, key)
		if !bytes.Equal(got, body) || gin.SHA256 != Sum(body) {
			t.Fatalf("Get of the large object: %d bytes, sha256 %s; want %d bytes, %s", len(got), gin.SHA256, len(body), Sum(body))
		}
	}
	// A large object with a wrong checksum leaves nothing.
	if _, err := s.Put(context.Background(), "big/bad", onlyReader{bytes.NewReader(body)},
		blob.PutOptions{Size: -1, SHA256: Sum(nil)}); !errors.Is(err, blob.ErrChecksum) {
		t.Fatalf("large Put with a wrong checksum: %v, want ErrChecksum", err)
	}
	if _, err := s.Stat(context.Background(), "big/bad"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Stat after a refused large Put: %v, want ErrNotFound", err)
	}
}

func testConcurrentPuts(t *testing.T, s blob.Store) {
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	bodies := make([][]byte, n)
	for i := range n {
		bodies[i] = Bytes(uint64(100+i), 3000+i)
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			b := bodies[i]
			for _, key := range []string{fmt.Sprintf("c/own/%d", i), "c/shared"} {
				if _, err := s.Put(ctx, key, bytes.NewReader(b), blob.PutOptions{Size: int64(len(b)), SHA256: Sum(b)}); err != nil {
					errs <- fmt.Errorf("put %s: %w", key, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range n {
		if got, _ := Get(t, s, fmt.Sprintf("c/own/%d", i)); !bytes.Equal(got, bodies[i]) {
			t.Errorf("c/own/%d holds the wrong bytes", i)
		}
	}
	got, in := Get(t, s, "c/shared")
	if !slices.ContainsFunc(bodies, func(b []byte) bool { return bytes.Equal(b, got) }) {
		t.Errorf("c/shared holds %d bytes that no Put wrote whole", len(got))
	}
	if in.SHA256 != "" && in.SHA256 != Sum(got) {
		t.Errorf("c/shared: recorded sha256 %s does not match its bytes (%s)", in.SHA256, Sum(got))
	}
	if keys := Keys(t, s, "c/"); len(keys) != n+1 {
		t.Errorf("List(c/) = %d keys, want %d", len(keys), n+1)
	}
}

// cancelReader cancels its context after delivering half of its content,
// then keeps reading.
type cancelReader struct {
	r      io.Reader
	half   int
	n      int
	cancel context.CancelFunc
}

func (c *cancelReader) Read(p []byte) (int, error) {
	if c.n >= c.half {
		c.cancel()
	}
	if len(p) > 4096 {
		p = p[:4096]
	}
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func testCancel(t *testing.T, s blob.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Put(ctx, "x/canceled", strings.NewReader("x"), blob.PutOptions{Size: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a canceled context: %v, want context.Canceled", err)
	}
	if _, err := s.List(ctx, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("List with a canceled context: %v, want context.Canceled", err)
	}
	body := Bytes(3, 1<<20)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	_, err := s.Put(ctx, "x/midway", &cancelReader{r: bytes.NewReader(body), half: len(body) / 2, cancel: cancel},
		blob.PutOptions{Size: -1, SHA256: Sum(body)})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Put canceled midway: %v, want context.Canceled", err)
	}
	if got := Keys(t, s, ""); len(got) != 0 {
		t.Errorf("after canceled puts the store holds %q", got)
	}
}
