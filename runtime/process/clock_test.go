package process

import (
	"context"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/runtime/contract"
)

// Stop's grace and the Exit's times run on Config.Clock: a group that
// ignores SIGTERM is killed when the fake clock passes the grace (an hour,
// which the test never waits out on the system clock), and its Exit is
// stamped with the fake clock's times.
func TestStopGraceAndExitTimesOnTheClock(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	r := newRuntimeWith(t, Config{Clock: clk})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	id, err := r.Start(ctx, contract.Spec{Command: []string{"sh", "-c", "trap '' TERM; sleep 3021"}})
	if err != nil {
		t.Fatal(err)
	}
	// The trap is set before sleep runs, and sleep inherits it.
	eventually(t, "child started", func() bool { return alive("sleep", "3021") })
	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop(ctx, id, time.Hour) }()
	eventually(t, "Stop's grace timer on the fake clock", func() bool { return clk.Waiters() == 1 })
	if at, _ := clk.Next(); !at.Equal(start.Add(time.Hour)) {
		t.Errorf("grace ends at %v, want start+1h", at.Sub(start))
	}
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned before the grace passed: %v", err)
	default:
	}

	clk.Advance(time.Hour)
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Stop did not kill the group after the fake clock passed its grace")
	}
	exit := wait(t, r, id)
	if exit.Code != 137 || !exit.StartedAt.Equal(start) || !exit.FinishedAt.Equal(start.Add(time.Hour)) {
		t.Errorf("exit %+v; want 137, started at %v, finished an hour later on the fake clock", exit, start)
	}
}
