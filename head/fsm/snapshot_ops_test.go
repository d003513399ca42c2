package fsm

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

func snapRow(id, tenant, worker string) *wire.Snapshot {
	return &wire.Snapshot{Id: id, Tenant: tenant, SandboxId: "sbx-src", WorkerId: worker,
		Image: "megaflow-snapshot:" + id, ImageId: "sha256:abc", SizeBytes: 10, CreateUnixNanos: 7}
}

// The snapshot ops: refused below rules 3 (nothing changes); under 3 a
// snapshot is recorded with its index, counted per tenant up to the
// command's bound (ResourceExhausted beyond, naming what to do), refused
// when its fields are out of bounds or its id is taken, deleted once
// (a second delete removes nothing); a snapshot of a worker already down
// is refused; the table survives a snapshot and restore equal.
func TestSnapshotOps(t *testing.T) {
	f := newTestFSM(t, 0)
	f.ok(OpSetRules, wrapperspb.UInt64(2))
	f.refused(errs.FailedPrecondition, OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snapRow("snap-a", "t1", "w1"), MaxPerTenant: 2})
	f.refused(errs.FailedPrecondition, OpSnapshotDelete, &wire.SnapshotDeleteCommand{Id: "snap-a"})
	if n := len(f.View().Snapshots("")); n != 0 {
		t.Fatalf("%d snapshots under rules 2; want 0", n)
	}
	f.ok(OpSetRules, wrapperspb.UInt64(3))
	f.upsert("w1", 64000, 64, 0)
	f.upsert("w2", 64000, 64, 0)

	res := f.ok(OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snapRow("snap-a", "t1", "w1"), MaxPerTenant: 2}).(*SnapshotAddResult)
	if res.Snapshot.GetCreateIndex() == 0 || res.Snapshot.GetId() != "snap-a" {
		t.Fatalf("added %v; want snap-a with its create index", res.Snapshot)
	}
	f.ok(OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snapRow("snap-b", "t1", "w2"), MaxPerTenant: 2})
	f.ok(OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snapRow("snap-c", "t2", "w1"), MaxPerTenant: 2})
	e := f.refused(errs.ResourceExhausted, OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snapRow("snap-d", "t1", "w1"), MaxPerTenant: 2})
	if e.Reason != state.ReasonSnapshotQuota {
		t.Fatalf("over the bound: reason %q; want %s", e.Reason, state.ReasonSnapshotQuota)
	}
	f.refused(errs.AlreadyExists, OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snapRow("snap-a", "t3", "w1"), MaxPerTenant: 2})
	for name, s := range map[string]*wire.SnapshotAddCommand{
		"bad id":      {Snapshot: snapRow("snap-X", "t3", "w1"), MaxPerTenant: 2},
		"wrong image": {Snapshot: func() *wire.Snapshot { s := snapRow("snap-e", "t3", "w1"); s.Image = "busybox"; return s }(), MaxPerTenant: 2},
		"no worker":   {Snapshot: snapRow("snap-e", "t3", ""), MaxPerTenant: 2},
		"no tenant":   {Snapshot: snapRow("snap-e", "", "w1"), MaxPerTenant: 2},
		"zero bound":  {Snapshot: snapRow("snap-e", "t3", "w1")},
		"long name": {Snapshot: func() *wire.Snapshot {
			s := snapRow("snap-e", "t3", "w1")
			s.Name = string(make([]byte, 129))
			return s
		}(), MaxPerTenant: 2},
		"no snapshot":   {MaxPerTenant: 2},
		"negative size": {Snapshot: func() *wire.Snapshot { s := snapRow("snap-e", "t3", "w1"); s.SizeBytes = -1; return s }(), MaxPerTenant: 2},
	} {
		t.Run(name, func(t *testing.T) { f.refused(errs.InvalidArgument, OpSnapshotAdd, s) })
	}
	if got := snapIDs(f.View().Snapshots("t1")); got != "snap-a snap-b" {
		t.Fatalf("t1's snapshots: %s; want snap-a snap-b", got)
	}

	// Snapshot and restore: the same rows.
	dst := newTestFSM(t, 0)
	if err := dst.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, f.View()))}); err != nil {
		t.Fatal(err)
	}
	if d := firstDiff(dump(t, f.View()), dump(t, dst.View())); d != "" {
		t.Fatalf("restored table differs: %s", d)
	}

	// A worker going down keeps its snapshots (TestSnapshotsKeptWhileWorkerDown).
	f.down("w1", "dead", false)
	// A snapshot of the down worker, committed before the verdict and
	// proposed after it, is refused: its sandbox is lost.
	f.refused(errs.FailedPrecondition, OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snapRow("snap-f", "t3", "w1"), MaxPerTenant: 2})

	if r := f.ok(OpSnapshotDelete, &wire.SnapshotDeleteCommand{Id: "snap-b"}).(*SnapshotDeleteResult); r.Removed.GetId() != "snap-b" {
		t.Fatalf("delete: %v; want snap-b removed", r.Removed)
	}
	if r := f.ok(OpSnapshotDelete, &wire.SnapshotDeleteCommand{Id: "snap-b"}).(*SnapshotDeleteResult); r.Removed != nil {
		t.Fatalf("second delete removed %v; want nothing", r.Removed)
	}
	// t1 holds one now: it may take another.
	f.ok(OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snapRow("snap-d", "t1", "w2"), MaxPerTenant: 2})
	if got := snapIDs(f.View().Snapshots("")); got != "snap-a snap-c snap-d" {
		t.Fatalf("at the end: %s; want snap-a snap-c snap-d", got)
	}
}

