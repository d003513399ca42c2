package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/runtime/contract"
)

func TestExec(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	warm := e.start(e.spec("warm", "sleep", "600"))
	hostSees := e.hostSees(warm) // asked while the container runs

	// Output, exit code, environment, working directory, GPU variables.
	spec := contract.Spec{
		Command:    []string{"sh", "-c", "echo out; echo err >&2; echo $X $CUDA_VISIBLE_DEVICES; pwd; exit 3"},
		Env:        map[string]string{"X": "x-value", "CUDA_VISIBLE_DEVICES": "overridden"},
		WorkingDir: "/tmp",
		GPUUUIDs:   []string{"GPU-1"},
		LogPath:    filepath.Join(e.dir, "exec.log"),
	}
	exit, err := e.rt.Exec(ctx, warm, spec)
	if err != nil {
		t.Fatal(err)
	}
	if exit.Code != 3 || exit.FinishedAt.Before(exit.StartedAt) {
		t.Errorf("exit %+v, want code 3", exit)
	}
	log := readFile(t, spec.LogPath)
	for _, want := range []string{"out\n", "err\n", "x-value GPU-1\n", "/tmp\n"} {
		if !strings.Contains(log, want) {
			t.Errorf("exec log %q lacks %q", log, want)
		}
	}

	// A second exec in the same container appends, and succeeds.
	spec.Command = []string{"echo", "again"}
	if exit, err := e.rt.Exec(ctx, warm, spec); err != nil || exit.Code != 0 {
		t.Fatalf("second exec: %+v, %v", exit, err)
	}
	if log := readFile(t, spec.LogPath); !strings.HasSuffix(log, "again\n") || !strings.Contains(log, "x-value") {
		t.Errorf("second exec log %q", log)
	}

	// A missing program.
	spec.Command = []string{"/no/such/program"}
	exit, err = e.rt.Exec(ctx, warm, spec)
	t.Logf("missing program: exit %+v, err %v", exit, err)
	if err == nil && exit.Code == 0 {
		t.Error("exec of a missing program succeeded")
	}

	// Cancelling the context kills the exec and its children, and leaves
	// the container running.
	// The cancel comes once the exec's shell has printed, so that its
	// process runs (a busy engine may take seconds to start an exec; one
	// cancelled before it runs is ended by killing the container).
	spec.Command = []string{"sh", "-c", "echo exec-started; sleep 501 & sleep 502; echo not-killed"}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := make(chan struct{})
	go func() { // owned: ends when the line shows, or by its deadline
		defer close(started)
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if b, _ := os.ReadFile(spec.LogPath); strings.Contains(string(b), "exec-started") {
				cancel()
				return
			}
			time.Sleep(20 * time.Millisecond) // polling a file, not synchronizing on time
		}
		cancel()
	}()
	t0 := time.Now()
	exit, err = e.rt.Exec(cctx, warm, spec)
	d := time.Since(t0)
	<-started
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled exec: %v, want context.Canceled", err)
	}
	if exit.Code != 137 || exit.Reason == "" {
		t.Errorf("cancelled exec: exit %+v, want 137 with a reason", exit)
	}
	t.Logf("cancelled exec returned after %v: %s", d, exit.Reason)
	if strings.Contains(readFile(t, spec.LogPath), "not-killed") {
		t.Error("the exec went on after its kill")
	}
	// Where this process cannot see or signal the container's processes
	// (not root, another PID namespace), the contract is the fallback: the
	// container is killed, and the reason says so.
	if why := hostSees; why != "" {
		t.Logf("the host cannot kill the exec's processes here (%s): checking the fallback", why)
		if !strings.Contains(exit.Reason, "container was killed") {
			t.Errorf("cancelled exec's reason %q does not say its container was killed", exit.Reason)
		}
		return
	}
	if strings.Contains(exit.Reason, "container was killed") {
		t.Errorf("the host sees the container's processes, yet the exec's container was killed: %s", exit.Reason)
	}
	spec.Command = []string{"ps", "-o", "pid,args"}
	spec.LogPath = filepath.Join(e.dir, "ps.log")
	if exit, err := e.rt.Exec(ctx, warm, spec); err != nil || exit.Code != 0 {
		ins, ierr := e.rt.Client().ContainerInspect(ctx, warm, client.ContainerInspectOptions{})
		if ierr == nil && ins.Container.State != nil {
			t.Logf("container state: %+v", *ins.Container.State)
		}
		t.Fatalf("ps: %+v, %v", exit, err)
	}
	ps := readFile(t, spec.LogPath)
	if strings.Contains(ps, "sleep 501") || strings.Contains(ps, "sleep 502") {
		t.Errorf("the cancelled exec's processes survive:\n%s", ps)
	}
	if !strings.Contains(ps, "sleep 600") {
		t.Errorf("the container's own process is gone:\n%s", ps)
	}

	// No such container; a stopped container.
	if _, err := e.rt.Exec(ctx, "mf-no-such-container", spec); !errors.Is(err, contract.ErrNotFound) {
		t.Errorf("exec in a missing container: %v, want ErrNotFound", err)
	}
	stopped := e.start(e.spec("stopped", "true"))
	e.wait(stopped)
	if _, err := e.rt.Exec(ctx, stopped, spec); err == nil {
		t.Error("exec in a stopped container succeeded")
	} else {
		t.Logf("stopped container: %v", err)
	}
}

// TestExecKillFallback: where the worker cannot see the exec's process, a
// cancelled exec is ended by killing its whole container.
func TestExecKillFallback(t *testing.T) {
	e := newEnv(t)
	e.rt.killGroup = func(int, string) error { return errors.New("not visible from here") }
	ctx := context.Background()
	warm := e.start(e.spec("warm", "sleep", "600"))
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	exit, err := e.rt.Exec(cctx, warm, contract.Spec{Command: []string{"sleep", "500"}})
	// 137: the exec's process was killed with its container; 126: a busy
	// engine had not started it yet when the container was killed.
	if !errors.Is(err, context.DeadlineExceeded) || (exit.Code != 137 && exit.Code != 126) {
		t.Fatalf("exec: %+v, %v", exit, err)
	}
	if !strings.Contains(exit.Reason, "container was killed") || !strings.Contains(exit.Reason, "not visible from here") {
		t.Errorf("exit reason %q does not say the container was killed and why", exit.Reason)
	}
	if cexit := e.wait(warm); cexit.Code != 137 {
		t.Errorf("container exit %+v, want 137: it must have been killed", cexit)
	}
}

// hostSees returns "" when this process can see container id's processes
// in /proc and signal them (what Exec's kill from the host needs), and
// otherwise why not.
func (e *env) hostSees(id string) string {
	e.t.Helper()
	ins, err := e.rt.Client().ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
	if err != nil || ins.Container.State == nil {
		e.t.Fatalf("inspect %s: %v", id, err)
	}
	if os.Geteuid() != 0 {
		return fmt.Sprintf("running as uid %d, not root", os.Geteuid())
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", ins.Container.State.Pid))
	if err != nil {
		return fmt.Sprintf("the container's init (host pid %d) is not visible: %v", ins.Container.State.Pid, err)
	}
	if !strings.Contains(string(cg), ins.Container.ID) {
		return fmt.Sprintf("host pid %d is not the container's init (another PID namespace)", ins.Container.State.Pid)
	}
	return ""
}
