package docker

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/runtime/contract"
)

// Pause freezes a container (the engine says Paused, List too, an exec is
// refused); a second Pause is no error; Unpause thaws it (an exec runs)
// and a second Unpause is no error; a paused container stops as a running
// one does; a missing container is ErrNotFound.
func TestPauseUnpause(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	spec := e.spec("box", "sleep", "600")
	id := e.start(spec)
	paused := func() bool {
		t.Helper()
		ins, err := e.rt.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ins.Container.State.Paused
	}
	for i := range 2 {
		if err := e.rt.Pause(ctx, id); err != nil {
			t.Fatalf("Pause %d: %v", i+1, err)
		}
	}
	if !paused() {
		t.Fatal("after Pause the engine says the container is not paused")
	}
	cs, err := e.rt.List(ctx, spec.Labels)
	if err != nil || len(cs) != 1 || !cs[0].Paused || !cs[0].Running {
		t.Fatalf("List of the paused container: %+v, %v; want one, Running and Paused", cs, err)
	}
	if _, err := e.rt.ExecStream(ctx, id, contract.ExecRequest{Command: []string{"true"}}); err == nil {
		t.Fatal("an exec in a paused container ran")
	}
	for i := range 2 {
		if err := e.rt.Unpause(ctx, id); err != nil {
			t.Fatalf("Unpause %d: %v", i+1, err)
		}
	}
	if paused() {
		t.Fatal("after Unpause the engine says the container is paused")
	}
	var out bytes.Buffer
	if x, err := e.rt.ExecStream(ctx, id, contract.ExecRequest{Command: []string{"echo", "thawed"}, Stdout: &out}); err != nil || x.Code != 0 || out.String() != "thawed\n" {
		t.Fatalf("exec after Unpause: %+v %q, %v", x, out.String(), err)
	}
	if cs, err := e.rt.List(ctx, spec.Labels); err != nil || len(cs) != 1 || cs[0].Paused {
		t.Fatalf("List after Unpause: %+v, %v; want one, not paused", cs, err)
	}

	// A paused container is stopped like a running one (a closed or
	// expired sandbox's).
	if err := e.rt.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Stop(ctx, id, time.Second); err != nil {
		t.Fatalf("Stop of a paused container: %v", err)
	}
	if cs, err := e.rt.List(ctx, spec.Labels); err != nil || len(cs) != 1 || cs[0].Running || cs[0].Paused {
		t.Fatalf("List after Stop: %+v, %v; want one, stopped", cs, err)
	}
	if err := e.rt.Pause(ctx, id); err == nil {
		t.Fatal("Pause of a stopped container: no error")
	}
	if err := e.rt.Pause(ctx, "mf-no-such-container"); !errors.Is(err, contract.ErrNotFound) {
		t.Fatalf("Pause of a missing container: %v; want ErrNotFound", err)
	}
}

// A cancelled exec in a container someone paused ends: the kill, which a
// frozen process takes only once thawed, lands (the container is
// unpaused for it), and the container is paused again after. Before, the
// exec's process stayed frozen and a persistent task's timeout came a
// minute late, when its warm container was removed (a fault trial).
func TestAKilledExecInAPausedContainerEnds(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	warm := e.start(e.spec("warm", "sleep", "600"))
	if why := e.hostSees(warm); why != "" {
		t.Skipf("the host cannot signal the container's processes here (%s): its container is killed instead", why)
	}
	spec := contract.Spec{Command: []string{"sh", "-c", "echo exec-started; sleep 504"}, LogPath: filepath.Join(e.dir, "paused.log")}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { // owned: ends when Exec does, at the latest by ctx
		_, err := e.rt.Exec(cctx, warm, spec)
		done <- err
	}()
	running := func() bool { b, _ := os.ReadFile(spec.LogPath); return strings.Contains(string(b), "exec-started") }
	waitFor(t, 30*time.Second, "the exec to start", running)
	if err := e.rt.Pause(ctx, warm); err != nil {
		t.Fatal(err)
	}
	stop()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the cancelled exec: %v, want context.Canceled", err)
		}
	case <-ctx.Done():
		t.Fatal("the cancelled exec did not return")
	}
	gone := func() bool {
		dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, d := range dirs {
			if b, err := os.ReadFile(d); err == nil && bytes.Equal(b, []byte("sleep\x00504\x00")) {
				return false
			}
		}
		return true
	}
	waitFor(t, 10*time.Second, "the killed exec's process to end (it stays frozen in a paused container)", gone)
	ins, err := e.rt.cli.ContainerInspect(ctx, warm, client.ContainerInspectOptions{})
	if err != nil || !ins.Container.State.Paused {
		t.Errorf("after the kill the container is not paused again: %v", err)
	}
	_ = e.rt.Unpause(ctx, warm)
}
