package fsm

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// OpSandboxPause: refused below rules 4, changing nothing; under 4 it
// marks the running attempt of a RUNNING sandbox paused and unmarks it
// (the same mark twice changes nothing, result false), and refuses,
// changing nothing, an unknown graph, a graph that is no sandbox, a
// sandbox not started yet, a wrong attempt, and a sandbox that ended.
// The mark survives a snapshot and restore.
func TestSandboxPause(t *testing.T) {
	f := newTestFSM(t, 0)
	f.ok(OpSetRules, wrapperspb.UInt64(3))
	f.upsert("w1", 64000, 64, 0)
	box := rspec("box", 1000, 1, 0)
	box.Sandbox = &wire.SandboxSpec{IdleTimeoutSeconds: 60}
	f.submit(graphSpec("sbx-a", box))
	waiting := rspec("box", 1000, 1, 0)
	waiting.Sandbox = &wire.SandboxSpec{}
	f.submit(graphSpec("sbx-b", waiting))
	f.submit(graphSpec("plain", rspec("box", 1000, 1, 0)))
	f.place(pa("sbx-a/box", 1, "w1"), pa("plain/box", 1, "w1"))
	f.report("w1", ev("sbx-a/box", 1, kStarted), ev("plain/box", 1, kStarted))
	pause := func(id string, attempt uint32, paused bool) *wire.SandboxPauseCommand {
		return &wire.SandboxPauseCommand{GraphId: id, Attempt: attempt, Paused: paused, UnixNanos: f.now()}
	}
	paused := func() bool { return f.task("sbx-a/box").Attempts[0].Paused }

	before := dump(t, f.View())
	if e := f.refused(errs.FailedPrecondition, OpSandboxPause, pause("sbx-a", 1, true)); !bytes.Contains([]byte(e.Message), []byte("rules 4")) {
		t.Fatalf("below rules 4: %v; want a refusal naming rules 4", e)
	}
	if d := firstDiff(before, dump(t, f.View())); d != "" {
		t.Fatalf("a refused pause changed the table: %s", d)
	}

	f.ok(OpSetRules, wrapperspb.UInt64(4))
	if got := f.ok(OpSandboxPause, pause("sbx-a", 1, true)); got != true || !paused() {
		t.Fatalf("pause: %v, paused %v; want true, paused", got, paused())
	}
	if m := f.task("sbx-a/box").ModifyIndex; m != f.index {
		t.Fatalf("the paused task's modify index %d; want %d", m, f.index)
	}
	if got := f.ok(OpSandboxPause, pause("sbx-a", 1, true)); got != false || !paused() {
		t.Fatalf("a second pause: %v; want false (nothing changed), still paused", got)
	}

	before = dump(t, f.View())
	for name, tc := range map[string]struct {
		cmd   *wire.SandboxPauseCommand
		class errs.Class
	}{
		"unknown sandbox":   {pause("sbx-none", 1, false), errs.NotFound},
		"not a sandbox":     {pause("plain", 1, false), errs.FailedPrecondition},
		"not started":       {pause("sbx-b", 1, true), errs.FailedPrecondition},
		"wrong attempt":     {pause("sbx-a", 2, false), errs.FailedPrecondition},
		"attempt 0":         {pause("sbx-a", 0, false), errs.FailedPrecondition},
		"not started again": {pause("sbx-b", 0, false), errs.FailedPrecondition},
	} {
		if e := f.refused(tc.class, OpSandboxPause, tc.cmd); e == nil {
			t.Fatalf("%s: not refused", name)
		}
	}
	if d := firstDiff(before, dump(t, f.View())); d != "" {
		t.Fatalf("refused pauses changed the table: %s", d)
	}

	dst := newTestFSM(t, 0)
	if err := dst.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, f.View()))}); err != nil {
		t.Fatal(err)
	}
	if d := firstDiff(dump(t, f.View()), dump(t, dst.View())); d != "" || !dst.task("sbx-a/box").Attempts[0].Paused {
		t.Fatalf("restored table differs (%s) or lost the mark", d)
	}

	if got := f.ok(OpSandboxPause, pause("sbx-a", 1, false)); got != true || paused() {
		t.Fatalf("resume: %v, paused %v; want true, not paused", got, paused())
	}
	if got := f.ok(OpSandboxPause, pause("sbx-a", 1, false)); got != false {
		t.Fatalf("a second resume: %v; want false", got)
	}
	f.ok(OpSandboxPause, pause("sbx-a", 1, true))
	f.ok(OpCancel, &wire.CancelCommand{GraphId: "sbx-a", Reason: "closed", UnixNanos: f.now()})
	f.refused(errs.FailedPrecondition, OpSandboxPause, pause("sbx-a", 1, false))
	f.accountingOK()
}
