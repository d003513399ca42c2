package process

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
)

func newRuntime(t *testing.T) *Runtime {
	t.Helper()
	return newRuntimeWith(t, Config{})
}

// newRuntimeWith returns New(cfg), whose processes are removed and
// spawners closed when the test ends.
func newRuntimeWith(t *testing.T, cfg Config) *Runtime {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		list, _ := r.List(context.Background(), nil)
		for _, c := range list {
			r.Remove(context.Background(), c.ID)
		}
		r.Close()
	})
	return r
}

func wait(t *testing.T, r *Runtime, id string) contract.Exit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exit, err := r.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return exit
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// alive reports whether a process whose argv is exactly argv exists.
func alive(argv ...string) bool {
	want := []byte(strings.Join(argv, "\x00") + "\x00")
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		if b, err := os.ReadFile(d); err == nil && bytes.Equal(b, want) {
			return true
		}
	}
	return false
}

// eventually waits up to 5s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStartWait(t *testing.T) {
	r := newRuntime(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "a.log")
	os.WriteFile(log, []byte("earlier\n"), 0o644)
	t.Setenv("MF_INHERITED", "inherited")
	t.Setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
	id, err := r.Start(context.Background(), contract.Spec{
		Name:       "ok",
		Command:    []string{"sh", "-c", "echo out; echo err >&2; echo $MF_INHERITED $MF_SPEC; echo cuda=$CUDA_VISIBLE_DEVICES nv=$NVIDIA_VISIBLE_DEVICES; pwd"},
		Env:        map[string]string{"MF_SPEC": "spec", "CUDA_VISIBLE_DEVICES": "also-overridden"},
		GPUUUIDs:   []string{"GPU-a", "GPU-b"},
		WorkingDir: dir,
		LogPath:    log,
		Image:      "ignored:1",
	})
	if err != nil {
		t.Fatal(err)
	}
	exit := wait(t, r, id)
	if exit.Code != 0 || exit.FinishedAt.Before(exit.StartedAt) || exit.StartedAt.IsZero() {
		t.Fatalf("exit %+v", exit)
	}
	got := read(t, log)
	for _, want := range []string{"earlier\nout\n", "err\n", "inherited spec\n", "cuda=GPU-a,GPU-b nv=GPU-a,GPU-b\n", dir + "\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q lacks %q", got, want)
		}
	}
}

func TestExitCodes(t *testing.T) {
	r := newRuntime(t)
	ctx := context.Background()
	id, err := r.Start(ctx, contract.Spec{Command: []string{"sh", "-c", "exit 7"}})
	if err != nil {
		t.Fatal(err)
	}
	if exit := wait(t, r, id); exit.Code != 7 || exit.OOMKilled || !exit.ExitedFirst {
		t.Errorf("exit %+v, want 7, its own (ExitedFirst)", exit)
	}
	id, err = r.Start(ctx, contract.Spec{Command: []string{"sh", "-c", "kill -USR1 $$"}})
	if err != nil {
		t.Fatal(err)
	}
	if exit := wait(t, r, id); exit.Code != 138 {
		t.Errorf("exit %+v, want 138 (SIGUSR1)", exit)
	}
	if _, err := r.Start(ctx, contract.Spec{Command: []string{"/no/such/program"}}); err == nil {
		t.Error("a missing program started")
	}
	if _, err := r.Wait(ctx, "proc-unknown"); !errors.Is(err, contract.ErrNotFound) {
		t.Errorf("Wait of an unknown id: %v", err)
	}
	if err := r.Stop(ctx, "proc-unknown", 0); !errors.Is(err, contract.ErrNotFound) {
		t.Errorf("Stop of an unknown id: %v", err)
	}
}

