package fsm

import (
	"bytes"
	"io"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
	"google.golang.org/protobuf/proto"
)

type nopCloser struct{ io.Reader }

func (nopCloser) Close() error { return nil }

func mustPanic(t *testing.T, name string, fn func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: did not panic", name)
		}
	}()
	fn()
}

func TestUnknownOps(t *testing.T) {
	f := newTestFSM(t, 0)
	f.submit(graphSpec("g", spec("a")))
	before := dump(t, f.View())
	res := f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: []byte{byte(OpIgnorable | 5), 1, 2, 3}})
	if res != nil {
		t.Fatalf("ignorable op: %v", res)
	}
	if f.AppliedIndex() != 2 || dump(t, f.View()) != before {
		t.Fatal("ignorable op changed the table")
	}
	// A panicking apply leaves its transaction open (the head stops), so
	// each case gets a fresh FSM.
	for name, data := range map[string][]byte{
		"unknown op":      {0x7f, 1, 2},
		"empty entry":     nil,
		"corrupt payload": {byte(OpCancel), 0xff, 0xff},
	} {
		f := newTestFSM(t, 0)
		mustPanic(t, name, func() { f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data}) })
	}
}

func TestEncode(t *testing.T) {
	b, err := Encode(OpCancel, &wire.CancelCommand{GraphId: "g"})
	if err != nil || b[0] != byte(OpCancel) {
		t.Fatalf("%v %v", b, err)
	}
	if _, err := Encode(0, &wire.CancelCommand{}); errs.ClassOf(err) != errs.InvalidArgument {
		t.Fatalf("op 0: %v", err)
	}
	if OpSubmitGraph.String() != "SubmitGraph" || Op(0x85).String() != "op(133)" {
		t.Fatal("String")
	}
}

func TestApplyBatchMatchesApply(t *testing.T) {
	entries := [][]byte{
		entry(t, OpSubmitGraph, submitCmd(graphSpec("g", spec("a"), spec("b", "a")), 1)),
		entry(t, OpSubmitGraph, submitCmd(graphSpec("g", spec("z")), 2)), // refused
		entry(t, OpCancel, cancelTask("g/a", "x")),
		entry(t, OpSubmitGraph, submitCmd(graphSpec("h", spec("a")), 3)),
	}
	one := newTestFSM(t, 0)
	var want []any
	for i, e := range entries {
		want = append(want, one.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: e}))
	}
	batch := newTestFSM(t, 0)
	var logs []*raft.Log
	for i, e := range entries {
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: e})
	}
	logs = append(logs, &raft.Log{Index: 5, Type: raft.LogConfiguration})
	got := batch.ApplyBatch(logs)
	if got[4] != nil || len(got) != 5 {
		t.Fatalf("results %v", got)
	}
	for i := range want {
		w, g := want[i], got[i]
		if we, ok := w.(error); ok {
			if errs.ClassOf(g.(error)) != errs.ClassOf(we) {
				t.Errorf("entry %d: %v, want %v", i, g, w)
			}
			continue
		}
		if _, ok := g.(error); ok {
			t.Errorf("entry %d: %v, want %v", i, g, w)
		}
	}
	if batch.AppliedIndex() != 4 {
		t.Fatalf("applied %d", batch.AppliedIndex())
	}
	evOne, _, _ := one.EventsAfter(Cursor{}, "", 100)
	evBatch, _, _ := batch.EventsAfter(Cursor{}, "", 100)
	if len(evOne) != len(evBatch) || len(evOne) == 0 {
		t.Fatalf("%d events vs %d", len(evOne), len(evBatch))
	}
	for i := range evOne {
		if !proto.Equal(evOne[i], evBatch[i]) {
			t.Fatalf("event %d: %v vs %v", i, evOne[i], evBatch[i])
		}
	}
	if !bytes.Equal(snapshotBytes(t, one.View()), snapshotBytes(t, batch.View())) {
		t.Fatalf("batch and single apply differ: %s", firstDiff(dump(t, one.View()), dump(t, batch.View())))
	}
}
