package fsm

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

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

// A batch that writes more task rows than maxBatchTaskWrites is committed
// in several transactions, between entries: the table, the results and
// the events are those of applying its entries one by one, and an entry
// that panics after a split discards only its own transaction (the head
// stops; the entries committed before it stay, and the table's write lock
// is free).
func TestApplyBatchSplitsLargeBatches(t *testing.T) {
	big := func(id string, n int) *wire.GraphSpec {
		g := graphSpec(id)
		for i := range n {
			g.Tasks = append(g.Tasks, spec(fmt.Sprintf("t%03d", i)))
		}
		return g
	}
	var entries [][]byte
	for i := range 5 { // 5 x 300 task writes: splits after the 2nd and the 4th
		entries = append(entries, entry(t, OpSubmitGraph, submitCmd(big(fmt.Sprintf("g%d", i), 300), int64(i+1))))
	}
	entries = append(entries, entry(t, OpCancel, cancelTask("g1/t000", "x")))
	one := newTestFSM(t, 0)
	for i, e := range entries {
		if res := one.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: e}); res != nil {
			if _, ok := res.(error); ok {
				t.Fatalf("entry %d: %v", i, res)
			}
		}
	}
	batch := newTestFSM(t, 0)
	var logs []*raft.Log
	for i, e := range entries {
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: e})
	}
	for i, r := range batch.ApplyBatch(logs) {
		if _, ok := r.(error); ok {
			t.Fatalf("entry %d in the batch: %v", i, r)
		}
	}
	if batch.AppliedIndex() != uint64(len(entries)) {
		t.Fatalf("applied %d, want %d", batch.AppliedIndex(), len(entries))
	}
	if !bytes.Equal(snapshotBytes(t, one.View()), snapshotBytes(t, batch.View())) {
		t.Fatalf("split batch and single apply differ: %s", firstDiff(dump(t, one.View()), dump(t, batch.View())))
	}
	evOne, _, _ := one.EventsAfter(Cursor{}, "", 10_000)
	evBatch, _, _ := batch.EventsAfter(Cursor{}, "", 10_000)
	if len(evOne) != len(evBatch) || len(evOne) < 1500 {
		t.Fatalf("%d events one by one, %d in the batch", len(evOne), len(evBatch))
	}
	for i := range evOne {
		if !proto.Equal(evOne[i], evBatch[i]) {
			t.Fatalf("event %d: %v vs %v", i, evOne[i], evBatch[i])
		}
	}

	// A corrupt entry after a split: the two graphs before it stay.
	f := newTestFSM(t, 0)
	logs = []*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: entries[0]},
		{Index: 2, Type: raft.LogCommand, Data: entries[1]},
		{Index: 3, Type: raft.LogCommand, Data: []byte{0x7f, 1, 2}},
	}
	mustPanic(t, "a corrupt entry after a split", func() { f.ApplyBatch(logs) })
	if f.AppliedIndex() != 2 || f.View().Graph("g0") == nil || f.View().Graph("g1") == nil {
		t.Fatalf("after the panic: applied %d; want the 2 entries committed before it", f.AppliedIndex())
	}
	done := make(chan struct{})
	go func() { // the write lock is free: a new transaction opens
		defer close(done)
		f.Apply(&raft.Log{Index: 3, Type: raft.LogCommand, Data: entries[2]})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the table's write lock is still held after the panic")
	}
}