// A worker declared DOWN, then LEFT, keeps its snapshots' rows (its
// images stay on its disk): they are listed as unavailable, saying why,
// and still count against their tenant; the worker back with the same id
// makes them available again. Its snapshot ids are what the leader sends
// it (WorkerSnapshots). The table survives a snapshot and restore equal
// at each step.
func TestSnapshotsKeptWhileWorkerDown(t *testing.T) {
	f := newTestFSM(t, 0)
	f.ok(OpSetRules, wrapperspb.UInt64(3))
	f.upsert("w1", 64000, 64, 0)
	f.upsert("w2", 64000, 64, 0)
	f.ok(OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snapRow("snap-a", "t1", "w1"), MaxPerTenant: 2})
	f.ok(OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snapRow("snap-b", "t1", "w2"), MaxPerTenant: 2})
	f.ok(OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snapRow("snap-c", "t2", "w1"), MaxPerTenant: 2})
	restoreEqual := func(step string) {
		t.Helper()
		dst := newTestFSM(t, 0)
		if err := dst.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, f.View()))}); err != nil {
			t.Fatal(err)
		}
		if d := firstDiff(dump(t, f.View()), dump(t, dst.View())); d != "" {
			t.Fatalf("%s: restored table differs: %s", step, d)
		}
	}
	for _, step := range []struct {
		name  string
		apply func()
		a, b  string // snap-a's and snap-b's unavailability
		onW1  string // WorkerSnapshots("w1")
	}{
		{"all alive", func() {}, "", "", "snap-a snap-c"},
		{"w1 down", func() { f.down("w1", "lease expired", false) }, "worker w1 is down (lease expired)", "", "snap-a snap-c"},
		{"w1 left", func() { f.down("w1", "shutdown", true) }, "worker w1 left (shutdown)", "", "snap-a snap-c"},
		{"w1 back", func() { f.upsert("w1", 64000, 64, 0) }, "", "", "snap-a snap-c"},
		{"w2 down", func() { f.down("w2", "dead", false) }, "", "worker w2 is down (dead)", "snap-a snap-c"},
	} {
		step.apply()
		v := f.View()
		if got := snapIDs(v.Snapshots("")); got != "snap-a snap-b snap-c" {
			t.Fatalf("%s: snapshots %s; want all three kept", step.name, got)
		}
		if a, b := v.SnapshotUnavailable(v.Snapshot("snap-a")), v.SnapshotUnavailable(v.Snapshot("snap-b")); a != step.a || b != step.b {
			t.Fatalf("%s: unavailable %q and %q; want %q and %q", step.name, a, b, step.a, step.b)
		}
		if got := strings.Join(v.WorkerSnapshots("w1"), " "); got != step.onW1 {
			t.Fatalf("%s: w1's snapshot ids %q; want %q", step.name, got, step.onW1)
		}
		restoreEqual(step.name)
	}
	// Kept rows count: t1 holds 2 of 2 while w2 is down.
	f.refused(errs.ResourceExhausted, OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snapRow("snap-d", "t1", "w1"), MaxPerTenant: 2})
	// A snapshot whose worker is down can be deleted (its image is left
	// to that worker's reconciliation).
	if r := f.ok(OpSnapshotDelete, &wire.SnapshotDeleteCommand{Id: "snap-b"}).(*SnapshotDeleteResult); r.Removed.GetId() != "snap-b" {
		t.Fatalf("delete of a down worker's snapshot: %v; want snap-b removed", r.Removed)
	}
	restoreEqual("after the delete")
}

