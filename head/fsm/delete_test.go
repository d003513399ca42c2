package fsm

import (
	"testing"

	"github.com/hashicorp/raft"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// batch applies commands as one ApplyBatch at the next indexes.
func (f *testFSM) batch(cmds ...[]byte) []any {
	f.tb.Helper()
	logs := make([]*raft.Log, len(cmds))
	for i, c := range cmds {
		f.index++
		logs[i] = &raft.Log{Index: f.index, Type: raft.LogCommand, Data: c}
	}
	return f.ApplyBatch(logs)
}

// TestDeleteGraphInBatch deletes graphs that the same batch wrote: one the
// batch submitted and cancelled (it lives only in the transaction's copies;
// the delete panicked with "state: not found", as every head replaying a
// log with a delete did at restart), and one committed before that the
// batch cancelled (the copy came back at Commit without its tasks). Each
// batch must end where applying its entries one by one ends.
func TestDeleteGraphInBatch(t *testing.T) {
	del := func(id string) []byte {
		return entry(t, OpDeleteGraph, &wire.DeleteGraphCommand{GraphId: id, UnixNanos: 600})
	}
	cancel := func(id string) []byte { return entry(t, OpCancel, cancelGraph(id, "done")) }
	for name, build := range map[string]func(f *testFSM) [][]byte{
		"submitted in the batch": func(f *testFSM) [][]byte {
			return [][]byte{entry(t, OpSubmitGraph, submitCmd(graphSpec("g", spec("a"), spec("b", "a")), 100)), cancel("g"), del("g")}
		},
		"committed before, cancelled in the batch": func(f *testFSM) [][]byte {
			f.submit(graphSpec("g", spec("a"), spec("b", "a")))
			return [][]byte{cancel("g"), del("g")}
		},
		"deleted and submitted again": func(f *testFSM) [][]byte {
			f.submit(graphSpec("g", spec("a")))
			return [][]byte{cancel("g"), del("g"), entry(t, OpSubmitGraph, submitCmd(graphSpec("g", spec("x")), 700))}
		},
	} {
		t.Run(name, func(t *testing.T) {
			one, batched := newTestFSM(t, 0), newTestFSM(t, 0)
			cmds := build(one)
			build(batched)
			for _, c := range cmds {
				one.index++
				if err, ok := one.Apply(&raft.Log{Index: one.index, Type: raft.LogCommand, Data: c}).(error); ok {
					t.Fatalf("one by one: %v", err)
				}
			}
			for i, res := range batched.batch(cmds...) {
				if err, ok := res.(error); ok {
					t.Fatalf("batched entry %d: %v", i, err)
				}
			}
			if d := DiffDumps(dump(t, one.View()), dump(t, batched.View()), 20); d != "" {
				t.Fatalf("one by one and batched differ:\n%s", d)
			}
			if name != "deleted and submitted again" && batched.View().Graph("g") != nil {
				t.Fatal("the deleted graph is still there")
			}
		})
	}
}

// TestDeleteGraphRefusals: an unfinished or unknown graph is refused and
// nothing changes.
func TestDeleteGraphRefusals(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", spec("a")))
	before := dump(t, f.View())
	f.refused(errs.FailedPrecondition, OpDeleteGraph, &wire.DeleteGraphCommand{GraphId: "g"})
	f.refused(errs.NotFound, OpDeleteGraph, &wire.DeleteGraphCommand{GraphId: "nope"})
	f.refused(errs.InvalidArgument, OpDeleteGraph, &wire.DeleteGraphCommand{})
	if d := DiffDumps(before, dump(t, f.View()), 20); d != "" {
		t.Fatalf("a refused delete changed the table:\n%s", d)
	}
}
