package spool_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/megaflow/megaflow/internal/blob"
	"github.com/megaflow/megaflow/internal/blob/blobtest"
	"github.com/megaflow/megaflow/internal/blob/fileblob"
	"github.com/megaflow/megaflow/internal/blob/spool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder records the keys of Puts that reached the store, in order.
type recorder struct {
	blob.Store
	mu   sync.Mutex
	keys []string
}

func (r *recorder) Put(ctx context.Context, key string, rd io.Reader, o blob.PutOptions) (blob.Info, error) {
	in, err := r.Store.Put(ctx, key, rd, o)
	if err == nil {
		r.mu.Lock()
		r.keys = append(r.keys, key)
		r.mu.Unlock()
	}
	return in, err
}

func (r *recorder) landed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.keys)
}

type env struct {
	dir   string
	file  *fileblob.Store
	flaky *blobtest.Flaky
	rec   *recorder
}

func newEnv(t *testing.T) *env {
	t.Helper()
	fs, err := fileblob.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	e := &env{dir: t.TempDir(), file: fs}
	e.rec = &recorder{Store: fs}
	e.flaky = blobtest.NewFlaky(e.rec)
	return e
}

func (e *env) config(maxBytes int64) spool.Config {
	c := spool.DefaultConfig(e.dir)
	c.MaxBytes = maxBytes
	c.MinBackoff, c.MaxBackoff = time.Millisecond, 20*time.Millisecond
	return c
}

func (e *env) open(t *testing.T, maxBytes int64) *spool.Spool {
	t.Helper()
	sp, err := spool.New(e.config(maxBytes), e.flaky)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	return sp
}

func enqueue(t *testing.T, sp *spool.Spool, key string, b []byte) {
	t.Helper()
	if err := sp.Enqueue(context.Background(), key, bytes.NewReader(b),
		blob.PutOptions{Size: int64(len(b)), SHA256: blobtest.Sum(b), ContentType: "text/plain"}); err != nil {
		t.Fatalf("enqueue %q: %v", key, err)
	}
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval, not synchronization
	}
}

func drain(t *testing.T, sp *spool.Spool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sp.Drain(ctx); err != nil {
		n, b := sp.Pending()
		t.Fatalf("drain: %v (%d entries, %d bytes pending)", err, n, b)
	}
}

func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.Name() != "failed" {
			names = append(names, e.Name())
		}
	}
	return names
}

