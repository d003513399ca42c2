package fsm

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// archiveFixture builds a table under rules 4 with a worker w1 and these
// graphs: "done" (a then b, both SUCCEEDED), "cancelled" (cancelled
// before it ran), "running" (a RUNNING), "uploading" (a SUCCEEDED with
// its artifacts still pending), "sbx-snapped" (SUCCEEDED, a sandbox snapshot
// taken of it).
func archiveFixture(t *testing.T) *testFSM {
	t.Helper()
	f := newTestFSM(t, 0)
	f.ok(OpSetRules, wrapperspb.UInt64(4))
	f.upsert("w1", 64000, 64, 0)
	f.submit(graphSpec("done", rspec("a", 1000, 1, 0), rspec("b", 1000, 1, 0, "a")))
	f.submit(graphSpec("cancelled", rspec("a", 1000, 1, 0)))
	f.submit(graphSpec("running", rspec("a", 1000, 1, 0)))
	f.submit(graphSpec("uploading", rspec("a", 1000, 1, 0)))
	f.submit(graphSpec("sbx-snapped", rspec("a", 1000, 1, 0)))
	f.ok(OpCancel, &wire.CancelCommand{GraphId: "cancelled", Reason: "not needed", UnixNanos: f.now()})
	f.place(pa("done/a", 1, "w1"), pa("running/a", 1, "w1"), pa("uploading/a", 1, "w1"), pa("sbx-snapped/a", 1, "w1"))
	f.report("w1", ev("done/a", 1, kStarted), ev("running/a", 1, kStarted), ev("uploading/a", 1, kStarted), ev("sbx-snapped/a", 1, kStarted))
	up := exited("uploading/a", 1, 0, `{"reward": 1}`)
	up.ArtifactsPending = true
	f.report("w1", exited("done/a", 1, 0, `{"reward": 0.5}`), up, exited("sbx-snapped/a", 1, 0, ""))
	f.place(pa("done/b", 1, "w1"))
	f.report("w1", ev("done/b", 1, kStarted))
	f.report("w1", exited("done/b", 1, 0, `{"reward": 1}`))
	f.ok(OpSetRules, wrapperspb.UInt64(3)) // no change: rules only grow
	f.ok(OpSnapshotAdd, &wire.SnapshotAddCommand{MaxPerTenant: 4, Snapshot: &wire.Snapshot{Id: "snap-a", Tenant: "default",
		SandboxId: "sbx-snapped", WorkerId: "w1", Image: "megaflow-snapshot:snap-a", ImageId: "sha256:abc", CreateUnixNanos: f.now()}})
	return f
}

// restoredEqual fails the test unless the table rebuilt from a snapshot
// of f equals f's.
func restoredEqual(t *testing.T, f *testFSM) {
	t.Helper()
	dst := newTestFSM(t, 0)
	if err := dst.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, f.View()))}); err != nil {
		t.Fatal(err)
	}
	if d := DiffDumps(dump(t, f.View()), dump(t, dst.View()), 20); d != "" {
		t.Fatalf("the table restored from a snapshot differs:\n%s", d)
	}
}

