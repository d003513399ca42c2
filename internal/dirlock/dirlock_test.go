package dirlock

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/errs"
)

// TestMain lets the test binary act as the other process: with
// DIRLOCK_HOLD=dir it takes the lock, says "held", and waits to be killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv("DIRLOCK_HOLD"); dir != "" {
		if _, err := Acquire(dir, "holder"); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("held")
		select {}
	}
	os.Exit(m.Run())
}

// A directory held by another process is refused at once, naming that
// process's pid and what to do; once the holder is killed (kill -9, no
// cleanup) the directory can be taken.
func TestAcquireHeldByAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DIRLOCK_HOLD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("holder: %q %v", line, err)
	}

	begin := time.Now()
	_, err = Acquire(dir, "megaflow up")
	if took := time.Since(begin); took > time.Second {
		t.Errorf("Acquire took %v; want an answer at once", took)
	}
	want := fmt.Sprintf("megaflow up: data directory %s is in use by another process (pid %d)", dir, cmd.Process.Pid)
	if errs.ClassOf(err) != errs.FailedPrecondition || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "stop that process first") {
		t.Fatalf("Acquire on a held directory: %v\nwant it to contain %q", err, want)
	}

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	l, err := Acquire(dir, "megaflow up")
	if err != nil {
		t.Fatalf("Acquire after the holder was killed: %v", err)
	}
	if b, _ := os.ReadFile(dir + "/" + FileName); strings.TrimSpace(string(b)) != fmt.Sprint(os.Getpid()) {
		t.Errorf("lock file says %q, want this pid %d", b, os.Getpid())
	}
	if err := l.Release(); err != nil || l.Release() != nil {
		t.Fatalf("Release: %v", err)
	}
}

// In one process too, a second Acquire is refused until the first lock is
// released (flock locks belong to the open file).
func TestAcquireTwiceInOneProcess(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(dir, "b"); errs.ClassOf(err) != errs.FailedPrecondition {
		t.Fatalf("second Acquire: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(dir, "b")
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	_ = l2.Release()
	var nilLock *Lock
	if err := nilLock.Release(); !errors.Is(err, nil) {
		t.Fatal(err)
	}
}
