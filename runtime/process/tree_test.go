package process

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
)

// A task that starts a process in a session of its own (setsid) and so
// outside its process group loses it when it is stopped, when it ends by
// itself, and when it is removed: the process runtime kills every process
// that carries the task's marker, not only the group (issue 18, finding
// 10: `setsid sleep 778 &` survived its cancel).
func TestSetsidDescendantsEndWithTheTask(t *testing.T) {
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cases := []struct {
		name  string
		sleep string
		end   func(t *testing.T, id string)
	}{
		{"stopped", uniqueSleep(0), func(t *testing.T, id string) {
			if err := r.Stop(ctx, id, time.Second); err != nil {
				t.Fatal(err)
			}
		}},
		{"ended by itself", uniqueSleep(1), func(t *testing.T, id string) { wait(t, r, id) }},
		{"removed", uniqueSleep(2), func(t *testing.T, id string) {
			if err := r.Remove(ctx, id); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			script := "setsid sleep " + c.sleep + " & setsid sh -c 'sleep " + c.sleep + " & sleep " + c.sleep + "' & sleep 300"
			if c.name == "ended by itself" {
				script = "setsid sleep " + c.sleep + " & setsid sh -c 'sleep " + c.sleep + " & sleep " + c.sleep + "' & sleep 2"
			}
			id, err := r.Start(ctx, contract.Spec{Command: []string{"sh", "-c", script}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Remove(ctx, id) })
			eventually(t, "3 detached sleeps running", func() bool { return count("sleep", c.sleep) == 3 })
			c.end(t, id)
			eventually(t, "no sleep "+c.sleep+" left", func() bool { return count("sleep", c.sleep) == 0 })
		})
	}
}

// uniqueSleep is a sleep duration (seconds) no other test run on this
// machine uses, so that counting "sleep N" processes sees only ours.
func uniqueSleep(i int) string { return strconv.Itoa(1_000_000 + 3*os.Getpid() + i) }

// Many tasks whose leaders exit at once, each with a descendant in a
// session of its own: every descendant is killed before its task's exit is
// reported (its SIGKILL is pending, or it is dead, when Wait returns), none
// is left, and processes that carry a marker much like a task's (its id
// with a character more or less, or another variable named like the
// marker) are not touched. The leaders all block on one FIFO and exit
// together when the test closes it, so their tree kills queue together on
// the sweeper (issue 17: one scan serves them all).
func TestManyTreesEndedAtOnce(t *testing.T) {
	const n = 50
	r := newRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "gate")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sleep := uniqueSleep(0) + ".5" // no other test's sleep
	ids := make([]string, n)
	for i := range ids {
		var err error
		ids[i], err = r.Start(ctx, contract.Spec{
			Command: []string{"sh", "-c", "setsid sleep " + sleep + " & echo $!; read x < " + fifo + "; exit 0"},
			LogPath: filepath.Join(dir, strconv.Itoa(i)+".log"),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "50 detached sleeps running", func() bool { return count("sleep", sleep) == n })

	// Decoys, started by the test itself (not the runtime): markers that a
	// prefix or substring match would take for the first task's.
	decoySleep := uniqueSleep(0) + ".25"
	var decoys []*exec.Cmd
	for _, env := range []string{
		TreeEnv + "=" + ids[0] + "0",
		TreeEnv + "=" + ids[0][:len(ids[0])-1],
		TreeEnv + "_OLD=" + ids[0],
		"X" + TreeEnv + "=" + ids[0],
	} {
		cmd := exec.Command("sleep", decoySleep)
		cmd.Env = []string{env}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		decoys = append(decoys, cmd)
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}

	scans := r.sweep.scanCount()
	// Every leader is blocked opening the FIFO; opening it for writing and
	// closing it ends all their reads at once.
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	for i, id := range ids {
		if e := wait(t, r, id); e.Code != 0 {
			t.Fatalf("task %d exit %+v, want 0", i, e)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(read(t, filepath.Join(dir, strconv.Itoa(i)+".log"))))
		if err != nil {
			t.Fatalf("task %d printed no pid: %v", i, err)
		}
		if st := killState(pid); st == "" {
			t.Errorf("task %d's detached sleep (pid %d) runs without a pending SIGKILL after its exit was reported", i, pid)
		}
	}
	t.Logf("%d trees ended in %d scans", n, r.sweep.scanCount()-scans)
	eventually(t, "no sleep "+sleep+" left", func() bool { return count("sleep", sleep) == 0 })
	for _, d := range decoys {
		if !alive("sleep", decoySleep) {
			t.Fatalf("a decoy with a marker like a task's was killed")
		}
		if err := d.Process.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("decoy %d (env %q) was killed: %v", d.Process.Pid, d.Env, err)
		}
	}
	if c := count("sleep", decoySleep); c != len(decoys) {
		t.Errorf("%d decoys run, want %d", c, len(decoys))
	}
}

// killState says how process pid stands against a SIGKILL: "gone", "dead"
// (a zombie or dying), "pending" (SIGKILL is pending), or "" when it runs
// without one.
func killState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "gone"
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return "dead"
			}
		case "SigPnd", "ShdPnd":
			if mask, err := strconv.ParseUint(v, 16, 64); err == nil && mask&(1<<(syscall.SIGKILL-1)) != 0 {
				return "pending"
			}
		}
	}
	return ""
}