func TestUploadsLandAndWaitReturns(t *testing.T) {
	e := newEnv(t)
	sp := e.open(t, 1<<20)
	bodies := map[string][]byte{"t/g/a/1/stdout": []byte("out\n"), "t/g/a/1/stderr": nil, "t/g/a/1/result.json": []byte(`{"ok":true}`)}
	for k, b := range bodies {
		enqueue(t, sp, k, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for k, b := range bodies {
		if err := sp.Wait(ctx, k); err != nil {
			t.Fatalf("wait %q: %v", k, err)
		}
		got, in := blobtest.Get(t, e.file, k)
		if !bytes.Equal(got, b) || in.ContentType != "text/plain" {
			t.Errorf("%q landed as %q %+v, want %q", k, got, in, b)
		}
	}
	if n, b := sp.Pending(); n != 0 || b != 0 {
		t.Errorf("Pending = %d, %d after all landed", n, b)
	}
	if f := spoolFiles(t, e.dir); len(f) != 0 {
		t.Errorf("spool directory holds %q after all landed", f)
	}
}

func TestOutageOldestFirstNothingLost(t *testing.T) {
	e := newEnv(t)
	e.flaky.SetDown(true)
	sp := e.open(t, 1<<20)
	var keys []string
	for i := range 6 {
		k := fmt.Sprintf("t/g/x/1/chunk-%d", i)
		keys = append(keys, k)
		enqueue(t, sp, k, []byte(k))
	}
	enqueue(t, sp, "t/g/x/1/chunk-0", []byte("newer")) // same key again: the later wins
	waitFor(t, "three refused uploads", func() bool { return e.flaky.Refused() >= 3 })
	if n, b := sp.Pending(); n != 7 || b == 0 {
		t.Fatalf("Pending during the outage = %d, %d; want 7 entries", n, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	if err := sp.Wait(ctx, keys[1]); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait during the outage: %v, want a deadline", err)
	}
	cancel()
	e.flaky.SetDown(false)
	drain(t, sp)
	if got, want := e.rec.landed(), append(slices.Clone(keys), "t/g/x/1/chunk-0"); !slices.Equal(got, want) {
		t.Fatalf("upload order %q, want %q", got, want)
	}
	if got, _ := blobtest.Get(t, e.file, "t/g/x/1/chunk-0"); string(got) != "newer" {
		t.Fatalf("chunk-0 holds %q, want the later enqueue", got)
	}
}

func TestRestartResumes(t *testing.T) {
	e := newEnv(t)
	e.flaky.SetDown(true)
	sp, err := spool.New(e.config(1<<20), e.flaky)
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, sp, "a/1", []byte("one"))
	enqueue(t, sp, "a/2", []byte("two"))
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sp.Enqueue(context.Background(), "a/3", strings.NewReader("x"), blob.PutOptions{Size: 1}); !errors.Is(err, spool.ErrClosed) {
		t.Fatalf("Enqueue after Close: %v, want ErrClosed", err)
	}
	// Debris of a crash mid-Enqueue: a temp file and content without its
	// commit marker. Neither is an entry.
	for _, name := range []string{"tmp-123", "00000000000000000099.data"} {
		if err := os.WriteFile(filepath.Join(e.dir, name), []byte("debris"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e.flaky.SetDown(false)
	sp2 := e.open(t, 1<<20)
	if n, _ := sp2.Pending(); n != 2 {
		t.Fatalf("after restart Pending = %d, want 2", n)
	}
	drain(t, sp2)
	if got := blobtest.Keys(t, e.file, ""); !slices.Equal(got, []string{"a/1", "a/2"}) {
		t.Fatalf("store holds %q after restart, want [a/1 a/2]", got)
	}
	if f := spoolFiles(t, e.dir); len(f) != 0 {
		t.Fatalf("spool directory holds %q", f)
	}
	// Sequence numbers continue after the debris's.
	enqueue(t, sp2, "a/4", []byte("four"))
	drain(t, sp2)
	if got := e.rec.landed(); !slices.Equal(got, []string{"a/1", "a/2", "a/4"}) {
		t.Fatalf("landed %q", got)
	}
}

func TestFullRefusesAndKeepsNothing(t *testing.T) {
	e := newEnv(t)
	e.flaky.SetDown(true)
	sp := e.open(t, 100)
	enqueue(t, sp, "k/1", bytes.Repeat([]byte("a"), 60))
	ctx := context.Background()
	cases := []struct {
		name string
		size int64
		want string
	}{
		{"known size", 60, "do not fit, 60 of 100 bytes are pending"},
		{"unknown size", -1, "do not fit"},
		{"larger than the spool", 101, "exceed the whole spool"},
	}
	for _, tc := range cases {
		n := 60
		if tc.size > 0 {
			n = int(tc.size)
		}
		err := sp.Enqueue(ctx, "k/2", bytes.NewReader(bytes.Repeat([]byte("b"), n)), blob.PutOptions{Size: tc.size})
		if !errors.Is(err, spool.ErrFull) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Enqueue: %v, want ErrFull saying %q", tc.name, err, tc.want)
		}
	}
	if n, b := sp.Pending(); n != 1 || b != 60 {
		t.Fatalf("Pending = %d, %d after refused enqueues, want 1, 60", n, b)
	}
	if f := spoolFiles(t, e.dir); len(f) != 2 {
		t.Fatalf("spool directory holds %q, want one entry's two files", f)
	}
	e.flaky.SetDown(false)
	drain(t, sp)
	enqueue(t, sp, "k/2", bytes.Repeat([]byte("b"), 60))
	drain(t, sp)
}

func TestChecksumRefusedAtEnqueue(t *testing.T) {
	e := newEnv(t)
	sp := e.open(t, 1<<20)
	err := sp.Enqueue(context.Background(), "k/1", strings.NewReader("abc"), blob.PutOptions{Size: -1, SHA256: blobtest.Sum([]byte("abd"))})
	if !errors.Is(err, blob.ErrChecksum) {
		t.Fatalf("Enqueue with a wrong checksum: %v, want ErrChecksum", err)
	}
	for _, key := range []string{"../k", "/k", ""} {
		if err := sp.Enqueue(context.Background(), key, strings.NewReader("a"), blob.PutOptions{Size: 1}); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("Enqueue(%q): %v, want ErrInvalidKey", key, err)
		}
	}
	if n, _ := sp.Pending(); n != 0 {
		t.Fatalf("Pending = %d after refused enqueues", n)
	}
	if f := spoolFiles(t, e.dir); len(f) != 0 {
		t.Fatalf("spool directory holds %q", f)
	}
}

func TestLocalCorruptionFailsForGood(t *testing.T) {
	e := newEnv(t)
	e.flaky.SetDown(true)
	sp := e.open(t, 1<<20)
	enqueue(t, sp, "k/bad", []byte("good bytes"))
	enqueue(t, sp, "k/good", []byte("fine"))
	data, _ := filepath.Glob(filepath.Join(e.dir, "*.data"))
	slices.Sort(data)
	if err := os.WriteFile(data[0], []byte("evil bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.flaky.SetDown(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sp.Wait(ctx, "k/bad"); !errors.Is(err, spool.ErrFailed) {
		t.Fatalf("Wait for a corrupted entry: %v, want ErrFailed", err)
	}
	if err := sp.Wait(ctx, "k/good"); err != nil {
		t.Fatalf("the entry behind a failed one: %v", err)
	}
	if _, err := e.file.Stat(ctx, "k/bad"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("corrupted content reached the store: %v", err)
	}
	sp.Close()
	sp2 := e.open(t, 1<<20)
	if why := sp2.Failed()["k/bad"]; !strings.Contains(why, "checksum") {
		t.Fatalf("after restart Failed()[k/bad] = %q", why)
	}
	if err := sp2.Wait(ctx, "k/bad"); !errors.Is(err, spool.ErrFailed) {
		t.Fatalf("Wait after restart: %v, want ErrFailed", err)
	}
}

func TestConfigValidate(t *testing.T) {
	good := spool.DefaultConfig("/tmp/spool")
	cases := []struct {
		name string
		mod  func(*spool.Config)
		want string
	}{
		{"relative dir", func(c *spool.Config) { c.Dir = "spool" }, "absolute"},
		{"no bytes", func(c *spool.Config) { c.MaxBytes = 0 }, "MaxBytes"},
		{"backoff inverted", func(c *spool.Config) { c.MaxBackoff = time.Millisecond }, "MinBackoff"},
		{"no timeout", func(c *spool.Config) { c.PutTimeout = 0 }, "PutTimeout"},
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for _, tc := range cases {
		c := good
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}

// TestBackoffDoublesToMax drives the spool's clock: every wait it asks for
// while the store is down is recorded and fires at once.
func TestBackoffDoublesToMax(t *testing.T) {
	e := newEnv(t)
	e.flaky.SetDown(true)
	var mu sync.Mutex
	var waits []time.Duration
	cfg := e.config(1 << 20)
	cfg.MinBackoff, cfg.MaxBackoff = 100*time.Millisecond, 800*time.Millisecond
	cfg.After = func(d time.Duration) <-chan time.Time {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
		ch := make(chan time.Time, 1)
		ch <- time.Time{}
		return ch
	}
	sp, err := spool.New(cfg, e.flaky)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	enqueue(t, sp, "k/1", []byte("x"))
	waitFor(t, "eight backoff waits", func() bool { mu.Lock(); defer mu.Unlock(); return len(waits) >= 8 })
	e.flaky.SetDown(false)
	drain(t, sp)
	mu.Lock()
	defer mu.Unlock()
	bounds := []time.Duration{100, 200, 400, 800, 800, 800, 800, 800}
	for i, b := range bounds {
		b *= time.Millisecond
		if waits[i] < b/2 || waits[i] > b {
			t.Errorf("wait %d = %v, want within [%v, %v] (exponential with jitter, capped): %v", i, waits[i], b/2, b, waits[:8])
		}
	}
}

// Recovered names the keys a reopened spool found on disk, also after they
// uploaded, so that a restarted owner can wait for each.
func TestRecoveredKeys(t *testing.T) {
	e := newEnv(t)
	e.flaky.SetDown(true)
	sp, err := spool.New(e.config(1<<20), e.flaky)
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, sp, "t/g/a/1/manifest.json", []byte("{}"))
	enqueue(t, sp, "t/g/a/1/log/000001", []byte("hello"))
	if got := sp.Recovered(); len(got) != 0 {
		t.Fatalf("a new spool recovered %v", got)
	}
	sp.Close()
	e.flaky.SetDown(false)
	sp2 := e.open(t, 1<<20)
	drain(t, sp2)
	if got := strings.Join(sp2.Recovered(), " "); got != "t/g/a/1/log/000001 t/g/a/1/manifest.json" {
		t.Fatalf("recovered %q", got)
	}
	if err := sp2.Wait(context.Background(), "t/g/a/1/manifest.json"); err != nil {
		t.Fatal(err)
	}
}
