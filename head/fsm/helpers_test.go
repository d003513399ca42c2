package fsm

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
	"google.golang.org/protobuf/proto"
)

// testFSM wraps an FSM with a log index counter.
type testFSM struct {
	*FSM
	tb    testing.TB
	index uint64
}

func newTestFSM(tb testing.TB, ring int) *testFSM {
	tb.Helper()
	cfg := DefaultConfig()
	if ring > 0 {
		cfg.EventRingSize = ring
	}
	f, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return &testFSM{FSM: f, tb: tb}
}

// entry encodes a command as a log entry.
func entry(tb testing.TB, op Op, msg proto.Message) []byte {
	tb.Helper()
	b, err := Encode(op, msg)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// apply applies one command at the next index and returns the result.
func (f *testFSM) apply(op Op, msg proto.Message) any {
	f.tb.Helper()
	f.index++
	return f.Apply(&raft.Log{Index: f.index, Type: raft.LogCommand, Data: entry(f.tb, op, msg)})
}

// ok applies a command that must succeed and returns its result.
func (f *testFSM) ok(op Op, msg proto.Message) any {
	f.tb.Helper()
	res := f.apply(op, msg)
	if err, isErr := res.(error); isErr {
		f.tb.Fatalf("%s: %v", op, err)
	}
	return res
}

// refused applies a command that must fail with class c.
func (f *testFSM) refused(c errs.Class, op Op, msg proto.Message) *errs.Error {
	f.tb.Helper()
	res := f.apply(op, msg)
	var e *errs.Error
	if err, isErr := res.(error); !isErr || !errors.As(err, &e) || e.Class != c {
		f.tb.Fatalf("%s: got %v, want a %s error", op, res, c)
	}
	return e
}

func (f *testFSM) submit(g *wire.GraphSpec) *SubmitResult {
	f.tb.Helper()
	return f.ok(OpSubmitGraph, submitCmd(g, 100)).(*SubmitResult)
}

func (f *testFSM) task(id string) *state.Task {
	f.tb.Helper()
	t := f.View().Task(id)
	if t == nil {
		f.tb.Fatalf("task %q not found", id)
	}
	return t
}

// spec builds a task spec; deps are names.
func spec(name string, deps ...string) *wire.TaskSpec {
	return &wire.TaskSpec{Name: name, Image: "img", Command: []string{"run", name}, DependsOn: deps}
}

func graphSpec(id string, tasks ...*wire.TaskSpec) *wire.GraphSpec {
	return &wire.GraphSpec{Id: id, Tasks: tasks}
}

// digest is the leader's SHA-256 of the spec's deterministic encoding.
func digest(g *wire.GraphSpec) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(g)
	if err != nil {
		panic(err)
	}
	d := sha256.Sum256(b)
	return d[:]
}

// chunkCmds splits a graph into SubmitGraphCommands of at most per tasks.
func chunkCmds(g *wire.GraphSpec, per int, nanos int64) []*wire.SubmitGraphCommand {
	header := proto.Clone(g).(*wire.GraphSpec)
	header.Tasks = nil
	d := digest(g)
	n := max(1, (len(g.Tasks)+per-1)/per)
	cmds := make([]*wire.SubmitGraphCommand, n)
	for i := range n {
		hi := min(len(g.Tasks), (i+1)*per)
		tasks := make([]*wire.TaskSpec, 0, per)
		for _, t := range g.Tasks[i*per : hi] {
			tasks = append(tasks, proto.Clone(t).(*wire.TaskSpec))
		}
		cmds[i] = &wire.SubmitGraphCommand{Header: header, Tasks: tasks, Chunk: uint32(i), Chunks: uint32(n),
			SpecDigest: d, UnixNanos: nanos, TaskCount: uint32(len(g.Tasks))}
	}
	return cmds
}

func submitCmd(g *wire.GraphSpec, nanos int64) *wire.SubmitGraphCommand {
	return chunkCmds(g, max(1, len(g.Tasks)), nanos)[0]
}

// dump renders the whole table canonically (Dump).
func dump(tb testing.TB, v *state.View) string {
	tb.Helper()
	return Dump(v)
}

// snapshotBytes persists the table into memory.
func snapshotBytes(tb testing.TB, v *state.View) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, v); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// firstDiff reports the first line where two dumps differ.
func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  %s\n  %s", i+1, x, y)
		}
	}
	return ""
}

func states(f *testFSM, ids ...string) string {
	var out []string
	for _, id := range ids {
		t := f.task(id)
		out = append(out, strings.TrimPrefix(t.State.String(), "TASK_STATE_"))
	}
	return strings.Join(out, " ")
}
