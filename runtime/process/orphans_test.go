package process

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/leaseinit"
	"github.com/megaflow/megaflow/runtime/contract"
)

// A Runtime opened on the state directory of one that "crashed" (never
// stopped) kills the process groups it left, background children included,
// and leaves alone a process that took a recorded pid later.
func TestNewKillsTheOrphansOfACrashedRun(t *testing.T) {
	dir := t.TempDir()
	old, err := New(Config{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("%d", 500000+os.Getpid()%100000) // a sleep time no other process uses
	id, err := old.Start(context.Background(), contract.Spec{Name: "rank-1",
		Command: []string{"sh", "-c", "sleep " + marker + " & exec sleep " + marker}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "both sleeps running", func() bool { return count("sleep", marker) == 2 })

	// A process whose pid a stale record names, with another start time:
	// not ours, never killed.
	stranger := exec.Command("sleep", "300")
	stranger.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stranger.Process.Kill(); stranger.Wait() }()
	st, err := leaseinit.StartTime(stranger.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stale"+recordExt), []byte(fmt.Sprintf("%d %d\n", stranger.Process.Pid, st+1)), 0o600); err != nil {
		t.Fatal(err)
	}

	if _, err := New(Config{StateDir: dir}); err != nil { // the worker starts again
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	exit, err := old.Wait(ctx, id)
	if err != nil || exit.Code != 128+int(syscall.SIGKILL) {
		t.Fatalf("the orphan's leader: %+v %v; want killed", exit, err)
	}
	eventually(t, "the orphan's background child killed too", func() bool { return count("sleep", marker) == 0 })
	if err := stranger.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the process that took a recorded pid was killed: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Fatalf("records left: %v", left)
	}
}

// A process that ends normally leaves no record.
func TestRecordsAreRemovedWhenProcessesEnd(t *testing.T) {
	dir := t.TempDir()
	r, err := New(Config{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	id, err := r.Start(context.Background(), contract.Spec{Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if exit := wait(t, r, id); exit.Code != 0 {
		t.Fatalf("exit %+v", exit)
	}
	eventually(t, "no record left", func() bool {
		left, _ := filepath.Glob(filepath.Join(dir, "*"))
		return len(left) == 0
	})
}

// count returns how many processes have exactly argv.
func count(argv ...string) int { return len(pidsOf(argv...)) }

// pidsOf returns the pids of the processes whose argv is exactly argv
// (not zombies: their cmdline is empty).
func pidsOf(argv ...string) []int {
	want := strings.Join(argv, "\x00") + "\x00"
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, d := range dirs {
		if b, err := os.ReadFile(d); err == nil && string(b) == want {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
			pids = append(pids, pid)
		}
	}
	return pids
}
