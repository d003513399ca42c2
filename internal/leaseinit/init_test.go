package leaseinit_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/leaseinit"
)

// initBin is megaflow-init, built static by TestMain.
var initBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leaseinit-test-")
	if err != nil {
		panic(err)
	}
	initBin = filepath.Join(dir, "megaflow-init")
	build := exec.Command("go", "build", "-o", initBin, "github.com/megaflow/megaflow/cmd/megaflow-init")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		panic("build megaflow-init: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// start runs the init with a lease expiring in `in` over a shell script;
// it returns the command and a reader of its stdout.
func start(t *testing.T, in time.Duration, script string) (*exec.Cmd, *bufio.Reader, string) {
	t.Helper()
	dir := t.TempDir()
	if err := leaseinit.WriteExpiry(dir, time.Now().Add(in)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(initBin, leaseinit.Argv(initBin, filepath.Join(dir, leaseinit.FileName), 300*time.Millisecond, []string{"/bin/sh", "-c", script})[1:]...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd, bufio.NewReader(out), dir
}

func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && !strings.Contains(string(b), ") Z ")
}

func waitExit(t *testing.T, cmd *exec.Cmd, within time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(within):
		t.Fatalf("megaflow-init still runs after %v", within)
		return -1
	}
}

// TestLeaseLapseKillsTheTree: a task with a background child and a
// setsid'd grandchild (outside its process group) is killed, whole, once
// the lease in the file lapses, and nothing of it survives the init.
func TestLeaseLapseKillsTheTree(t *testing.T) {
	cmd, out, _ := start(t, 1500*time.Millisecond, `trap '' TERM; sleep 300 & echo $!; setsid sleep 301 & echo $!; wait`)
	var pids []int
	for range 2 {
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(line))
		pids = append(pids, pid)
	}
	began := time.Now()
	code := waitExit(t, cmd, 5*time.Second)
	if took := time.Since(began); took < time.Second {
		t.Fatalf("the init ended after %v, before the lease lapsed (exit %d)", took, code)
	}
	if code != 128+int(syscall.SIGKILL) && code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d, want 137 or 143", code)
	}
	deadline := time.Now().Add(2 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d of the task survived the lapse", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestRenewedLeaseKeepsTheTask: a lease renewed in time (the file
// rewritten) keeps the task running to its own end and exit code.
func TestRenewedLeaseKeepsTheTask(t *testing.T) {
	cmd, _, dir := start(t, 700*time.Millisecond, `sleep 2; exit 3`)
	// The renewer is owned by the test: it stops, and is waited for,
	// before the test returns, so it never writes into the directory
	// after t.TempDir's cleanup has begun removing it.
	stop, renewed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(renewed)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = leaseinit.WriteExpiry(dir, time.Now().Add(700*time.Millisecond))
			}
		}
	}()
	defer func() { close(stop); <-renewed }()
	if code := waitExit(t, cmd, 5*time.Second); code != 3 {
		t.Fatalf("exit %d, want the task's 3", code)
	}
}

// TestSignalsForwarded: SIGTERM to the init reaches the task's group.
func TestSignalsForwarded(t *testing.T) {
	cmd, out, _ := start(t, time.Minute, `echo up; sleep 300`)
	if _, err := out.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd, 3*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d, want 143", code)
	}
}

// TestNoLeaseNoStart: a missing or expired lease file refuses the task.
func TestNoLeaseNoStart(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	for _, tc := range []struct {
		name  string
		setup func() string
	}{
		{"missing", func() string { return filepath.Join(dir, "nope") }},
		{"expired", func() string {
			d := filepath.Join(dir, "old")
			if err := leaseinit.WriteExpiry(d, time.Now().Add(-time.Second)); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(d, leaseinit.FileName)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(initBin, "--lease", tc.setup(), "--", "/bin/sh", "-c", "touch "+marker)
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != leaseinit.ExitNoLease {
				t.Fatalf("err %v, want exit %d", err, leaseinit.ExitNoLease)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the task ran")
			}
		})
	}
}

// TestTaskEndKillsWhatItLeft: when the task exits by itself, the init
// kills what it left below it (a setsid'd child, a double fork's orphan,
// a child the task never waited for) and returns the task's own code;
// a task that leaves nothing ends the same way (the init skips its scan
// of /proc then: issue 17).
func TestTaskEndKillsWhatItLeft(t *testing.T) {
	cases := []struct {
		name, script string
		pids         int // lines of pids the script prints
		code         int
	}{
		{"setsid child", `setsid sleep 302 & echo $!; exit 3`, 1, 3},
		{"double fork", `sh -c 'setsid sleep 303 & echo $!'; exit 0`, 1, 0},
		{"plain child", `sleep 304 & echo $!; exit 4`, 1, 4},
		{"nothing left", `exit 5`, 0, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd, out, _ := start(t, time.Minute, c.script)
			var pids []int
			for range c.pids {
				line, err := out.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				pid, err := strconv.Atoi(strings.TrimSpace(line))
				if err != nil {
					t.Fatalf("the script printed %q, not a pid", line)
				}
				pids = append(pids, pid)
			}
			if code := waitExit(t, cmd, 5*time.Second); code != c.code {
				t.Fatalf("exit %d, want the task's %d", code, c.code)
			}
			deadline := time.Now().Add(2 * time.Second)
			for _, pid := range pids {
				for alive(pid) {
					if time.Now().After(deadline) {
						t.Fatalf("process %d the task left survived its end", pid)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
}
