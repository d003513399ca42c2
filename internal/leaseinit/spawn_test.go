package leaseinit_test

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/leaseinit"
)

// spawner starts megaflow-init --spawn-fd over a socket pair with a lease
// expiring in `in`; it returns our end and the lease directory.
func spawner(t *testing.T, in time.Duration) (*net.UnixConn, string) {
	t.Helper()
	dir := t.TempDir()
	if err := leaseinit.WriteExpiry(dir, time.Now().Add(in)); err != nil {
		t.Fatal(err)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	cmd := exec.Command(initBin, "--spawn-fd", "3", "--lease", filepath.Join(dir, leaseinit.FileName), "--grace", "200ms", "--poll", "50ms")
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		t.Fatal(err)
	}
	conn := c.(*net.UnixConn)
	t.Cleanup(func() {
		conn.Close() // the spawner stops what it runs and exits
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }() // ends with the spawner
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Errorf("the spawner did not exit within 20s of its socket's close")
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	if rep := recv(t, conn); rep.Hello != leaseinit.SpawnProtocol {
		t.Fatalf("greeting %+v", rep)
	}
	return conn, dir
}

func recv(t *testing.T, conn *net.UnixConn) leaseinit.SpawnReply {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	n, _, _, _, err := conn.ReadMsgUnix(buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	var rep leaseinit.SpawnReply
	if err := json.Unmarshal(buf[:n], &rep); err != nil {
		t.Fatalf("%q: %v", buf[:n], err)
	}
	return rep
}

func send(t *testing.T, conn *net.UnixConn, req leaseinit.SpawnRequest, out *os.File) {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var oob []byte
	if out != nil {
		oob = syscall.UnixRights(int(out.Fd()))
	}
	if err := conn.SetWriteDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := conn.WriteMsgUnix(b, oob, nil); err != nil {
		t.Fatal(err)
	}
}

// The protocol: a task started and reaped (its pid, then its end, clean),
// a program that is not there (not started, with its errno), and a
// request without an output descriptor (refused as bad).
func TestSpawnerProtocol(t *testing.T) {
	conn, _ := spawner(t, time.Hour)
	null := devNull(t)
	send(t, conn, leaseinit.NewSpawnRequest("a", "/bin/sh", []string{"sh", "-c", "exit 3"}, nil, ""), null)
	if rep := recv(t, conn); rep.ID != "a" || rep.Pid <= 0 {
		t.Fatalf("first reply %+v, want a's pid", rep)
	}
	if rep := recv(t, conn); rep.ID != "a" || !rep.Exited || rep.Code != 3 || !rep.Clean {
		t.Fatalf("second reply %+v, want a's clean end with code 3", rep)
	}
	send(t, conn, leaseinit.NewSpawnRequest("b", "/no/such/program", []string{"x"}, nil, ""), null)
	if rep := recv(t, conn); rep.ID != "b" || rep.Err == "" || rep.Errno != int(syscall.ENOENT) {
		t.Fatalf("reply %+v, want b not started with ENOENT", rep)
	}
	send(t, conn, leaseinit.NewSpawnRequest("c", "/bin/true", []string{"true"}, nil, ""), nil)
	if rep := recv(t, conn); rep.ID != "c" || rep.Err == "" || rep.Pid != 0 {
		t.Fatalf("reply %+v, want c refused", rep)
	}
}

// A worker that reads nothing (frozen) does not stall the spawner: with
// hundreds of replies unread, more than the socket's buffer holds, it
// still stops a running task when the lease lapses.
func TestSpawnerKeepsTheLeaseWithRepliesUnread(t *testing.T) {
	conn, dir := spawner(t, time.Hour)
	null := devNull(t)
	sleep := strconv.Itoa(2_000_000 + os.Getpid())
	send(t, conn, leaseinit.NewSpawnRequest("sleep", "/bin/sleep", []string{"sleep", sleep}, nil, ""), null)
	for i := range 600 {
		send(t, conn, leaseinit.NewSpawnRequest("t"+strconv.Itoa(i), "/bin/true", []string{"true"}, nil, ""), null)
	}
	var pid int
	waitFor(t, "the sleep running", func() bool { pid = pidOf("sleep", sleep); return pid > 0 })
	if err := leaseinit.WriteExpiry(dir, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sleep stopped by the lapse", func() bool { return pidOf("sleep", sleep) == 0 })
}

// pidOf returns the pid of a process whose argv is exactly argv, 0 if none
// (zombies included: their cmdline is empty).
func pidOf(argv ...string) int {
	want := ""
	for _, a := range argv {
		want += a + "\x00"
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		if b, err := os.ReadFile(d); err == nil && string(b) == want {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
			return pid
		}
	}
	return 0
}

// devNull opens /dev/null for writing, closed when the test ends.
func devNull(t *testing.T) *os.File {
	t.Helper()
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// waitFor polls cond every 10 ms for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A lease file that cannot be read (removed here) does not stop the
// spawner's watch: the last expiry it read holds, and the task is stopped
// when that passes.
func TestSpawnerLeaseUnreadableLastExpiryHolds(t *testing.T) {
	conn, dir := spawner(t, 1500*time.Millisecond)
	null := devNull(t)
	sleep := strconv.Itoa(2_100_000 + os.Getpid())
	send(t, conn, leaseinit.NewSpawnRequest("sleep", "/bin/sleep", []string{"sleep", sleep}, nil, ""), null)
	if rep := recv(t, conn); rep.Pid <= 0 {
		t.Fatalf("reply %+v, want the pid", rep)
	}
	if err := os.Remove(filepath.Join(dir, leaseinit.FileName)); err != nil {
		t.Fatal(err)
	}
	rep := recv(t, conn) // within recv's 10 s: the lease ends 1.5 s in, SIGTERM then
	if !rep.Exited || rep.Signal != int(syscall.SIGTERM) || rep.Reason == "" {
		t.Fatalf("reply %+v, want the task's end by SIGTERM, with a reason", rep)
	}
}
