package docker

import (
	"archive/tar"
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

// A container running as a user that is not root (an admission policy's
// 65534:65534) gets its working directory as its own before it starts and
// can write there; a file WriteFile gives it, and the entries of an
// archive PutArchive extracts, are the user's (it can append to them); MakeDir gives a directory to the user in a running container,
// whose own exec could not create it under the root's /. Without a user a
// written file stays root's.
func TestNonRootWorkingDirAndFiles(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sp := e.spec("nobody", "sleep", "600")
	sp.User, sp.WorkingDir = "65534:65534", "/work/dir"
	id := e.start(sp)
	run := func(script string) string {
		t.Helper()
		var out, errb bytes.Buffer
		exit, err := e.rt.ExecStream(ctx, id, contract.ExecRequest{Command: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb})
		if err != nil || exit.Code != 0 {
			t.Fatalf("exec %q: %+v, %v, stdout %q, stderr %q", script, exit, err, out.String(), errb.String())
		}
		return out.String()
	}
	if got := run(`id -u; pwd; echo x > here && cat here`); got != "65534\n/work/dir\nx\n" {
		t.Fatalf("in the working directory: %q; want uid 65534 writing in /work/dir", got)
	}
	if err := e.rt.WriteFile(ctx, id, "/work/dir/given", []byte("given\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := run(`echo more >> given && cat given && stat -c %u:%g given`); got != "given\nmore\n65534:65534\n" {
		t.Fatalf("a file WriteFile gave: %q; want it the user's, appendable", got)
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "work/dir/up/", Mode: 0o755, Uid: 1234, Gid: 1234})
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "work/dir/up/a", Mode: 0o644, Size: 2, Uid: 1234, Gid: 1234, Uname: "someone"})
	_, _ = tw.Write([]byte("a\n"))
	_ = tw.Close()
	if err := e.rt.PutArchive(ctx, id, &tb); err != nil {
		t.Fatal(err)
	}
	if got := run(`echo b >> up/a && cat up/a && stat -c %u:%g up up/a`); got != "a\nb\n65534:65534\n65534:65534\n" {
		t.Fatalf("an uploaded archive: %q; want its entries the user's", got)
	}
	if err := e.rt.MakeDir(ctx, id, "/made", "65534"); err != nil {
		t.Fatal(err)
	}
	if got := run(`touch /made/y && stat -c %u /made`); got != "65534\n" {
		t.Fatalf("MakeDir: %q; want a directory of uid 65534", got)
	}
	if err := e.rt.MakeDir(ctx, id, "/x", "nobody"); err == nil {
		t.Fatal("MakeDir with a user name: no error")
	}

	root := e.start(e.spec("root", "sleep", "600"))
	if err := e.rt.WriteFile(ctx, root, "/f", []byte("r"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := e.rt.ExecStream(ctx, root, contract.ExecRequest{Command: []string{"stat", "-c", "%u", "/f"}, Stdout: &out}); err != nil || out.String() != "0\n" {
		t.Fatalf("a file written into a root container: owner %q, %v; want 0", out.String(), err)
	}
}