// forkGraph is sandbox graph id of tenant created from snapshot snap:
// its task runs image pinned to worker, as spec.ForkFrom makes it.
func forkGraph(id, tenant, snap, worker, image string) *wire.GraphSpec {
	box := spec("box")
	box.Image = image
	box.Sandbox = &wire.SandboxSpec{FromSnapshot: snap, SnapshotWorker: worker}
	g := graphSpec(id, box)
	g.Tenant = tenant
	return g
}

// Under rules 3 the FSM checks every graph's snapshot forks when it
// commits (state.Txn.CheckForks), whatever head submitted it: a fork must
// name a snapshot of the table that is its tenant's, run its image, and be
// pinned to its worker; no other task may be pinned to a snapshot's worker
// or run a snapshot's image. Each refusal leaves no graph. Under rules 2
// nothing is checked (no snapshot can exist there).
func TestSnapshotForkChecks(t *testing.T) {
	f := newTestFSM(t, 0)
	f.ok(OpSetRules, wrapperspb.UInt64(3))
	f.upsert("w1", 64000, 64, 0)
	f.upsert("w2", 64000, 64, 0)
	f.ok(OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snapRow("snap-a", "t1", "w1"), MaxPerTenant: 2})
	img := "megaflow-snapshot:snap-a"
	plain := func(image string) *wire.GraphSpec {
		g := graphSpec("sbx-x", spec("box"))
		g.Tasks[0].Image = image
		return g
	}
	pinnedOnly := plain("busybox")
	pinnedOnly.Tasks[0].Sandbox = &wire.SandboxSpec{SnapshotWorker: "w1"}
	for _, c := range []struct {
		name   string
		g      *wire.GraphSpec
		class  errs.Class
		reason string
		says   string
	}{
		{"another tenant's", forkGraph("sbx-x", "t2", "snap-a", "w1", img), errs.NotFound, state.ReasonSnapshotNotFound, "not found for tenant t2"},
		{"default tenant's", forkGraph("sbx-x", "", "snap-a", "w1", img), errs.NotFound, state.ReasonSnapshotNotFound, "not found for tenant default"},
		{"unknown snapshot", forkGraph("sbx-x", "t1", "snap-zz", "w1", img), errs.NotFound, state.ReasonSnapshotNotFound, "snapshot snap-zz not found"},
		{"another worker", forkGraph("sbx-x", "t1", "snap-a", "w2", img), errs.InvalidArgument, "", `snapshot_worker "w2" is not worker w1`},
		{"no worker", forkGraph("sbx-x", "t1", "snap-a", "", img), errs.InvalidArgument, "", `snapshot_worker "" is not worker w1`},
		{"another image", forkGraph("sbx-x", "t1", "snap-a", "w1", "busybox"), errs.InvalidArgument, "", `image "busybox" is not snapshot snap-a's image`},
		{"pinned, no snapshot", pinnedOnly, errs.InvalidArgument, "", "without from_snapshot"},
		{"a snapshot's image", plain(img), errs.InvalidArgument, "", "is a sandbox snapshot's"},
		{"its long name", plain("docker.io/library/megaflow-snapshot:snap-a"), errs.InvalidArgument, "", "is a sandbox snapshot's"},
	} {
		var e *errs.Error
		if res := f.apply(OpSubmitGraph, submitCmd(c.g, 100)); !errors.As(asError(res), &e) || e.Class != c.class {
			t.Fatalf("%s: submit: %v; want a %s error", c.name, res, c.class)
		}
		if e.Reason != c.reason || !strings.Contains(e.Message, c.says) {
			t.Fatalf("%s: refusal %q (reason %q); want one saying %q, reason %q", c.name, e.Message, e.Reason, c.says, c.reason)
		}
		if f.View().Graph("sbx-x") != nil {
			t.Fatalf("%s: the refused graph is in the table", c.name)
		}
	}
	f.submit(forkGraph("sbx-ok", "t1", "snap-a", "w1", img))
	if got := f.task("sbx-ok/box").Spec.GetSandbox().GetSnapshotWorker(); got != "w1" {
		t.Fatalf("the fork is pinned to %q; want w1", got)
	}

	old := newTestFSM(t, 0)
	old.ok(OpSetRules, wrapperspb.UInt64(2))
	old.submit(forkGraph("sbx-x", "t2", "snap-a", "w2", "busybox"))
}

