package process

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/megaflow/megaflow/runtime/contract"
)

// A process that prints nothing leaves no log file, nor the directory its
// path names (the worker no longer creates it: contract.Spec.LogPath);
// one that prints gets all of its output, created with its missing
// directories, by the time Wait returns: several pipe-fulls, stdout and
// stderr, and a background child's output written before the leader's
// exit.
func TestLogFileOnFirstOutputOnly(t *testing.T) {
	r := newRuntime(t)
	root := t.TempDir()
	silent := filepath.Join(root, "logs", "g+silent", "1.log")
	id, err := r.Start(context.Background(), contract.Spec{Command: []string{"true"}, LogPath: silent})
	if err != nil {
		t.Fatal(err)
	}
	if e := wait(t, r, id); e.Code != 0 {
		t.Fatalf("exit %+v", e)
	}
	if _, err := os.Stat(filepath.Dir(silent)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a silent process's log directory: %v; want none", err)
	}

	loud := filepath.Join(root, "logs", "g+loud", "1.log")
	const n = 300_000 // lines of "line\n": 1.5 MB, many pipe buffers
	script := "(echo child) & wait; yes line | head -n " + strconv.Itoa(n) + "; echo err >&2; echo end"
	id, err = r.Start(context.Background(), contract.Spec{Command: []string{"sh", "-c", script}, LogPath: loud})
	if err != nil {
		t.Fatal(err)
	}
	if e := wait(t, r, id); e.Code != 0 {
		t.Fatalf("exit %+v", e)
	}
	want := "child\n" + strings.Repeat("line\n", n) + "err\nend\n"
	if got := read(t, loud); got != want {
		t.Fatalf("log: %d bytes, want %d; ends %q", len(got), len(want), got[max(0, len(got)-20):])
	}
}

// A process that escaped both its group and its marker (env -i, then
// setsid) and holds the output pipe does not hold up Wait: the copy is
// cut drainGrace after the leader's end, and the log keeps what came
// before.
func TestEscapedWriterDoesNotHoldWait(t *testing.T) {
	r := newRuntime(t)
	dir := t.TempDir()
	log, gate := filepath.Join(dir, "1.log"), filepath.Join(dir, "gate")
	sleep := uniqueSleep(7)
	t.Cleanup(func() { killArgv("/bin/sleep", sleep) })
	// The leader ends once the escaped sleep runs (the test opens the gate
	// then), so that ending it does not kill the sleep still in its group.
	script := "echo before; env -i /usr/bin/setsid /bin/sleep " + sleep + " & while [ ! -f " + gate + " ]; do sleep 0.01; done"
	id, err := r.Start(context.Background(), contract.Spec{Command: []string{"sh", "-c", script}, LogPath: log})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the escaped sleep runs", func() bool { return count("/bin/sleep", sleep) == 1 })
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if e := wait(t, r, id); e.Code != 0 {
		t.Fatalf("exit %+v", e)
	}
	if got := read(t, log); got != "before\n" {
		t.Fatalf("log %q", got)
	}
	if count("/bin/sleep", sleep) != 1 {
		t.Fatal("the escaped sleep did not outlive its task: this test tests nothing")
	}
}

// killArgv SIGKILLs every process whose argv is exactly argv.
func killArgv(argv ...string) {
	want := strings.Join(argv, "\x00") + "\x00"
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		if b, err := os.ReadFile(d); err == nil && string(b) == want {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(d))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}
