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

// A task under megaflow-init (the spawner) that leaves nothing behind ends
// without a scan of /proc: the spawner, a child subreaper, says it had no
// child but other tasks' once the task's process was reaped. One that
// leaves a process in a session of its own still loses it (the runtime's
// scan finds it by its marker), and an init that cannot be a spawner (an
// older one, here a script that only runs the command after "--") is run
// once per task and, saying nothing on its pipe, leaves the scan in place,
// which kills the process. The task itself sees neither the per-task
// init's pipe variable nor any descriptor but its three.
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
	t.Cleanup(func() { r.Close() })
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
		// The task looks for the variable and for descriptors above 2
		// (ls's own, of the directory it lists, is 3; exec leaves the
		// shell's saved descriptors behind).
		exit := run(t, cleanInit, `env | grep -c `+leaseinit.CleanFDEnv+` > `+out+`; exec ls /proc/self/fd >> `+out)
		if exit.Code != 0 {
			t.Fatalf("exit %+v", exit)
		}
		if got := r.sweep.scanCount() - scans; got != 0 {
			t.Errorf("%d scans of /proc for a task whose init said it left nothing, want 0", got)
		}
		if got := r.cleanEnds.Load() - clean; got != 1 {
			t.Errorf("%d clean ends, want 1", got)
		}
		if b, err := os.ReadFile(out); err != nil || string(b) != "0\n0\n1\n2\n3\n" {
			t.Errorf("the task saw the init's variable or descriptor (count of each): %q, %v", b, err)
		}
	})
	t.Run("a detached process", func(t *testing.T) {
		sleep := uniqueSleep(10)
		scans, clean := r.sweep.scanCount(), r.cleanEnds.Load()
		run(t, cleanInit, "setsid sleep "+sleep+" & sleep 0.2")
		if got := r.sweep.scanCount() - scans; got == 0 {
			t.Error("no scan after a task that left a process behind")
		}
		if got := r.cleanEnds.Load() - clean; got != 0 {
			t.Errorf("%d clean ends, want 0", got)
		}
		eventually(t, "no sleep "+sleep+" left", func() bool { return count("sleep", sleep) == 0 })
		if got := r.spawnerStarts.Load(); got != 1 {
			t.Errorf("%d spawners started, want 1", got)
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
