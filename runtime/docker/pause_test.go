package docker

import (
	"bytes"
	"context"
	"errors"
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
