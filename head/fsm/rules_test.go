package fsm

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/wire"
)

// Under rules 0 a failed attempt with retries left re-queues the task not
// before the leader's precomputed backoff (retry_backoff_nanos); the
// seed and parameters of rules 1 are ignored; a lost attempt re-queues it
// at once.
func TestRetryBackoffUnderRules0(t *testing.T) {
	f := newTestFSM(t, 0)
	f.upsert("w1", 64000, 64, 0)
	f.submit(graphSpec("g", retries(rspec("a", 1000, 1, 0), 3)))
	f.place(pa("g/a", 1, "w1"))
	at := f.now()
	f.ok(OpTaskEvents, &wire.TaskEventsCommand{WorkerId: "w1", UnixNanos: at,
		Events: []*wire.AttemptEvent{exited("g/a", 1, 3, "")}, RetryBackoffNanos: []int64{5000},
		RetrySeed: 7, RetryBackoffBaseNanos: int64(time.Second), RetryBackoffMaxNanos: int64(time.Minute)})
	if a := f.task("g/a"); a.State != wire.TaskState_TASK_STATE_QUEUED || a.NotBeforeUnixNanos != at+5000 || a.RetriesUsed != 1 {
		t.Fatalf("task %s not before %d retries %d; want QUEUED not before %d", a.State, a.NotBeforeUnixNanos, a.RetriesUsed, at+5000)
	}
	if w := f.task("g/a").ToWire(); w.NotBeforeUnixNanos != at+5000 {
		t.Fatalf("wire not_before %d", w.NotBeforeUnixNanos)
	}
	f.place(pa("g/a", 2, "w1"))
	f.lost("gone", pa("g/a", 2, "w1"))
	if a := f.task("g/a"); a.State != wire.TaskState_TASK_STATE_QUEUED || a.NotBeforeUnixNanos != at+5000 {
		t.Fatalf("after a loss: %s not before %d (the loss adds no wait)", a.State, a.NotBeforeUnixNanos)
	}
	// Without retry_backoff_nanos (a leader of rules 1 while the cluster is
	// still at 0): no wait, whatever the seed says.
	f.place(pa("g/a", 3, "w1"))
	f.ok(OpTaskEvents, taskEventsCmd("w1", f.now(), 7, exited("g/a", 3, 1, "")))
	if a := f.task("g/a"); a.State != wire.TaskState_TASK_STATE_QUEUED || a.NotBeforeUnixNanos != 0 {
		t.Fatalf("without backoff: %s not before %d", a.State, a.NotBeforeUnixNanos)
	}
}

// taskEventsCmd is a rules-1 command: seed, base 1 s, max 8 s.
func taskEventsCmd(worker string, at int64, seed uint64, evs ...*wire.AttemptEvent) *wire.TaskEventsCommand {
	return &wire.TaskEventsCommand{WorkerId: worker, UnixNanos: at, Events: evs,
		RetrySeed: seed, RetryBackoffBaseNanos: int64(time.Second), RetryBackoffMaxNanos: int64(8 * time.Second)}
}

// From rules 1 the FSM computes each retry's wait from the task's own
// retries used, the command's base and max, and a draw from its seed and
// the event's position: doubling, capped, ±20%, only for an event that does
// send its task back, and the same on every head.
func TestRetryBackoffUnderRules1(t *testing.T) {
	run := func() (*testFSM, []time.Duration) {
		f := newTestFSM(t, 0)
		if got := f.ok(OpSetRules, wrapperspb.UInt64(1)); got != uint64(1) {
			t.Fatalf("SetRules 1 answered %v", got)
		}
		f.upsert("w1", 64000, 64, 0)
		f.submit(graphSpec("g", retries(rspec("a", 1000, 1, 0), 5), rspec("b", 1000, 1, 0)))
		var waits []time.Duration
		for n := uint32(1); n <= 6; n++ {
			f.place(pa("g/a", n, "w1"))
			at := f.now()
			// retry_backoff_nanos is ignored under rules 1.
			cmd := taskEventsCmd("w1", at, 42, exited("g/a", n, 1, ""))
			cmd.RetryBackoffNanos = []int64{1}
			f.ok(OpTaskEvents, cmd)
			a := f.task("g/a")
			if n == 6 {
				if a.State != wire.TaskState_TASK_STATE_FAILED {
					t.Fatalf("last failure: %s; want FAILED", a.State)
				}
				break
			}
			want := state.RetryBackoff{Base: int64(time.Second), Max: int64(8 * time.Second), Draw: splitmix64(42)}.Wait(n - 1)
			if a.State != wire.TaskState_TASK_STATE_QUEUED || a.NotBeforeUnixNanos != at+want {
				t.Fatalf("failure %d: %s not before %d; want QUEUED not before %d", n, a.State, a.NotBeforeUnixNanos, at+want)
			}
			waits = append(waits, time.Duration(a.NotBeforeUnixNanos-at))
		}
		return f, waits
	}
	f1, waits := run()
	nominal := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}
	for i, w := range waits {
		if lo, hi := nominal[i]*4/5, nominal[i]*6/5; w < lo || w >= hi {
			t.Errorf("retry %d waits %v; want within [%v, %v)", i+1, w, lo, hi)
		}
	}
	f2, _ := run()
	if d := DiffDumps(dump(t, f1.View()), dump(t, f2.View()), 10); d != "" {
		t.Fatalf("the same log gave two tables:\n%s", d)
	}

	// The draw depends on the event's position in the batch.
	f := newTestFSM(t, 0)
	f.ok(OpSetRules, wrapperspb.UInt64(1))
	f.upsert("w1", 64000, 64, 0)
	f.submit(graphSpec("g", retries(rspec("a", 1000, 1, 0), 1), retries(rspec("b", 1000, 1, 0), 1)))
	f.place(pa("g/a", 1, "w1"), pa("g/b", 1, "w1"))
	at := f.now()
	f.ok(OpTaskEvents, taskEventsCmd("w1", at, 42, exited("g/a", 1, 1, ""), exited("g/b", 1, 1, "")))
	for i, id := range []string{"g/a", "g/b"} {
		want := state.RetryBackoff{Base: int64(time.Second), Max: int64(8 * time.Second), Draw: splitmix64(42 + uint64(i))}.Wait(0)
		if got := f.task(id).NotBeforeUnixNanos - at; got != want {
			t.Errorf("%s (event %d) waits %d; want %d", id, i, got, want)
		}
	}
}

