package fsm

import (
	"slices"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/wire"
)

// A gang's placements apply all together or not at all: the plan must
// place every task of the gang, one worker each, each placement valid.
func TestPlanPlacesGangsWhole(t *testing.T) {
	gangSpec := func(name string, cpu int64) *wire.TaskSpec {
		s := rspec(name, cpu, 1, 0)
		s.Gang = "train"
		return s
	}
	setup := func(t *testing.T) *testFSM {
		f := newTestFSM(t, 0)
		f.submit(graphSpec("g", gangSpec("r0", 1000), gangSpec("r1", 1000), gangSpec("r2", 3000), rspec("solo", 100, 1, 0)))
		f.upsert("w1", 4000, 8, 0)
		f.upsert("w2", 4000, 8, 0)
		f.upsert("w3", 2000, 8, 0)
		return f
	}
	for _, c := range []struct {
		name    string
		plan    []*wire.PlannedAttempt
		applied string
		skipped string // the error of every gang task skipped
	}{
		{name: "whole gang", plan: []*wire.PlannedAttempt{pa("g/r0", 1, "w1"), pa("g/solo", 1, "w3"), pa("g/r1", 1, "w3"), pa("g/r2", 1, "w2")},
			applied: "g/r0 g/r1 g/r2 g/solo"},
		{name: "part of the gang", plan: []*wire.PlannedAttempt{pa("g/r0", 1, "w1"), pa("g/r1", 1, "w2"), pa("g/solo", 1, "w3")},
			applied: "g/solo", skipped: `gang "train" of graph "g": the plan places 2 of its 3 tasks; a gang is placed whole`},
		{name: "two on one worker", plan: []*wire.PlannedAttempt{pa("g/r0", 1, "w1"), pa("g/r1", 1, "w1"), pa("g/r2", 1, "w2")},
			skipped: `gang "train" of graph "g": tasks "g/r0" and "g/r1" both placed on worker "w1"; a gang takes one worker per task`},
		{name: "one does not fit", plan: []*wire.PlannedAttempt{pa("g/r0", 1, "w1"), pa("g/r1", 1, "w2"), pa("g/r2", 1, "w3")},
			skipped: `gang "train" of graph "g": worker "w3" lacks`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t)
			res := f.plan(c.plan...)
			applied := strings.Join(slices.Sorted(slices.Values(res.Applied)), " ")
			if applied != c.applied {
				t.Fatalf("applied %q; want %q (skipped %v)", applied, c.applied, res.Skipped)
			}
			for _, p := range c.plan {
				id := p.GetTaskId()
				if id == "g/solo" {
					continue
				}
				err, skipped := res.Skipped[id]
				if c.skipped == "" && skipped || c.skipped != "" && !strings.Contains(err, c.skipped) {
					t.Fatalf("%s skipped %q; want %q", id, err, c.skipped)
				}
				if c.skipped != "" && f.task(id).State != wire.TaskState_TASK_STATE_QUEUED {
					t.Fatalf("%s %v after a refused gang", id, f.task(id).State)
				}
			}
			f.accountingOK()
		})
	}
}