// OpArchiveGraphs: refused below rules 5, changing nothing; under 5 it
// moves the finished graphs that have nothing pending to the archive (their
// graph and task rows gone, a summary with the counts, metrics and the
// archive time in their place) and skips, changing nothing, a RUNNING
// graph, one whose artifacts are still uploading, one a snapshot was taken
// of and an unknown id; a resubmission of an archived id answers that it
// existed and creates nothing (another spec under it is AlreadyExists); a
// delete of an archived graph removes its summary; drop_ids removes
// summaries; a command over the batch bound or without a time is refused.
// After each step the table rebuilt from a snapshot equals the one in
// memory.
func TestArchiveGraphs(t *testing.T) {
	f := archiveFixture(t)
	all := []string{"done", "cancelled", "running", "uploading", "sbx-snapped", "nope"}
	before := dump(t, f.View())
	e := f.refused(errs.FailedPrecondition, OpArchiveGraphs, &wire.ArchiveGraphsCommand{GraphIds: all, UnixNanos: f.now()})
	if !strings.Contains(e.Message, "rules 5") {
		t.Fatalf("below rules 5: %v; want a refusal naming rules 5", e)
	}
	if d := DiffDumps(before, dump(t, f.View()), 20); d != "" {
		t.Fatalf("a refused archive changed the table:\n%s", d)
	}

	f.ok(OpSetRules, wrapperspb.UInt64(5))
	doneRow := f.View().Graph("done")
	at := f.now()
	res := f.ok(OpArchiveGraphs, &wire.ArchiveGraphsCommand{GraphIds: all, UnixNanos: at}).(*ArchiveGraphsResult)
	if !slices.Equal(res.Archived, []string{"done", "cancelled"}) || res.Dropped != 0 {
		t.Fatalf("archived %v, dropped %d; want [done cancelled], 0", res.Archived, res.Dropped)
	}
	v := f.View()
	for _, id := range []string{"done", "cancelled"} {
		if v.Graph(id) != nil || len(v.TasksOfGraph(id)) != 0 {
			t.Fatalf("%s: graph or task rows still live after archiving", id)
		}
	}
	for _, id := range []string{"running", "uploading", "sbx-snapped"} {
		if v.Graph(id) == nil || len(v.TasksOfGraph(id)) == 0 || v.Archived(id) != nil {
			t.Fatalf("%s: not archivable, but its rows moved", id)
		}
	}
	sum := v.Archived("done")
	want := doneRow.ToWire()
	if sum == nil || sum.GetArchivedUnixNanos() != at || sum.GetCounts().GetSucceeded() != 2 || sum.GetTaskCount() != 2 ||
		sum.GetState() != wire.GraphState_GRAPH_STATE_SUCCEEDED || sum.GetCreateIndex() != want.GetCreateIndex() ||
		sum.GetFinishUnixNanos() != want.GetFinishUnixNanos() || sum.GetMetrics().GetCount() != 2 || !bytes.Equal(sum.GetSpecDigest(), want.GetSpecDigest()) {
		t.Fatalf("summary of done: %v; want the graph's row (2 succeeded, reward count 2) archived at %d", sum, at)
	}
	restoredEqual(t, f)

	// A retry of an archived graph's submission: existed, nothing runs.
	before = dump(t, f.View())
	r := f.ok(OpSubmitGraph, submitCmd(graphSpec("done", rspec("a", 1000, 1, 0), rspec("b", 1000, 1, 0, "a")), f.now())).(*SubmitResult)
	if !r.Existed || !r.Committed || r.Index != want.GetCreateIndex() {
		t.Fatalf("resubmitting an archived graph: %+v; want existed at index %d", r, want.GetCreateIndex())
	}
	f.refused(errs.AlreadyExists, OpSubmitGraph, submitCmd(graphSpec("done", rspec("other", 1000, 1, 0)), f.now()))
	if d := DiffDumps(before, dump(t, f.View()), 20); d != "" {
		t.Fatalf("resubmitting an archived graph changed the table:\n%s", d)
	}

	// The guards lift: the snapshot goes, the upload lands.
	f.ok(OpSnapshotDelete, &wire.SnapshotDeleteCommand{Id: "snap-a"})
	f.report("w1", &wire.AttemptEvent{TaskId: "uploading/a", Attempt: 1, Kind: wire.AttemptEventKind_ATTEMPT_EVENT_KIND_ARTIFACTS_LANDED, UnixNanos: 1})
	res = f.ok(OpArchiveGraphs, &wire.ArchiveGraphsCommand{GraphIds: all, DropIds: []string{"cancelled", "nope"}, UnixNanos: f.now()}).(*ArchiveGraphsResult)
	if !slices.Equal(res.Archived, []string{"uploading", "sbx-snapped"}) || res.Dropped != 1 || f.View().Archived("cancelled") != nil {
		t.Fatalf("archived %v, dropped %d; want [uploading snapped], 1 (cancelled's summary)", res.Archived, res.Dropped)
	}
	restoredEqual(t, f)

	// Delete of an archived graph removes its summary; then it is gone.
	if got := f.ok(OpDeleteGraph, &wire.DeleteGraphCommand{GraphId: "done", UnixNanos: f.now()}).(*DeleteGraphResult); got.Tasks != 0 || f.View().Archived("done") != nil {
		t.Fatalf("delete of an archived graph: %+v, summary %v; want 0 tasks and no summary", got, f.View().Archived("done"))
	}
	f.refused(errs.NotFound, OpDeleteGraph, &wire.DeleteGraphCommand{GraphId: "done", UnixNanos: f.now()})
	// Its id is free again.
	if r := f.submit(graphSpec("done", rspec("x", 1000, 1, 0))); r.Existed {
		t.Fatal("a deleted archived graph's id still answers existed")
	}

	before = dump(t, f.View())
	big := make([]string, MaxArchiveBatch+1)
	for i := range big {
		big[i] = "g"
	}
	f.refused(errs.InvalidArgument, OpArchiveGraphs, &wire.ArchiveGraphsCommand{GraphIds: big, UnixNanos: f.now()})
	f.refused(errs.InvalidArgument, OpArchiveGraphs, &wire.ArchiveGraphsCommand{DropIds: big, UnixNanos: f.now()})
	f.refused(errs.InvalidArgument, OpArchiveGraphs, &wire.ArchiveGraphsCommand{GraphIds: []string{"running"}})
	if d := DiffDumps(before, dump(t, f.View()), 20); d != "" {
		t.Fatalf("refused commands changed the table:\n%s", d)
	}
	restoredEqual(t, f)
	f.accountingOK()
}