// The rules version only grows, is kept by snapshots, and a version above
// this build's stops the head (a panic, as for any entry it cannot apply)
// with the table untouched; a snapshot under such a version is refused.
func TestSetRules(t *testing.T) {
	f := newTestFSM(t, 0)
	if r := f.View().Rules(); r != 0 {
		t.Fatalf("a new table is at rules %d; want 0", r)
	}
	for _, tc := range []struct{ set, want uint64 }{{1, 1}, {0, 1}, {1, 1}} {
		if got := f.ok(OpSetRules, wrapperspb.UInt64(tc.set)); got != tc.want {
			t.Fatalf("SetRules %d answered %v; want %d", tc.set, got, tc.want)
		}
	}
	f.upsert("w1", 64000, 64, 0)

	before, index := dump(t, f.View()), f.AppliedIndex()
	msg := func() (msg string) {
		defer func() { msg = fmt.Sprint(recover()) }()
		f.apply(OpSetRules, wrapperspb.UInt64(RulesCurrent+1))
		return ""
	}()
	if !strings.HasPrefix(msg, ErrRulesTooNew) || !strings.Contains(msg, fmt.Sprintf("rules %d", RulesCurrent+1)) || !strings.Contains(msg, "upgrade") {
		t.Fatalf("SetRules %d panicked with %q; want %q naming the version and saying to upgrade", RulesCurrent+1, msg, ErrRulesTooNew)
	}
	if after := dump(t, f.View()); after != before || f.AppliedIndex() != index {
		t.Fatalf("the refused version changed the table (index %d -> %d):\n%s", index, f.AppliedIndex(), DiffDumps(before, after, 10))
	}

	// A table under rules 0 snapshots with the header every build reads;
	// one under a later version with a header builds from before rules
	// versions refuse, so that none of them installs it and goes on under
	// rules 0.
	if snap := snapshotBytes(t, newTestFSM(t, 0).View()); !bytes.HasPrefix(snap, []byte(snapshotMagic)) {
		t.Fatalf("a rules-0 snapshot starts %q; want %q", snap[:len(snapshotMagic)], snapshotMagic)
	}
	if snap := snapshotBytes(t, f.View()); !bytes.HasPrefix(snap, []byte(snapshotMagicRules)) {
		t.Fatalf("a rules-1 snapshot starts %q; want %q", snap[:len(snapshotMagicRules)], snapshotMagicRules)
	}
	// Snapshots carry the version.
	dst := newTestFSM(t, 0)
	if err := dst.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, f.View()))}); err != nil {
		t.Fatal(err)
	}
	if r := dst.View().Rules(); r != 1 {
		t.Fatalf("restored rules %d; want 1", r)
	}
	// A snapshot under a version above this build's is refused.
	txn := f.store.WriteTxn(f.index + 1)
	txn.SetRules(RulesCurrent + 1)
	txn.Commit()
	err := newTestFSM(t, 0).Restore(nopCloser{bytes.NewReader(snapshotBytes(t, f.View()))})
	if err == nil || !strings.Contains(err.Error(), ErrRulesTooNew) {
		t.Fatalf("restoring a snapshot under rules %d: %v; want %q", RulesCurrent+1, err, ErrRulesTooNew)
	}
}