// OpSnapshotDelete is refused while a sandbox created from the snapshot
// may still run its image: queued, running, and cancelled until its
// attempt's container is reported stopped. Then the row goes, and a fork
// of it is refused: the row, not the image, is the authority, so the
// leader removes the image only after the row.
func TestSnapshotDeleteWaitsForForks(t *testing.T) {
	f := newTestFSM(t, 0)
	f.ok(OpSetRules, wrapperspb.UInt64(3))
	f.upsert("w1", 64000, 64, 0)
	f.ok(OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snapRow("snap-a", "t1", "w1"), MaxPerTenant: 2})
	img := "megaflow-snapshot:snap-a"
	f.submit(forkGraph("sbx-f1", "t1", "snap-a", "w1", img))
	inUse := func(step, advice string) {
		t.Helper()
		e := f.refused(errs.FailedPrecondition, OpSnapshotDelete, &wire.SnapshotDeleteCommand{Id: "snap-a"})
		if e.Reason != state.ReasonSnapshotInUse || !strings.Contains(e.Message, "sbx-f1") || !strings.Contains(e.Message, advice) {
			t.Fatalf("%s: refusal %q (reason %q); want %s naming sbx-f1 and saying %q", step, e.Message, e.Reason, state.ReasonSnapshotInUse, advice)
		}
		if f.View().Snapshot("snap-a") == nil {
			t.Fatalf("%s: the refused delete removed the row", step)
		}
	}
	inUse("queued", "close them first")
	f.place(pa("sbx-f1/box", 1, "w1"))
	f.report("w1", ev("sbx-f1/box", 1, kStarted))
	inUse("running", "close them first")
	f.ok(OpCancel, &wire.CancelCommand{GraphId: "sbx-f1", Reason: "closed", UnixNanos: f.now()})
	if !state.IsTerminal(f.task("sbx-f1/box").State) {
		t.Fatalf("the fork is %s after its close; want it ended", f.task("sbx-f1/box").State)
	}
	inUse("closed, its container still stopping", "retry in a few seconds")
	f.report("w1", ev("sbx-f1/box", 1, kStopped))
	if users := f.View().SnapshotUsers("snap-a"); len(users) != 0 {
		t.Fatalf("users after the stop: %v; want none", users)
	}
	if r := f.ok(OpSnapshotDelete, &wire.SnapshotDeleteCommand{Id: "snap-a"}).(*SnapshotDeleteResult); r.Removed.GetId() != "snap-a" {
		t.Fatalf("delete: %v; want snap-a removed", r.Removed)
	}
	f.refused(errs.NotFound, OpSubmitGraph, submitCmd(forkGraph("sbx-f2", "t1", "snap-a", "w1", img), 100))
	dst := newTestFSM(t, 0)
	if err := dst.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, f.View()))}); err != nil {
		t.Fatal(err)
	}
	if d := firstDiff(dump(t, f.View()), dump(t, dst.View())); d != "" {
		t.Fatalf("restored table differs: %s", d)
	}
}

