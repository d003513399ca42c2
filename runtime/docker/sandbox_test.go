package docker

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/megaflow/megaflow/runtime/contract"
)

// ExecStream keeps stdout and stderr apart, feeds stdin, leaves a
// background child running (no reap, unlike Exec); the file copies round
// trip bytes and mode, create parents and classify a missing file, a
// directory, a file over the limit and a missing container.
func TestExecStreamAndFiles(t *testing.T) {
	t.Parallel() // it waits for the engine, beside the other waiting tests
	e := newEnv(t)
	ctx := context.Background()
	id := e.start(e.spec("box", "sleep", "600"))

	var out, errb bytes.Buffer
	exit, err := e.rt.ExecStream(ctx, id, contract.ExecRequest{
		Command: []string{"sh", "-c", "cat; echo err >&2; sleep 300 & echo $! > /tmp/bg; exit 4"},
		Stdin:   []byte("in\n"), Stdout: &out, Stderr: &errb,
	})
	if err != nil || exit.Code != 4 || out.String() != "in\n" || errb.String() != "err\n" {
		t.Fatalf("ExecStream: %+v, %v, stdout %q, stderr %q; want 4, \"in\\n\", \"err\\n\"", exit, err, out.String(), errb.String())
	}
	out.Reset()
	if _, err := e.rt.ExecStream(ctx, id, contract.ExecRequest{Command: []string{"sh", "-c", "kill -0 $(cat /tmp/bg) && echo alive"}, Stdout: &out}); err != nil || out.String() != "alive\n" {
		t.Fatalf("the background child after its exec ended: %q, %v; want alive (a sandbox keeps it)", out.String(), err)
	}

	data := []byte("hello\x00\xff")
	if err := e.rt.WriteFile(ctx, id, "/a/b/c.txt", data, 0o700); err != nil {
		t.Fatal(err)
	}
	got, mode, err := e.rt.ReadFile(ctx, id, "/a/b/c.txt", 1<<20)
	if err != nil || !bytes.Equal(got, data) || mode != 0o700 {
		t.Fatalf("ReadFile: %q mode %o, %v; want %q mode 700", got, mode, err, data)
	}
	if _, _, err := e.rt.ReadFile(ctx, id, "/a/b/c.txt", 3); !errors.Is(err, contract.ErrFileTooLarge) {
		t.Fatalf("reading over the limit: %v; want ErrFileTooLarge", err)
	}
	if _, _, err := e.rt.ReadFile(ctx, id, "/a/b", 1<<20); !errors.Is(err, contract.ErrFileTooLarge) {
		t.Fatalf("reading a directory: %v; want ErrFileTooLarge (not a regular file)", err)
	}
	if _, _, err := e.rt.ReadFile(ctx, id, "/no/such", 1<<20); !errors.Is(err, contract.ErrNoSuchFile) {
		t.Fatalf("reading a missing file: %v; want ErrNoSuchFile", err)
	}
	if _, _, err := e.rt.ReadFile(ctx, "no-such-container-mf", "/etc/passwd", 1<<20); !errors.Is(err, contract.ErrNotFound) {
		t.Fatalf("reading from a missing container: %v; want ErrNotFound", err)
	}
	if err := e.rt.WriteFile(ctx, id, "relative", data, 0); err == nil {
		t.Fatal("a relative path was accepted")
	}
}
