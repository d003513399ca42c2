package docker

import (
	"context"
	"testing"
	"time"
)

// A container the engine created but never started (a worker killed
// between create and start) is listed as NeverStarted, neither running nor
// exited, and its exit is not the engine's code 0 but -1 with a reason:
// a restarted worker must not take it for a success.
func TestNeverStartedContainer(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("created", "sh", "-c", "exit 3")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	created, err := e.rt.cli.ContainerCreate(ctx, createOptions(spec, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.rt.Remove(context.Background(), created.ID) })
	cs, err := e.rt.List(ctx, spec.Labels)
	if err != nil || len(cs) != 1 {
		t.Fatalf("List: %v, %v; want the one container", cs, err)
	}
	if c := cs[0]; c.ID != created.ID || !c.NeverStarted || c.Running || c.Exit != nil {
		t.Fatalf("List: %+v; want NeverStarted, not running, no exit", c)
	}
	exit, _, err := e.rt.inspectExit(ctx, created.ID)
	if err != nil || exit.Code != -1 || exit.Reason == "" {
		t.Fatalf("inspectExit: %+v, %v; want code -1 with a reason (the engine says 0)", exit, err)
	}
}
