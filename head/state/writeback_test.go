package state

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/wire"
)

// A transaction keeps the task rows it writes out of go-memdb until a read
// by an index needs them (Txn.tasks): its own reads must still see every
// write made before them in the same transaction, as if each had been
// inserted at once. Each case writes and reads in one transaction, where
// a read that skipped the flush would miss the write.
func TestTxnReadsSeeItsOwnTaskWrites(t *testing.T) {
	t.Run("GPU health loses an attempt placed in the same transaction", func(t *testing.T) {
		s := newTestStore(t)
		g, tasks := buildRows("g", "t", "a")
		tasks[0].Spec.Resources = &wire.Resources{Gpus: 1}
		s.write(func(txn *Txn) {
			if err := txn.InsertGraph(g, tasks, 1); err != nil {
				t.Fatal(err)
			}
			info := &wire.WorkerInfo{Id: "w1", Capacity: &wire.Resources{CpuMillis: 1000, MemoryBytes: 1 << 30, Gpus: 1},
				Gpus: []*wire.GpuDevice{{Uuid: "GPU-1", Model: "H100", MemoryBytes: 80 << 30}}}
			if _, err := txn.UpsertWorker(info, 1); err != nil {
				t.Fatal(err)
			}
		})
		s.write(func(txn *Txn) {
			if _, err := txn.Place(&wire.PlannedAttempt{TaskId: "g/a", Attempt: 1, WorkerId: "w1", GpuUuids: []string{"GPU-1"}}, 1, 2); err != nil {
				t.Fatal(err)
			}
			if _, l, err := txn.SetGPUHealth("w1", map[string]string{"GPU-1": "XID 79"}, 3); err != nil || l.Requeued+l.Failed != 1 {
				t.Fatalf("SetGPUHealth: %+v, %v; want the attempt placed just before lost", l, err)
			}
		})
		if a := s.task("g/a"); a.State != queued || a.LostCount != 1 {
			t.Fatalf("task %s, lost %d; want QUEUED again after one lost attempt", a.State, a.LostCount)
		}
	})
	t.Run("an ended service cancels a waiter submitted in the same transaction", func(t *testing.T) {
		s := newTestStore(t)
		s.insertService("p", "model/a", "never")
		s.move("p/srv", "w1", assigned, running)
		g, tasks := buildRows("g", "t", "srv", "u")
		tasks[0].Spec.Kind = wire.TaskKind_TASK_KIND_SERVICE
		tasks[0].Spec.Service = &wire.ServiceSpec{Name: "model/a", RestartPolicy: "never"}
		tasks[1].Spec.UsesServices = []string{"model/a"}
		s.write(func(txn *Txn) {
			if err := txn.InsertGraph(g, tasks, 5); err != nil {
				t.Fatal(err)
			}
			// g's own provider ends, then the last other one: u waits for
			// a service that no task provides any more.
			if _, err := txn.CancelTask("g/srv", wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER, "not needed", 6); err != nil {
				t.Fatal(err)
			}
			if _, err := txn.CancelTask("p/srv", wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER, "done", 7); err != nil {
				t.Fatal(err)
			}
		})
		if u := s.task("g/u"); u.State != cancelled || u.ReasonCode != wire.ReasonCode_REASON_CODE_SERVICE_GONE {
			t.Fatalf("waiter %s %s %q; want CANCELLED, service gone", u.State, u.ReasonCode, u.Reason)
		}
	})
}

// Every read of the tasks table by an index in a write transaction goes
// through taskTxn or taskTxnFor, which insert the rows held back first:
// no other code of this package hands t.mem to a read of tasks. The
// helpers below read tasks when given a memdb transaction.
func TestTaskReadsGoThroughTheFlush(t *testing.T) {
	readsTasks := map[string]bool{"tasksOfGraph": true, "usageOf": true, "archivable": true, "snapshotUsers": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			fn, ok := n.(*ast.FuncDecl)
			if ok && (fn.Name.Name == "flushTasks" || fn.Name.Name == "taskTxn" || fn.Name.Name == "taskTxnFor" || fn.Name.Name == "Task") {
				return false // the write-back itself
			}
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 || !isTMem(call.Args[0]) {
				return true
			}
			id, _ := call.Fun.(*ast.Ident)
			toTasks := len(call.Args) > 1 && isIdent(call.Args[1], "tableTasks")
			if id != nil && (readsTasks[id.Name] || ((id.Name == "get" || id.Name == "first" || id.Name == "lowerBound") && toTasks)) {
				t.Errorf("%s: %s(t.mem, ...) reads tasks without the rows this transaction holds back: use t.taskTxn()", fset.Position(call.Pos()), id.Name)
			}
			return true
		})
	}
}

func isTMem(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	return ok && isIdent(sel.X, "t") && sel.Sel.Name == "mem"
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}
