package process

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/leaseinit"
	"github.com/megaflow/megaflow/runtime/contract"
)

var (
	initOnce sync.Once
	initPath string
	initErr  error
)

// builtInit builds megaflow-init (static, as the worker ships it) once
// per test binary.
func builtInit(t *testing.T) string {
	t.Helper()
	initOnce.Do(func() {
		dir, err := os.MkdirTemp("", "process-init-")
		if err != nil {
			initErr = err
			return
		}
		initPath = filepath.Join(dir, "megaflow-init")
		build := exec.Command("go", "build", "-o", initPath, "github.com/megaflow/megaflow/cmd/megaflow-init")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			initErr = err
			t.Log(string(out))
		}
	})
	if initErr != nil {
		t.Fatalf("build megaflow-init: %v", initErr)
	}
	return initPath
}

// A task under megaflow-init that leaves nothing behind ends without a scan
// of /proc: the init, a child subreaper, says on its pipe that it has no
// child left (leaseinit.CleanFDEnv). One that leaves a process in a session
// of its own still loses it (the init kills and reaps it, then says so),
// and an init that says nothing (an older one, here a script that only
// runs the command) leaves the scan in place, which kills the process. The
// task itself sees neither the pipe's variable nor its descriptor.
func TestCleanInitSkipsTheScan(t *testing.T) {
	cleanInit := builtInit(t)
	dir := t.TempDir()
	lease := t.TempDir()
	if err := leaseinit.WriteExpiry(lease, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	// An init that knows nothing of the pipe: it runs the command after "--".
	mute := filepath.Join(dir, "mute-init")
	if err := os.WriteFile(mute, []byte("#!/bin/sh\nwhile [ \"$1\" != -- ]; do shift; done\nshift\n\"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := func(t *testing.T, initBin, script string) contract.Exit {
		t.Helper()
		id, err := r.Start(ctx, contract.Spec{Command: []string{"/bin/sh", "-c", script}, LogPath: filepath.Join(t.TempDir(), "log"),
			Init: &contract.Init{Path: initBin, LeaseDir: lease, Grace: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Remove(ctx, id) })
		return wait(t, r, id)
	}

	t.Run("nothing left", func(t *testing.T) {
		scans, clean := r.sweep.scanCount(), r.cleanEnds.Load()
		out := filepath.Join(t.TempDir(), "seen")
		// The task looks for the variable and for fd 3.
		exit := run(t, cleanInit, `{ env | grep -c `+leaseinit.CleanFDEnv+`; ls /proc/self/fd/3 2>/dev/null | wc -l; } > `+out)
		if exit.Code != 0 {
			t.Fatalf("exit %+v", exit)
		}
		if got := r.sweep.scanCount() - scans; got != 0 {
			t.Errorf("%d scans of /proc for a task whose init said it left nothing, want 0", got)
		}
		if got := r.cleanEnds.Load() - clean; got != 1 {
			t.Errorf("%d clean ends, want 1", got)
		}
		if b, err := os.ReadFile(out); err != nil || string(b) != "0\n0\n" {
			t.Errorf("the task saw the init's variable or descriptor (count of each): %q, %v", b, err)
		}
	})
	t.Run("a detached process killed by the init", func(t *testing.T) {
		sleep := uniqueSleep(10)
		scans := r.sweep.scanCount()
		run(t, cleanInit, "setsid sleep "+sleep+" & sleep 0.2")
		if n := count("sleep", sleep); n != 0 {
			t.Errorf("%d sleep %s left after the task's end", n, sleep)
		}
		if got := r.sweep.scanCount() - scans; got != 0 {
			t.Errorf("%d scans, want 0: the init killed and reaped the process, and said so", got)
		}
	})
	t.Run("an init that says nothing", func(t *testing.T) {
		sleep := uniqueSleep(11)
		scans, clean := r.sweep.scanCount(), r.cleanEnds.Load()
		run(t, mute, "setsid sleep "+sleep+" & sleep 0.2")
		if got := r.sweep.scanCount() - scans; got == 0 {
			t.Error("no scan after an init that did not say the task left nothing")
		}
		if got := r.cleanEnds.Load() - clean; got != 0 {
			t.Errorf("%d clean ends, want 0", got)
		}
		eventually(t, "no sleep "+sleep+" left", func() bool { return count("sleep", sleep) == 0 })
	})
}
