package artifact

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/blob"
	"github.com/megaflow/megaflow/internal/blob/spool"
)

// direct is a Spool that puts straight into the store (tests only).
// The durable spool daemons use is a Spool.
var _ Spool = (*spool.Spool)(nil)

type direct struct{ s blob.Store }

func (d direct) Enqueue(ctx context.Context, key string, r io.Reader, o blob.PutOptions) error {
	_, err := d.s.Put(ctx, key, r, o)
	return err
}
func (d direct) Wait(context.Context, string) error { return nil }

var att = Attempt{Tenant: "t", GraphID: "g", TaskName: "train", Number: 2}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPathProblem(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"out/x.json", ""},
		{".", ""},
		{"a/b", ""},
		{"", "is empty"},
		{"/etc/passwd", "is absolute"},
		{"../secret", `leaves the output directory through ".."`},
		{"a/../../b", `leaves the output directory`},
		{"a/./b", "is not clean"},
		{"a\\b", "backslash"},
	} {
		got := PathProblem(tc.path)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("PathProblem(%q) = %q, want containing %q", tc.path, got, tc.want)
		}
	}
}

// TestCollectRefusesEscapes: symlinks out of the output directory, ".."
// and absolute paths are refused with a note, and no byte from outside is
// stored.
func TestCollectRefusesEscapes(t *testing.T) {
	base := t.TempDir()
	out := filepath.Join(base, "out")
	secret := filepath.Join(base, "secret.txt")
	write(t, secret, "SECRET")
	write(t, filepath.Join(out, "ok.txt"), "fine")
	write(t, filepath.Join(out, "dir", "a.json"), `{"a":1}`)
	write(t, filepath.Join(out, "dir", "inner", "b.txt"), "b")
	must(t, os.Symlink(secret, filepath.Join(out, "abs-link")))
	must(t, os.Symlink("../secret.txt", filepath.Join(out, "rel-link")))
	must(t, os.Symlink("../../secret.txt", filepath.Join(out, "dir", "sneaky")))
	must(t, os.Symlink("../ok.txt", filepath.Join(out, "dir", "inside-link")))
	must(t, os.Symlink(base, filepath.Join(out, "dir-link")))

	store := NewMemStore()
	files, notes, err := Collect(context.Background(), direct{store}, att, out,
		[]string{"ok.txt", "dir", "abs-link", "rel-link", "dir-link", "../secret.txt", "/etc/passwd", "missing"})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	if got, want := strings.Join(paths, ","), "dir/a.json,dir/inner/b.txt,dir/inside-link,ok.txt"; got != want {
		t.Errorf("collected %s, want %s", got, want)
	}
	joined := strings.Join(notes, "\n")
	for _, want := range []string{`"abs-link" refused`, `"rel-link" refused`, `"dir/sneaky" refused`, `"dir-link" refused`,
		`"../secret.txt" leaves the output directory`, `"/etc/passwd" is absolute`, `"missing": no such file`} {
		if !strings.Contains(joined, want) {
			t.Errorf("notes lack %q:\n%s", want, joined)
		}
	}
	objs, _ := store.List(context.Background(), "")
	for _, o := range objs {
		rc, _, _ := store.Get(context.Background(), o.Key)
		b, _ := io.ReadAll(rc)
		if bytes.Contains(b, []byte("SECRET")) {
			t.Errorf("%s holds the secret from outside the output directory", o.Key)
		}
	}
	if len(objs) != 4 {
		t.Errorf("%d objects stored, want 4", len(objs))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestFinishAndFetch: a log shipped in chunks, outputs, a large result and
// the manifest round-trip through a spool that was down for a while, and
// a child's FetchInputs gets the files, byte for byte.
func TestFinishAndFetch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := t.TempDir()
	logPath := filepath.Join(base, "1.log")
	write(t, logPath, strings.Repeat("x", MaxChunkBytes+10))
	write(t, filepath.Join(base, "out", "m.json"), `{"reward":1}`)

	store := NewMemStore()
	store.SetDown(true)
	sp := NewMemSpool(store)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); sp.Run(runCtx) }()
	defer func() { stop(); <-done }()

	sh := NewLogShipper(att, logPath, sp)
	must(t, sh.Ship(ctx))
	f, err := os.OpenFile(logPath, os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	f.WriteString("tail\n")
	f.Close()
	big := []byte(`{"blob":"` + strings.Repeat("y", 100<<10) + `"}`)
	m, ref, err := Finish{Log: sh, OutDir: filepath.Join(base, "out"), Paths: []string{"m.json"}, Result: big}.Store(ctx, sp, att)
	must(t, err)
	if m.LogChunks != 3 || m.LogBytes != MaxChunkBytes+15 {
		t.Errorf("log: %d chunks, %d bytes; want 3, %d", m.LogChunks, m.LogBytes, MaxChunkBytes+15)
	}
	if !strings.Contains(string(ref), `"megaflow_artifact":"result.json"`) {
		t.Errorf("ref = %s", ref)
	}
	if !Pending(sp, att.ManifestKey()) || !Pending(sp, att.LogKey(1)) {
		t.Errorf("nothing pending while the store is down")
	}
	store.SetDown(false)
	must(t, sp.Wait(ctx, att.ManifestKey()))
	if Pending(sp, att.LogKey(1)) {
		t.Errorf("log chunk 1 still pending after the manifest, enqueued later, landed")
	}

	chunks, err := LogChunks(ctx, store, att)
	must(t, err)
	var log bytes.Buffer
	for _, n := range chunks {
		rc, _, err := store.Get(ctx, att.LogKey(n))
		must(t, err)
		io.Copy(&log, rc)
	}
	if log.Len() != MaxChunkBytes+15 || !strings.HasSuffix(log.String(), "xtail\n") {
		t.Errorf("log read back: %d bytes", log.Len())
	}

	in := filepath.Join(base, "in", "train")
	got, err := FetchInputs(ctx, store, att, in, 10*time.Millisecond)
	must(t, err)
	if len(got.Files) != 1 {
		t.Fatalf("manifest files %+v", got.Files)
	}
	b, err := os.ReadFile(filepath.Join(in, "m.json"))
	if err != nil || string(b) != `{"reward":1}` {
		t.Errorf("input m.json = %q, %v", b, err)
	}

	// A corrupted object is caught by the reader.
	_, err = store.Put(ctx, att.FileKey("m.json"), strings.NewReader(`{"reward":9}`), blob.PutOptions{})
	must(t, err)
	rc, err := OpenFile(ctx, store, att, got.Files[0])
	must(t, err)
	if _, err := io.ReadAll(rc); !errors.Is(err, blob.ErrChecksum) {
		t.Errorf("read of a corrupted file: %v, want ErrChecksum", err)
	}
}
