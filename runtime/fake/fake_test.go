package fake

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/runtime/contract"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBehaviorsOnFakeClock(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	r := New(clk)
	r.OnCommand("train", Behavior{Duration: time.Hour, ExitCode: 3, Output: "epoch 1\n"})
	r.OnCommand("hog", Behavior{Duration: time.Minute, OOM: true})
	r.OnCommand("server", Behavior{Hang: true})
	r.OnCommand("stubborn", Behavior{Hang: true, IgnoreTerm: true})
	r.OnCommand("missing", Behavior{StartErr: contract.ErrImageNotFound})
	ctx := context.Background()
	// The output creates its log file and the directories above it; no
	// output, no file and no directory (contract.Spec.LogPath).
	dir := t.TempDir()
	log, hogLog := filepath.Join(dir, "train", "1.log"), filepath.Join(dir, "hog", "1.log")

	train, err := r.Start(ctx, contract.Spec{Name: "train", Command: []string{"train"}, LogPath: log, Labels: map[string]string{"task": "t1"}})
	if err != nil {
		t.Fatal(err)
	}
	hog, _ := r.Start(ctx, contract.Spec{Name: "hog", Command: []string{"hog"}, Labels: map[string]string{"task": "t2"}, LogPath: hogLog})
	if _, err := os.Stat(filepath.Dir(hogLog)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a container without output has a log directory (%v)", err)
	}
	server, _ := r.Start(ctx, contract.Spec{Name: "server", Command: []string{"server"}})
	stubborn, _ := r.Start(ctx, contract.Spec{Name: "stubborn", Command: []string{"stubborn"}})
	if _, err := r.Start(ctx, contract.Spec{Command: []string{"missing"}}); !errors.Is(err, contract.ErrImageNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := r.Start(ctx, contract.Spec{Name: "train", Command: []string{"x"}}); !errors.Is(err, contract.ErrConflict) {
		t.Fatalf("duplicate name: %v", err)
	}
	if b, _ := os.ReadFile(log); string(b) != "epoch 1\n" {
		t.Errorf("log %q", b)
	}
	if r.Running() != 4 {
		t.Fatalf("running %d", r.Running())
	}

	clk.Advance(time.Minute)
	exit, err := r.Wait(ctx, hog)
	if err != nil || !exit.OOMKilled || exit.Code != 137 || exit.FinishedAt != time.Unix(1060, 0) {
		t.Fatalf("hog: %+v %v", exit, err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	if _, err := r.Wait(short, train); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("train ended early: %v", err)
	}
	cancel()
	clk.Advance(time.Hour)
	if exit, _ := r.Wait(ctx, train); exit.Code != 3 {
		t.Fatalf("train: %+v", exit)
	}

	if err := r.Stop(ctx, server, time.Minute); err != nil {
		t.Fatal(err)
	}
	if exit, _ := r.Wait(ctx, server); exit.Code != 143 {
		t.Fatalf("server: %+v", exit)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop(ctx, stubborn, 10*time.Second) }()
	waitFor(t, "Stop waits its grace", func() bool { return clk.Waiters() == 1 })
	clk.Advance(10 * time.Second)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if exit, _ := r.Wait(ctx, stubborn); exit.Code != 137 {
		t.Fatalf("stubborn: %+v", exit)
	}

	list, _ := r.List(ctx, map[string]string{"task": "t1"})
	if len(list) != 1 || list[0].ID != train || list[0].Running || list[0].Exit.Code != 3 {
		t.Fatalf("List: %+v", list)
	}
	if err := r.Remove(ctx, train); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(ctx, train); !errors.Is(err, contract.ErrNotFound) {
		t.Fatalf("Wait after Remove: %v", err)
	}
	if n := r.CallCount("Start"); n != 6 {
		t.Errorf("Start calls %d", n)
	}
}

func TestInjectedFailuresAndExec(t *testing.T) {
	r := New(nil) // wall clock, small durations
	r.Default(Behavior{Hang: true})
	r.OnCommand("quick", Behavior{Duration: time.Millisecond, ExitCode: 5, Output: "hi\n"})
	ctx := context.Background()

	r.Fail("Start", contract.ErrUnavailable)
	if _, err := r.Start(ctx, contract.Spec{Command: []string{"x"}}); !errors.Is(err, contract.ErrUnavailable) {
		t.Fatalf("injected: %v", err)
	}
	warm, err := r.Start(ctx, contract.Spec{Command: []string{"sleep"}})
	if err != nil {
		t.Fatal(err)
	}
	r.SetDown(true)
	if _, err := r.List(ctx, nil); !errors.Is(err, contract.ErrUnavailable) {
		t.Fatalf("down: %v", err)
	}
	r.SetDown(false)

	exit, err := r.Exec(ctx, warm, contract.Spec{Command: []string{"quick"}})
	if err != nil || exit.Code != 5 {
		t.Fatalf("exec: %+v %v", exit, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	exit, err = r.Exec(cctx, warm, contract.Spec{Command: []string{"forever"}})
	if !errors.Is(err, context.DeadlineExceeded) || exit.Code != 137 {
		t.Fatalf("cancelled exec: %+v %v", exit, err)
	}

	q, _ := r.Start(ctx, contract.Spec{Command: []string{"quick"}})
	rc, err := r.Logs(ctx, q, true)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	if string(b) != "hi\n" {
		t.Errorf("logs %q", b)
	}
	if err := r.Remove(ctx, warm); err != nil {
		t.Fatal(err)
	}
	calls := r.Calls()
	if calls[0].Op != "Start" || !errors.Is(calls[0].Err, contract.ErrUnavailable) || calls[1].ID != warm {
		t.Errorf("calls: %+v", calls[:2])
	}
}

func TestOnFuncAndStartDelay(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	r := New(clk)
	r.OnCommand("plain", Behavior{})
	r.OnFunc(func(s contract.Spec) (Behavior, bool) {
		if s.Env["SLOW"] == "" {
			return Behavior{}, false
		}
		return Behavior{StartDelay: time.Minute, Duration: time.Hour, ExitCode: 7}, true
	})
	r.Default(Behavior{ExitCode: 9})
	ctx := context.Background()

	// A spec fn declines falls through to the default.
	id, err := r.Start(ctx, contract.Spec{Name: "other", Command: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if exit, err := r.Wait(ctx, id); err != nil || exit.Code != 9 {
		t.Fatalf("default: exit %+v, %v; want code 9", exit, err)
	}

	// Start blocks for the StartDelay on the clock; Duration counts after it.
	started := make(chan string, 1)
	go func() {
		id, err := r.Start(ctx, contract.Spec{Name: "slow", Command: []string{"x"}, Env: map[string]string{"SLOW": "1"}})
		if err != nil {
			t.Error(err)
		}
		started <- id
	}()
	waitFor(t, "Start waits on the clock", func() bool { return clk.Waiters() == 1 })
	select {
	case <-started:
		t.Fatal("Start returned before its StartDelay passed")
	default:
	}
	clk.Advance(time.Minute)
	slow := <-started
	waitFor(t, "the container's timer", func() bool { return clk.Waiters() == 1 })
	clk.Advance(time.Hour)
	exit, err := r.Wait(ctx, slow)
	if err != nil || exit.Code != 7 || !exit.StartedAt.Equal(time.Unix(1060, 0)) {
		t.Fatalf("slow: exit %+v, %v; want code 7, started at 1060", exit, err)
	}

	// A cancelled start creates nothing.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := r.Start(cctx, contract.Spec{Name: "cancelled", Env: map[string]string{"SLOW": "1"}})
		done <- err
	}()
	waitFor(t, "Start waits on the clock", func() bool { return clk.Waiters() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled start: %v, want context.Canceled", err)
	}
	cs, _ := r.List(ctx, nil)
	for _, c := range cs {
		if c.Name == "cancelled" {
			t.Fatal("a cancelled start left a container")
		}
	}
}
