package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/testcluster"
)

// Issue 18, finding 1, as a user meets it: `megaflow up` on a data
// directory, a graph submitted and run, `megaflow delete` of it, the
// cluster stopped and started again on the same directory: the head must
// come back (it crash-looped with "panic: state: not found" replaying the
// delete) and `megaflow graphs` must answer, without the deleted graph and
// with the one kept.
func TestUpRestartAfterDelete(t *testing.T) {
	t.Parallel() // it waits for a local cluster (see internal/testcluster)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	// Fixed addresses, as `megaflow up` has by default: the restarted head
	// is the same Raft server at the same address.
	opts := localOptions{DataDir: filepath.Join(dir, "data"), Runtime: "process", GRPCAddr: testcluster.FreeAddr(t),
		RaftAddr: testcluster.FreeAddr(t), GossipAddr: testcluster.FreeAddr(t), WorkerGossipAddr: testcluster.FreeAddr(t), LogLevel: "debug"}
	start := func() *localCluster {
		t.Helper()
		lc, err := startLocal(ctx, opts)
		if err != nil {
			t.Fatalf("megaflow up on %s: %v", opts.DataDir, err)
		}
		return lc
	}
	stop := func(lc *localCluster) {
		t.Helper()
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		if err := lc.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	}
	lc := start()
	heads := "--heads=" + lc.head.GRPCAddr()
	for _, id := range []string{"gone", "kept"} {
		file := filepath.Join(dir, id+".yaml")
		body := "id: " + id + "\ntasks:\n  - {name: a, image: x, command: [sh, -c, \"echo MEGAFLOW_RESULT '{\\\"reward\\\": 1}'\"]}\n" +
			"  - {name: b, image: x, command: [\"true\"], depends_on: [a]}\n"
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if code, out, errOut := cli(t, heads, "submit", file, "--watch"); code != exitOK {
			stop(lc)
			t.Fatalf("submit %s --watch: exit %d\n%s\n%s", id, code, out, errOut)
		}
	}
	if code, out, errOut := cli(t, heads, "delete", "gone"); code != exitOK || !strings.Contains(out, "deleted graph gone: 2 tasks") {
		stop(lc)
		t.Fatalf("delete gone: exit %d %q %q", code, out, errOut)
	}
	stop(lc)

	lc = start()
	defer stop(lc)
	code, out, errOut := cli(t, "--heads="+lc.head.GRPCAddr(), "graphs")
	if code != exitOK || !strings.Contains(out, "kept") || strings.Contains(out, "gone") {
		t.Fatalf("megaflow graphs after the restart: exit %d\n%s\n%s", code, out, errOut)
	}
}

// Issue 18, finding 10: a second `megaflow up` on a data directory in use
// fails at once saying so, with the pid of the process that holds it and
// what to do (it failed after 5 s with "open .../raft.db: timeout"), and
// the first one keeps running.
func TestUpOnADataDirInUse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := localOptions{DataDir: filepath.Join(t.TempDir(), "data"), Runtime: "process", GRPCAddr: "127.0.0.1:0",
		RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0", WorkerGossipAddr: "127.0.0.1:0", LogLevel: "debug"}
	lc, err := startLocal(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		if err := lc.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	begin := time.Now()
	second, err := startLocal(ctx, opts)
	took := time.Since(begin)
	if err == nil {
		_ = second.Stop(ctx)
		t.Fatal("a second megaflow up on the same data directory started")
	}
	if want := fmt.Sprintf("is in use by another process (pid %d)", os.Getpid()); !strings.Contains(err.Error(), want) ||
		!strings.Contains(err.Error(), opts.DataDir) || took > 2*time.Second {
		t.Fatalf("second megaflow up after %v: %v\nwant at once an error naming %s and containing %q", took, err, opts.DataDir, want)
	}
	if code, out, errOut := cli(t, "--heads="+lc.head.GRPCAddr(), "graphs"); code != exitOK {
		t.Fatalf("the first cluster after the second was refused: exit %d %q %q", code, out, errOut)
	}
}
