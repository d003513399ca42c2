package fsm

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/wire"
)

// logGen generates a random but valid-looking command log: submissions
// (some chunked, some resent, some with a chunk lost, some conflicting),
// cancels of graphs and tasks (known or not) and staging drops.
type logGen struct {
	rng    *rand.Rand
	tb     testing.TB
	graphs []*wire.GraphSpec
	nanos  int64
}

func (g *logGen) randomGraph(id string) *wire.GraphSpec {
	n := 1 + g.rng.Intn(12)
	gs := &wire.GraphSpec{Id: id, Tenant: []string{"", "acme", "beta"}[g.rng.Intn(3)], Priority: int32(g.rng.Intn(3))}
	for i := range n {
		s := spec(fmt.Sprintf("t%d", i))
		s.Type = []string{"", "eval", "train"}[g.rng.Intn(3)]
		s.Priority = int32(g.rng.Intn(3))
		s.RunOnUpstreamFailure = g.rng.Intn(5) == 0
		s.Env = map[string]string{"K": fmt.Sprint(g.rng.Intn(3)), "B": "x"}
		for j := range i {
			if g.rng.Intn(4) == 0 {
				s.DependsOn = append(s.DependsOn, fmt.Sprintf("t%d", j))
			}
		}
		gs.Tasks = append(gs.Tasks, s)
	}
	return gs
}

func (g *logGen) entries(n int) [][]byte {
	var out [][]byte
	for len(out) < n {
		g.nanos += int64(g.rng.Intn(1000))
		switch k := g.rng.Intn(10); {
		case k < 4 || len(g.graphs) == 0: // a new graph
			gs := g.randomGraph(fmt.Sprintf("g%d", len(g.graphs)))
			g.graphs = append(g.graphs, gs)
			cmds := chunkCmds(gs, 1+g.rng.Intn(5), g.nanos)
			lose := len(cmds) > 1 && g.rng.Intn(6) == 0
			abandon := len(cmds) > 1 && g.rng.Intn(6) == 0 // stays staged
			for i, c := range cmds {
				if (lose && i == 0) || (abandon && i == len(cmds)-1) {
					continue
				}
				out = append(out, entry(g.tb, OpSubmitGraph, c))
				if g.rng.Intn(8) == 0 { // a resent chunk
					out = append(out, entry(g.tb, OpSubmitGraph, c))
				}
			}
		case k == 4: // resubmit or conflict with an existing graph
			gs := g.graphs[g.rng.Intn(len(g.graphs))]
			if g.rng.Intn(2) == 0 {
				gs = g.randomGraph(gs.Id)
			}
			out = append(out, entry(g.tb, OpSubmitGraph, submitCmd(gs, g.nanos)))
		case k < 7: // cancel a task, maybe unknown
			gs := g.graphs[g.rng.Intn(len(g.graphs))]
			id := fmt.Sprintf("%s/t%d", gs.Id, g.rng.Intn(len(gs.Tasks)+1))
			out = append(out, entry(g.tb, OpCancel, &wire.CancelCommand{TaskId: id, Reason: "r", UnixNanos: g.nanos}))
		case k < 9: // cancel a graph, maybe unknown
			id := fmt.Sprintf("g%d", g.rng.Intn(len(g.graphs)+1))
			out = append(out, entry(g.tb, OpCancel, &wire.CancelCommand{GraphId: id, UnixNanos: g.nanos}))
		default: // the sweeper
			out = append(out, entry(g.tb, OpDropStaged, &wire.DropStagedCommand{
				GraphIds: []string{fmt.Sprintf("g%d", g.rng.Intn(len(g.graphs)))}, UnixNanos: g.nanos}))
		}
		if g.rng.Intn(50) == 0 { // an op from a newer version
			out = append(out, []byte{byte(OpIgnorable | 0x10), 1, 2, 3})
		}
	}
	return out
}

func applyAll(f *testFSM, entries [][]byte, batched bool, rng *rand.Rand) {
	for i := 0; i < len(entries); {
		n := 1
		if batched {
			n = 1 + rng.Intn(8)
		}
		var logs []*raft.Log
		for ; n > 0 && i < len(entries); n-- {
			f.index++
			logs = append(logs, &raft.Log{Index: f.index, Type: raft.LogCommand, Data: entries[i]})
			i++
		}
		if batched {
			f.ApplyBatch(logs)
		} else {
			f.Apply(logs[0])
		}
	}
}

// TestDeterminism applies the same random log to two FSMs (one entry at a
// time and in batches) and checks equal tables and events; then restores a
// third from a snapshot of the first and checks it equal, before and after
// more entries.
func TestDeterminism(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			gen := &logGen{rng: rand.New(rand.NewSource(seed)), tb: t}
			first := gen.entries(300)
			a, b := newTestFSM(t, 0), newTestFSM(t, 0)
			applyAll(a, first, false, nil)
			applyAll(b, first, true, rand.New(rand.NewSource(seed)))
			checkInvariants(t, a.View())
			da, db := dump(t, a.View()), dump(t, b.View())
			if d := firstDiff(da, db); d != "" {
				t.Fatalf("tables differ: %s", d)
			}
			if a.View().Index() != b.View().Index() || a.AppliedIndex() != b.AppliedIndex() {
				t.Fatal("indexes differ")
			}
			ea, _, _ := a.EventsAfter(Cursor{}, "", 1<<20)
			eb, _, _ := b.EventsAfter(Cursor{}, "", 1<<20)
			if fmtEvents(ea) != fmtEvents(eb) || len(ea) == 0 {
				t.Fatal("events differ")
			}

			snap := snapshotBytes(t, a.View())
			c := newTestFSM(t, 0)
			if err := c.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
				t.Fatal(err)
			}
			c.index = a.index
			if d := firstDiff(da, dump(t, c.View())); d != "" {
				t.Fatalf("restored table differs: %s", d)
			}
			if !bytes.Equal(snap, snapshotBytes(t, c.View())) {
				t.Fatal("snapshot of the restored table differs")
			}

			more := gen.entries(100)
			applyAll(a, more, false, nil)
			applyAll(c, more, true, rand.New(rand.NewSource(seed)))
			if d := firstDiff(dump(t, a.View()), dump(t, c.View())); d != "" {
				t.Fatalf("after more entries: %s", d)
			}
		})
	}
}

// checkInvariants checks what every table must satisfy: graph counts match
// their tasks, a graph is terminal exactly when its tasks are, dependencies
// agree with states.
func checkInvariants(t *testing.T, v *state.View) {
	t.Helper()
	for g := range v.Graphs() {
		var counts state.StateCounts
		tasks := v.TasksOfGraph(g.ID)
		allDone := true
		for _, task := range tasks {
			counts[task.State]++
			allDone = allDone && state.IsTerminal(task.State)
			switch task.State {
			case pending:
				if task.DepsRemaining == 0 {
					t.Errorf("%s: PENDING without dependencies", task.ID)
				}
			case queued:
				if task.DepsRemaining != 0 || task.QueueSeq == 0 {
					t.Errorf("%s: QUEUED with deps %d seq %d", task.ID, task.DepsRemaining, task.QueueSeq)
				}
			}
		}
		if counts != g.Counts || int(g.TaskCount) != len(tasks) {
			t.Errorf("%s: counts %v, tasks say %v", g.ID, g.Counts, counts)
		}
		if allDone != state.IsGraphTerminal(g.State) {
			t.Errorf("%s: %s with all tasks terminal = %v", g.ID, g.State, allDone)
		}
	}
}
