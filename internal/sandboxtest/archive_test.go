package sandboxtest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/worker"
)

// A directory tree goes into a sandbox and back out as tar streams
// through the heads (files with their modes, a subdirectory, a symbolic
// link); a tar with an entry that leaves the directory is refused and
// that entry is not written; a missing path is NotFound.
func TestSandboxArchives(t *testing.T) {
	t.Parallel() // it waits for the engine (see internal/testcluster)
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.create(ctx, client.SandboxSpec{})

	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "sub", "deep"), 0o755))
	must(os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755))
	big := bytes.Repeat([]byte("0123456789abcdef"), 200_000) // 3.2 MB: several 1 MiB chunks each way
	must(os.WriteFile(filepath.Join(src, "sub", "deep", "big.bin"), big, 0o600))
	must(os.Symlink("sub/deep/big.bin", filepath.Join(src, "link")))
	n, err := s.UploadDir(ctx, src, "/work/tree")
	if err != nil || n < int64(len(big)) {
		t.Fatalf("UploadDir: %d bytes, %v", n, err)
	}
	res, err := s.Exec(ctx, sh(`cd /work/tree && ./run.sh && stat -c '%a %s' run.sh sub/deep/big.bin && readlink link && cat link | wc -c`), client.ExecOptions{})
	if err != nil {
		t.Fatalf("exec in the uploaded tree: %v", err)
	}
	if want := "ran\n755 19\n600 3200000\nsub/deep/big.bin\n3200000\n"; err != nil || string(res.Stdout) != want {
		t.Fatalf("the uploaded tree in the sandbox: %q (stderr %q), %v; want %q", res.Stdout, res.Stderr, err, want)
	}

	dst := filepath.Join(t.TempDir(), "back")
	if _, err := s.DownloadDir(ctx, "/work/tree", dst); err != nil {
		t.Fatalf("DownloadDir: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(dst, "sub", "deep", "big.bin")); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("downloaded big.bin: %d bytes, %v; want the 3.2 MB uploaded", len(got), err)
	}
	if l, err := os.Readlink(filepath.Join(dst, "link")); err != nil || l != "sub/deep/big.bin" {
		t.Fatalf("downloaded link: %q, %v", l, err)
	}
	if st, err := os.Stat(filepath.Join(dst, "run.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("downloaded run.sh: %v, %v; want mode 0755", st, err)
	}
	// One file: written under its name.
	one := t.TempDir()
	if _, err := s.DownloadDir(ctx, "/work/tree/run.sh", one); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(one, "run.sh")); err != nil || !strings.Contains(string(got), "echo ran") {
		t.Fatalf("a downloaded file: %q, %v", got, err)
	}

	// A hostile tar: refused, and nothing of it written.
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	must(tw.WriteHeader(&tar.Header{Name: "ok.txt", Typeflag: tar.TypeReg, Mode: 0o644}))
	must(tw.WriteHeader(&tar.Header{Name: "../../etc/evil", Typeflag: tar.TypeReg, Mode: 0o644}))
	must(tw.Close())
	if _, err := s.UploadArchive(ctx, "/work/hostile", &b); !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), "leaves the directory") {
		t.Fatalf("a tar leaving its directory: %v; want InvalidArgument", err)
	}
	res, err = s.Exec(ctx, sh(`ls /etc/evil /work/hostile 2>&1; true`), client.ExecOptions{})
	if err != nil {
		t.Fatalf("exec after a refused tar: %v", err)
	}
	// Extraction streams: entries before the refused one may be written
	// (as tar -x does), the refused one never is.
	if err != nil || !strings.Contains(string(res.Stdout), "ls: /etc/evil: No such file") {
		t.Fatalf("after a refused tar: %q, %v; want no /etc/evil", res.Stdout, err)
	}
	if _, err := s.DownloadDir(ctx, "/no/such/dir", t.TempDir()); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("downloading a missing path: %v; want NotFound", err)
	}
	if _, err := s.UploadArchive(ctx, "relative", &b); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("a relative directory: %v; want InvalidArgument", err)
	}
}

// A client that stops sending in the middle of an upload is answered
// DeadlineExceeded once the worker's UploadIdle passes without a chunk
// (through the head's relay, before the client's last chunk), and the
// sandbox is free again: the engine's archive request ended, so a second
// upload and an exec work. Before the bound the upload, and the engine's
// request with it, stayed open until the client went away.
func TestSandboxUploadIdleClient(t *testing.T) {
	t.Parallel() // it waits for the engine (see internal/testcluster)
	e := newEnvOpts(t, 1, nil, func(c *worker.Config) { c.UploadIdle = 2 * time.Second }, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := e.create(ctx, client.SandboxSpec{})

	// Half of a tar: the header of a 1 MiB file and 4 KiB of it, then nothing.
	var half bytes.Buffer
	tw := tar.NewWriter(&half)
	if err := tw.WriteHeader(&tar.Header{Name: "stalled.bin", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	up, err := wire.NewSandboxServiceClient(dialConn(t, e.c)).UploadArchive(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Send(&wire.SandboxUploadArchiveRequest{SandboxId: s.ID(), Path: "/work/stalled", Data: half.Bytes()}); err != nil {
		t.Fatal(err)
	}
	// No CloseSend: the client is quiet, not done.
	err = up.RecvMsg(new(wire.SandboxUploadArchiveResponse))
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "sent nothing for 2s") {
		t.Fatalf("a quiet upload: %v; want DeadlineExceeded naming the 2s bound (the stream's own deadline is 1 min)", err)
	}

	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "after.txt"), []byte("after\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UploadDir(ctx, src, "/work/after"); err != nil {
		t.Fatalf("an upload after the quiet one: %v", err)
	}
	res, err := s.Exec(ctx, sh(`cat /work/after/after.txt`), client.ExecOptions{})
	if err != nil || string(res.Stdout) != "after\n" {
		t.Fatalf("exec after the quiet upload: %q, %v", res.Stdout, err)
	}
}