// Under rules 2 a worker going down changes no snapshot (there are none:
// the ops are refused).
func TestWorkerDownBeforeRules3KeepsNothingElse(t *testing.T) {
	f := newTestFSM(t, 0)
	f.ok(OpSetRules, wrapperspb.UInt64(2))
	f.upsert("w1", 64000, 64, 0)
	f.down("w1", "dead", false)
	if n := len(f.View().Snapshots("")); n != 0 {
		t.Fatalf("%d snapshots under rules 2", n)
	}
}

// asError returns res when it is an error, else nil.
func asError(res any) error {
	err, _ := res.(error)
	return err
}

func snapIDs(ss []*wire.Snapshot) string {
	var b []byte
	for i, s := range ss {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, s.GetId()...)
	}
	return string(b)
}

// OpSandboxSetDeadline: refused below rules 3; under 3 it sets a live
// sandbox's deadline_seconds, and refuses (changing nothing) a value out
// of range, an unknown graph, a graph that is no sandbox, and a sandbox
// that ended. The table survives a snapshot and restore equal.
func TestSandboxSetDeadline(t *testing.T) {
	f := newTestFSM(t, 0)
	f.ok(OpSetRules, wrapperspb.UInt64(2))
	box := spec("box")
	box.Sandbox = &wire.SandboxSpec{}
	g := graphSpec("sbx-a", box)
	g.DeadlineSeconds = 3600
	f.submit(g)
	f.submit(graphSpec("plain", spec("a")))
	set := func(id string, secs int64) *wire.SandboxSetDeadlineCommand {
		return &wire.SandboxSetDeadlineCommand{GraphId: id, DeadlineSeconds: secs, UnixNanos: 9}
	}
	f.refused(errs.FailedPrecondition, OpSandboxSetDeadline, set("sbx-a", 60))
	f.ok(OpSetRules, wrapperspb.UInt64(3))
	if got := f.ok(OpSandboxSetDeadline, set("sbx-a", 7200)); got != true {
		t.Fatalf("set: %v; want true", got)
	}
	if d := f.View().Graph("sbx-a").DeadlineSeconds; d != 7200 {
		t.Fatalf("deadline %d; want 7200", d)
	}
	f.refused(errs.InvalidArgument, OpSandboxSetDeadline, set("sbx-a", 0))
	f.refused(errs.InvalidArgument, OpSandboxSetDeadline, set("sbx-a", 7*24*3600+1))
	f.refused(errs.NotFound, OpSandboxSetDeadline, set("sbx-none", 60))
	f.refused(errs.FailedPrecondition, OpSandboxSetDeadline, set("plain", 60))
	if d := f.View().Graph("sbx-a").DeadlineSeconds; d != 7200 {
		t.Fatalf("deadline %d after refusals; want 7200", d)
	}
	dst := newTestFSM(t, 0)
	if err := dst.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, f.View()))}); err != nil {
		t.Fatal(err)
	}
	if d := firstDiff(dump(t, f.View()), dump(t, dst.View())); d != "" {
		t.Fatalf("restored table differs: %s", d)
	}
	f.ok(OpCancel, &wire.CancelCommand{GraphId: "sbx-a", Reason: "closed", UnixNanos: 10})
	f.refused(errs.FailedPrecondition, OpSandboxSetDeadline, set("sbx-a", 60))
}