func TestStop(t *testing.T) {
	r := newRuntime(t)
	ctx := context.Background()

	// SIGTERM reaches the whole group: the shell and its background child.
	polite, err := r.Start(ctx, contract.Spec{Command: []string{"sh", "-c", "sleep 3011 & sleep 3012; wait"}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "children started", func() bool { return alive("sleep", "3011") && alive("sleep", "3012") })
	t0 := time.Now()
	if err := r.Stop(ctx, polite, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("polite stop took %v", d)
	}
	if exit := wait(t, r, polite); exit.Code != 143 || exit.ExitedFirst {
		t.Errorf("polite exit %+v, want 143, the stop's (not ExitedFirst)", exit)
	}
	eventually(t, "the group is gone", func() bool { return !alive("sleep", "3011") && !alive("sleep", "3012") })

	// A group ignoring SIGTERM is killed after the grace.
	stubborn, err := r.Start(ctx, contract.Spec{Command: []string{"sh", "-c", "trap '' TERM; sleep 3013; echo survived"}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "child started", func() bool { return alive("sleep", "3013") })
	const grace = 500 * time.Millisecond
	t0 = time.Now()
	if err := r.Stop(ctx, stubborn, grace); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < grace || d > grace+2*time.Second {
		t.Errorf("stop with grace %v took %v", grace, d)
	}
	if exit := wait(t, r, stubborn); exit.Code != 137 || exit.ExitedFirst {
		t.Errorf("stubborn exit %+v, want 137, the stop's", exit)
	}
	eventually(t, "the stubborn group is gone", func() bool { return !alive("sleep", "3013") })
	if err := r.Stop(ctx, stubborn, grace); err != nil {
		t.Errorf("Stop of an exited process: %v", err)
	}

	// When the leader exits, what it left in its group is killed, as a
	// container's end would.
	leaver, err := r.Start(ctx, contract.Spec{Command: []string{"sh", "-c", "sleep 3014 & exit 0"}})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r, leaver)
	eventually(t, "the leader's leftovers are gone", func() bool { return !alive("sleep", "3014") })
	if err := r.Stop(ctx, leaver, grace); err != nil || !wait(t, r, leaver).ExitedFirst {
		t.Errorf("Stop after its own end: %v, exit %+v; want nil and ExitedFirst", err, wait(t, r, leaver))
	}
}

// A Stop that finds the leader exited but its end not yet recorded (a
// zombie, or reaped while its end is on its way) signals nothing and
// leaves the end the task's own: a task that completed in the instant a
// shutting-down worker stopped it kept STOPPED and ran again.
func TestStopOfAnExitedLeaderSignalsNothing(t *testing.T) {
	r := newRuntime(t)
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	live := exec.Command("sleep", "3016")
	live.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a group of its own, as the runtime's leaders
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Process.Kill() })
	eventually(t, "true is a zombie", func() bool { return exited(zombie.Process.Pid) })
	if exited(live.Process.Pid) {
		t.Fatal("a running sleep reads as exited")
	}
	add := func(id string, pid int) *proc {
		p := &proc{id: id, pid: pid, done: make(chan struct{})}
		r.mu.Lock()
		r.procs[id] = p
		r.mu.Unlock()
		return p
	}
	z, l := add("proc-zombie", zombie.Process.Pid), add("proc-live", live.Process.Pid)
	// Its end not yet recorded, Stop waits for it (here until its context
	// ends) without a signal.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err := r.Stop(ctx, "proc-zombie", time.Minute)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || z.signalled.Load() {
		t.Errorf("Stop of a zombie leader: %v, signalled %v; want it to wait for the end, unsignalled", err, z.signalled.Load())
	}
	zombie.Wait() // reaped: its pid is gone now, which reads as exited too
	if !exited(zombie.Process.Pid) {
		t.Error("a reaped pid reads as running")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	err = r.Stop(ctx, "proc-zombie", time.Minute)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || z.signalled.Load() {
		t.Errorf("Stop of a reaped leader: %v, signalled %v; want it to wait for the end, unsignalled", err, z.signalled.Load())
	}
	r.end(z, contract.Exit{Code: 0}, false, nil) // its end arrives
	if err := r.Stop(context.Background(), "proc-zombie", time.Minute); err != nil || z.signalled.Load() || !z.exit.ExitedFirst {
		t.Errorf("the exited leader: Stop %v, signalled %v, exit %+v; want no signal and ExitedFirst", err, z.signalled.Load(), z.exit)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop(context.Background(), "proc-live", time.Minute) }()
	waited := make(chan error, 1)
	go func() { waited <- live.Wait() }()
	select {
	case err := <-waited:
		if err == nil || !strings.Contains(err.Error(), "terminated") {
			t.Errorf("the live leader ended %v, want terminated by the stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not signal the live leader")
	}
	r.end(l, contract.Exit{Code: 143}, false, nil)
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop of the live leader did not return once its end arrived")
	}
	if !l.signalled.Load() || l.exit.ExitedFirst {
		t.Errorf("the live leader: signalled %v, exit %+v; want the stop's end", l.signalled.Load(), l.exit)
	}
	r.mu.Lock()
	delete(r.procs, "proc-zombie")
	delete(r.procs, "proc-live")
	r.mu.Unlock()
}

func TestListRemoveConflict(t *testing.T) {
	r := newRuntime(t)
	ctx := context.Background()
	a, err := r.Start(ctx, contract.Spec{Name: "a", Command: []string{"sleep", "3021"}, Labels: map[string]string{"task": "t1", "attempt": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Start(ctx, contract.Spec{Name: "b", Command: []string{"true"}, Labels: map[string]string{"task": "t1", "attempt": "2"}})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r, b)
	if _, err := r.Start(ctx, contract.Spec{Name: "a", Command: []string{"true"}}); !errors.Is(err, contract.ErrConflict) {
		t.Fatalf("second a: %v, want ErrConflict", err)
	}
	all, _ := r.List(ctx, map[string]string{"task": "t1"})
	if len(all) != 2 {
		t.Fatalf("List: %+v", all)
	}
	for _, c := range all {
		switch c.ID {
		case a:
			if !c.Running || c.Exit != nil || c.Name != "a" {
				t.Errorf("a: %+v", c)
			}
		case b:
			if c.Running || c.Exit == nil || c.Exit.Code != 0 || c.Name != "b" {
				t.Errorf("b: %+v", c)
			}
		}
	}
	one, _ := r.List(ctx, map[string]string{"task": "t1", "attempt": "2"})
	if len(one) != 1 || one[0].ID != b {
		t.Errorf("List by two labels: %+v", one)
	}
	if err := r.Remove(ctx, a); err != nil {
		t.Fatal(err)
	}
	if alive("sleep", "3021") {
		t.Error("Remove left the process running")
	}
	if err := r.Remove(ctx, a); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if _, err := r.Wait(ctx, a); !errors.Is(err, contract.ErrNotFound) {
		t.Errorf("Wait after Remove: %v", err)
	}
	// The name is free again.
	again, err := r.Start(ctx, contract.Spec{Name: "a", Command: []string{"true"}})
	if err != nil {
		t.Fatalf("reuse of a removed name: %v", err)
	}
	wait(t, r, again)
}

func TestWaitContext(t *testing.T) {
	r := newRuntime(t)
	id, err := r.Start(context.Background(), contract.Spec{Command: []string{"sleep", "3031"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := r.Wait(ctx, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %v", err)
	}
}
