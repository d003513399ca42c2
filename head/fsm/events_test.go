package fsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/internal/within"
)

// fmtEvents renders events compactly: "index/seq task-or-graph state".
func fmtEvents(evs []*wire.Event) string {
	var out []string
	for _, ev := range evs {
		if ev.TaskId != "" {
			out = append(out, fmt.Sprintf("%d/%d %s %s", ev.Index, ev.Seq, ev.TaskId,
				strings.TrimPrefix(ev.TaskState.String(), "TASK_STATE_")))
		} else {
			out = append(out, fmt.Sprintf("%d/%d %s %s", ev.Index, ev.Seq, ev.GraphId,
				strings.TrimPrefix(ev.GraphState.String(), "GRAPH_STATE_")))
		}
	}
	return strings.Join(out, ", ")
}

// threeEntries applies: 1 submit g1 (a, b<-a), 2 submit g2 (c), 3 cancel g1.
func threeEntries(t *testing.T, ring int) *testFSM {
	f := newTestFSM(t, ring)
	f.submit(graphSpec("g1", spec("a"), spec("b", "a")))
	f.submit(graphSpec("g2", spec("c")))
	f.ok(OpCancel, cancelGraph("g1", "stop"))
	return f
}

func TestEventsAfter(t *testing.T) {
	f := threeEntries(t, 0)
	const all = "1/0 g1 RUNNING, 1/1 g1/a QUEUED, 1/2 g1/b PENDING, 2/0 g2 RUNNING, 2/1 g2/c QUEUED, " +
		"3/0 g1/a CANCELLED, 3/1 g1/b CANCELLED, 3/2 g1 CANCELLED"
	tests := []struct {
		name  string
		after Cursor
		graph string
		limit int
		want  string
		next  Cursor
	}{
		{"all", Cursor{}, "", 100, all, Cursor{3, 2}},
		{"page", Cursor{1, 1}, "", 2, "1/2 g1/b PENDING, 2/0 g2 RUNNING", Cursor{2, 0}},
		{"end of entry", Cursor{1, 2}, "", 1, "2/0 g2 RUNNING", Cursor{2, 0}},
		{"graph filter moves past others", Cursor{}, "g2", 100, "2/0 g2 RUNNING, 2/1 g2/c QUEUED", Cursor{3, 2}},
		{"graph filter page", Cursor{}, "g1", 3, "1/0 g1 RUNNING, 1/1 g1/a QUEUED, 1/2 g1/b PENDING", Cursor{1, 2}},
		{"caught up", Cursor{3, 2}, "", 100, "", Cursor{3, 2}},
		{"ahead", Cursor{9, 0}, "", 100, "", Cursor{9, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, next, err := f.EventsAfter(tt.after, tt.graph, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmtEvents(evs); got != tt.want || next != tt.next {
				t.Fatalf("got %q next %v\nwant %q next %v", got, next, tt.want, tt.next)
			}
		})
	}
	evs, _, _ := f.EventsAfter(Cursor{2, 1}, "", 1)
	if ev := evs[0]; ev.UnixNanos != 500 || ev.Reason != "stop" || ev.GraphId != "g1" {
		t.Fatalf("cancel event %+v", ev)
	}
	if _, _, err := f.EventsAfter(Cursor{}, "", 0); errs.ClassOf(err) != errs.InvalidArgument {
		t.Fatalf("limit 0: %v", err)
	}
}

func TestEventsRingWraps(t *testing.T) {
	f := threeEntries(t, 4) // keeps 2/1 .. 3/2; 2/0 was the last dropped
	tests := []struct {
		after Cursor
		want  string
		err   errs.Class
	}{
		{Cursor{1, 2}, "", errs.OutOfRange},
		{Cursor{1, 0}, "", errs.OutOfRange},
		{Cursor{2, 0}, "2/1 g2/c QUEUED, 3/0 g1/a CANCELLED, 3/1 g1/b CANCELLED, 3/2 g1 CANCELLED", errs.Unknown},
		{Cursor{}, "2/1 g2/c QUEUED, 3/0 g1/a CANCELLED, 3/1 g1/b CANCELLED, 3/2 g1 CANCELLED", errs.Unknown},
		{Cursor{3, 0}, "3/1 g1/b CANCELLED, 3/2 g1 CANCELLED", errs.Unknown},
	}
	for _, tt := range tests {
		evs, _, err := f.EventsAfter(tt.after, "", 100)
		if errs.ClassOf(err) != tt.err || fmtEvents(evs) != tt.want {
			t.Errorf("after %v: got %q, %v; want %q, %v", tt.after, fmtEvents(evs), err, tt.want, tt.err)
		}
	}
}

func TestEventsAfterRestore(t *testing.T) {
	src := threeEntries(t, 0)
	f := newTestFSM(t, 0)
	f.submit(graphSpec("old", spec("x")))
	ch := f.Changed()
	if err := f.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, src.View()))}); err != nil {
		t.Fatal(err)
	}
	within.Recv(t, 10*time.Second, ch, "Changed's channel to be closed by the restore")
	if _, _, err := f.EventsAfter(Cursor{1, 0}, "", 10); errs.ClassOf(err) != errs.OutOfRange {
		t.Fatalf("old cursor after restore: %v", err)
	}
	if _, _, err := f.EventsAfter(Cursor{3, 1}, "", 10); errs.ClassOf(err) != errs.OutOfRange {
		t.Fatalf("cursor inside the restored entry: %v", err)
	}
	evs, next, err := f.EventsAfter(Cursor{}, "", 10)
	if err != nil || len(evs) != 0 || next != (Cursor{3, math.MaxUint32}) {
		t.Fatalf("from the start: %v %v %v", evs, next, err)
	}
	if f.AppliedIndex() != 3 || f.LastCursor() != next {
		t.Fatalf("applied %d last %v", f.AppliedIndex(), f.LastCursor())
	}
	f.index = 3
	f.ok(OpCancel, cancelGraph("g2", "later"))
	evs, _, err = f.EventsAfter(next, "", 10)
	if err != nil || fmtEvents(evs) != "4/0 g2/c CANCELLED, 4/1 g2 CANCELLED" {
		t.Fatalf("after restore: %q %v", fmtEvents(evs), err)
	}
}

