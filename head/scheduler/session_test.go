package scheduler

import (
	"testing"

	"github.com/megaflow/megaflow/internal/resources"
)

func TestSessionAffinity(t *testing.T) {
	cpu := func(m int64) resources.Resources { return resources.Resources{CPUMillis: m, MemoryBytes: gi} }
	workers := func() []Worker {
		return []Worker{
			{ID: "w1", Capacity: resources.Resources{CPUMillis: 4000, MemoryBytes: 16 * gi}},
			{ID: "w2", Capacity: resources.Resources{CPUMillis: 4000, MemoryBytes: 16 * gi}, Allocated: cpu(3000)},
		}
	}
	where := func(p Plan) map[string]string {
		m := map[string]string{}
		for _, pl := range p.Placements {
			m[pl.TaskID] = pl.WorkerID
		}
		return m
	}

	// A pinned task goes to its worker although spread prefers w1.
	in := Input{Workers: workers(), Tasks: []Task{
		{ID: "g/eval", Session: "s1", PinnedWorker: "w2", Resources: cpu(1000), QueueSeq: 1},
	}}
	if got := where(Place(in))["g/eval"]; got != "w2" {
		t.Errorf("pinned task placed on %q, want w2", got)
	}

	// No room there: it waits with the session's reason, although w1 is free.
	in.Tasks[0].Resources = cpu(2000)
	p := Place(in)
	if len(p.Placements) != 0 {
		t.Fatalf("placements %v, want none", p.Placements)
	}
	if r := p.Unplaced["g/eval"]; r.Message != "waiting for session s1's worker w2" || r.Kind != ReasonCapacity {
		t.Errorf("reason %v %q", r.Kind, r.Message)
	}

	// A pin to a worker that is gone pins nothing.
	in.Tasks[0].PinnedWorker = "w9"
	if got := where(Place(in))["g/eval"]; got != "w1" {
		t.Errorf("task pinned to a dead worker placed on %q, want w1", got)
	}

	// Unpinned tasks of one session placed in one round share a worker;
	// another graph's session of the same name does not.
	in = Input{Workers: workers(), Tasks: []Task{
		{ID: "g/a", Session: "s1", Resources: cpu(500), QueueSeq: 1},
		{ID: "g/b", Session: "s1", Resources: cpu(500), QueueSeq: 2},
		{ID: "g/c", Session: "s1", Resources: cpu(500), QueueSeq: 3},
		{ID: "h/a", Session: "s1", Resources: cpu(500), QueueSeq: 4},
	}}
	m := where(Place(in))
	if m["g/a"] == "" || m["g/b"] != m["g/a"] || m["g/c"] != m["g/a"] {
		t.Errorf("session s1 of g split: %v", m)
	}
	if m["h/a"] == "" {
		t.Errorf("h/a not placed: %v", m)
	}
}

func TestPinSessions(t *testing.T) {
	ts := []Task{
		{ID: "g/eval", Session: "s1"},
		{ID: "g/other", Session: "s2"},
		{ID: "h/eval", Session: "s1"},
		{ID: "g/plain"},
	}
	PinSessions(ts, []SessionAttempt{
		{Graph: "g", Session: "s1", WorkerID: "w1", Order: 10},
		{Graph: "g", Session: "s1", WorkerID: "w2", Order: 20}, // the latest wins
		{Graph: "h", Session: "s9", WorkerID: "w3", Order: 30},
	})
	want := []string{"w2", "", "", ""}
	for i, tk := range ts {
		if tk.PinnedWorker != want[i] {
			t.Errorf("%s pinned to %q, want %q", tk.ID, tk.PinnedWorker, want[i])
		}
	}
}

// A task pinned to its session's worker runs in the session's container:
// the worker's start cap, full of starts waiting for pool room, does not
// hold it back (else those starts and the session would wait on each
// other), while a new task is held by the cap.
func TestSessionContinuationIgnoresStartCap(t *testing.T) {
	w := Worker{ID: "w1", Capacity: resources.Resources{CPUMillis: 8000, MemoryBytes: 16 * gi},
		StartsInFlight: 4, MaxConcurrentStarts: 4}
	in := Input{Workers: []Worker{w}, Tasks: []Task{
		{ID: "g/rollout-0", Session: "s0", PinnedWorker: "w1", Resources: resources.Resources{CPUMillis: 500}, QueueSeq: 1},
		{ID: "g/setup-9", Session: "s9", Resources: resources.Resources{CPUMillis: 500}, QueueSeq: 2},
	}}
	p := Place(in)
	if len(p.Placements) != 1 || p.Placements[0].TaskID != "g/rollout-0" {
		t.Fatalf("placements %v, want only the session's continuation", p.Placements)
	}
	if r := p.Unplaced["g/setup-9"]; r.Kind != ReasonStartLimit {
		t.Fatalf("new task's reason %v %q, want the start limit", r.Kind, r.Message)
	}
}