// TestArchiveInBatch: a graph submitted, cancelled and archived in one
// batch, then resubmitted in it, ends where applying the entries one by
// one ends: archived, not run again.
func TestArchiveInBatch(t *testing.T) {
	g := graphSpec("g", spec("a"), spec("b", "a"))
	cmds := [][]byte{
		entry(t, OpSubmitGraph, submitCmd(g, 100)),
		entry(t, OpCancel, cancelGraph("g", "done")),
		entry(t, OpArchiveGraphs, &wire.ArchiveGraphsCommand{GraphIds: []string{"g"}, UnixNanos: 600}),
		entry(t, OpSubmitGraph, submitCmd(g, 700)),
	}
	one, batched := newTestFSM(t, 0), newTestFSM(t, 0)
	for _, f := range []*testFSM{one, batched} {
		f.ok(OpSetRules, wrapperspb.UInt64(5))
	}
	for _, c := range cmds {
		if err, ok := one.batch(c)[0].(error); ok {
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
	v := batched.View()
	if v.Graph("g") != nil || v.Archived("g") == nil || len(v.TasksOfGraph("g")) != 0 {
		t.Fatal("g is not archived after the batch, or ran again")
	}
	restoredEqual(t, batched)
}

// TestListGraphsWithArchive: pages of every size walk the live graphs by
// id, then the archived ones by id, each once; a tenant filter applies to
// both; a page that ends the live part exactly continues into the
// archive.
func TestListGraphsWithArchive(t *testing.T) {
	f := newTestFSM(t, 0)
	f.ok(OpSetRules, wrapperspb.UInt64(5))
	for _, id := range []string{"a1", "b2", "c3", "d4", "e5"} {
		g := graphSpec(id, spec("x"))
		if id == "b2" || id == "d4" {
			g.Tenant = "other"
		}
		f.submit(g)
	}
	for _, id := range []string{"a1", "b2", "d4"} {
		f.ok(OpCancel, &wire.CancelCommand{GraphId: id, Reason: "done", UnixNanos: f.now()})
	}
	f.ok(OpArchiveGraphs, &wire.ArchiveGraphsCommand{GraphIds: []string{"a1", "b2", "d4"}, UnixNanos: f.now()})
	for _, tc := range []struct {
		tenant string
		want   string
	}{
		{"", "c3 e5 | a1 b2 d4"},
		{"other", "| b2 d4"},
		{"default", "c3 e5 | a1"},
	} {
		for size := 1; size <= 6; size++ {
			var got []string
			token, pages := "", 0
			for {
				rows, next, err := f.View().ListGraphsWithArchive(state.GraphFilter{Tenant: tc.tenant}, token, size)
				if err != nil {
					t.Fatalf("tenant %q, page size %d: %v", tc.tenant, size, err)
				}
				if len(rows) > size {
					t.Fatalf("tenant %q: a page of %d rows, over %d", tc.tenant, len(rows), size)
				}
				for _, g := range rows {
					if g.GetArchivedUnixNanos() != 0 && !slices.Contains(got, "|") {
						got = append(got, "|")
					}
					got = append(got, g.GetId())
				}
				if pages++; next == "" || pages > 10 {
					break
				}
				token = next
			}
			if !slices.Contains(got, "|") {
				got = append(got, "|")
			}
			if s := strings.Join(got, " "); s != tc.want {
				t.Errorf("tenant %q, page size %d: %s, want %s", tc.tenant, size, s, tc.want)
			}
		}
	}
}