func TestChangedAndWaitForIndex(t *testing.T) {
	f := newTestFSM(t, 0)
	ch := f.Changed()
	select {
	case <-ch:
		t.Fatal("closed before any apply")
	default:
	}
	done := make(chan error, 1)
	go func() { done <- f.WaitForIndex(context.Background(), 2) }()
	f.submit(graphSpec("g1", spec("a")))
	within.Recv(t, 10*time.Second, ch, "Changed's channel to be closed by an apply")
	if ch2 := f.Changed(); ch2 == ch {
		t.Fatal("channel not replaced")
	}
	f.submit(graphSpec("g2", spec("a")))
	if err := within.Recv(t, 10*time.Second, done, "WaitForIndex(2) to return once index 2 is applied"); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitForIndex(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.WaitForIndex(ctx, 3); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
}

// A watch of one graph gets what a scan of every retained event gives,
// events, next cursor and error alike, for every cursor and graph, while
// the ring wraps and graphs' newest events leave it (EventsAfter skips
// the scan when its graph has nothing after the cursor).
func TestEventsAfterOneGraphMatchesScan(t *testing.T) {
	f := &FSM{ring: newRing(7)}
	graphs := []string{"a", "b", "c", ""} // "" is an event of no graph
	scan := func(after Cursor, graphID string, limit int) ([]*wire.Event, Cursor, error) {
		r := &f.ring
		next := after
		if after.Less(r.floor) {
			if after != (Cursor{}) {
				return nil, after, errs.New(errs.OutOfRange, "out of range")
			}
			next = r.floor
		}
		var out []*wire.Event
		for i := 0; i < r.n && len(out) < limit; i++ {
			ev := r.at(i)
			if !after.Less(cursorOf(ev)) {
				continue
			}
			next = cursorOf(ev)
			if graphID == "" || ev.GraphId == graphID {
				out = append(out, ev)
			}
		}
		return out, next, nil
	}
	var pushed []Cursor
	for n := range 40 {
		// Graph "c" stops after 10 events: its newest leaves the ring.
		g := graphs[(n*7+n/3)%4]
		if g == "c" && n > 10 {
			g = "a"
		}
		ev := &wire.Event{Index: uint64(n/3 + 1), Seq: uint32(n % 3), GraphId: g}
		f.ring.push(ev)
		pushed = append(pushed, cursorOf(ev))
		cursors := append([]Cursor{{}}, pushed...)
		for _, after := range cursors {
			for _, g := range []string{"a", "b", "c", "d"} {
				for _, limit := range []int{1, 100} {
					got, gotNext, gotErr := f.EventsAfter(after, g, limit)
					want, wantNext, wantErr := scan(after, g, limit)
					if fmtEvents(got) != fmtEvents(want) || errs.ClassOf(gotErr) != errs.ClassOf(wantErr) ||
						(gotErr == nil && len(want) == 0 && gotNext != wantNext) {
						t.Fatalf("after %d pushes, graph %q after %v limit %d: got %q next %v err %v; want %q next %v err %v",
							n+1, g, after, limit, fmtEvents(got), gotNext, gotErr, fmtEvents(want), wantNext, wantErr)
					}
				}
			}
		}
	}
	if _, ok := f.ring.last["c"]; ok {
		t.Error("graph c's newest event left the ring but its entry stayed")
	}
}

// An event batch's plan is applied after its events from rules 9, in its
// entry (each placement checked: one on a worker without room is skipped),
// and ignored below; SpeculateEvents shows the batch's outcome without
// changing the table it forked.
func TestEventsPlan(t *testing.T) {
	for _, rules := range []uint64{RulesEventPlan - 1, RulesEventPlan} {
		t.Run(fmt.Sprint("rules ", rules), func(t *testing.T) {
			f := newTestFSM(t, 0)
			f.ok(OpSetRules, wrapperspb.UInt64(rules))
			f.ok(OpWorkerUpsert, &wire.WorkerUpsertCommand{UnixNanos: 1, Info: &wire.WorkerInfo{Id: "w1",
				Capacity: &wire.Resources{CpuMillis: 1000, MemoryBytes: 1 << 30}}})
			g := graphSpec("g", spec("a"), spec("b"), spec("c"))
			for _, s := range g.Tasks {
				s.Resources = &wire.Resources{CpuMillis: 1000}
			}
			f.ok(OpSubmitGraph, submitCmd(g, 2))
			f.ok(OpPlan, &wire.PlanCommand{LeaderTerm: 3, UnixNanos: 3, Attempts: []*wire.PlannedAttempt{{TaskId: "g/a", Attempt: 1, WorkerId: "w1"}}})
			f.ok(OpTaskEvents, &wire.TaskEventsCommand{WorkerId: "w1", UnixNanos: 4, Events: []*wire.AttemptEvent{ev("g/a", 1, kStarted)}})
			cmd := &wire.TaskEventsCommand{WorkerId: "w1", UnixNanos: 5, Events: []*wire.AttemptEvent{exited("g/a", 1, 0, "")}}
			before := f.View()
			after, err := SpeculateEvents(before, cmd)
			if err != nil {
				t.Fatal(err)
			}
			if before.Task("g/a").State != wire.TaskState_TASK_STATE_RUNNING || f.View().Task("g/a").State != wire.TaskState_TASK_STATE_RUNNING ||
				after.Task("g/a").State != wire.TaskState_TASK_STATE_SUCCEEDED {
				t.Fatal("SpeculateEvents: want g/a's end in its view only, not in the view it forked or the FSM's")
			}
			cmd.Plan = &wire.PlanCommand{LeaderTerm: 3, UnixNanos: 5, Attempts: []*wire.PlannedAttempt{
				{TaskId: "g/b", Attempt: 1, WorkerId: "w1"}, {TaskId: "g/c", Attempt: 1, WorkerId: "w1"}}}

			res := f.ok(OpTaskEvents, cmd).(*TaskEventsResult)
			a, b, c := f.task("g/a"), f.task("g/b"), f.task("g/c")
			if a.State != wire.TaskState_TASK_STATE_SUCCEEDED || res.Applied != 1 {
				t.Fatalf("g/a %s, %d events applied; want SUCCEEDED by the batch's one event", a.State, res.Applied)
			}
			if rules < RulesEventPlan {
				if res.Plan != nil || b.State != wire.TaskState_TASK_STATE_QUEUED || c.State != wire.TaskState_TASK_STATE_QUEUED {
					t.Fatalf("under rules %d: plan result %+v, g/b %s, g/c %s; want the plan ignored", rules, res.Plan, b.State, c.State)
				}
				return
			}
			if b.State != wire.TaskState_TASK_STATE_ASSIGNED || b.Attempts[0].AssignUnixNanos != 5 || b.Attempts[0].LeaderTerm != 3 {
				t.Fatalf("g/b: %s %+v; want ASSIGNED by the batch's plan at 5, term 3, in the room g/a's end freed", b.State, b.Attempts)
			}
			if c.State != wire.TaskState_TASK_STATE_QUEUED || !strings.Contains(res.Plan.Skipped["g/c"], "lacks") {
				t.Fatalf("g/c: %s, skipped %q; want QUEUED, skipped for want of room", c.State, res.Plan.Skipped["g/c"])
			}
		})
	}
}
