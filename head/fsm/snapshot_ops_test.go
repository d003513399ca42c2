package fsm

import (
	"bytes"
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
// (a second delete removes nothing), and a worker declared down takes its
// snapshots with it; the table survives a snapshot and restore equal.
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

	// w1 goes down: snap-a and snap-c go with it; t1 may take another.
	if r := f.down("w1", "dead", false); r.Lost.Snapshots != 2 {
		t.Fatalf("worker down took %d snapshots; want 2", r.Lost.Snapshots)
	}
	if got := snapIDs(f.View().Snapshots("")); got != "snap-b" {
		t.Fatalf("after w1 went down: %s; want snap-b", got)
	}
	f.ok(OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snapRow("snap-d", "t1", "w2"), MaxPerTenant: 2})
	// A snapshot of the down worker, committed before the verdict and
	// proposed after it, is refused: its row would never be dropped.
	f.refused(errs.FailedPrecondition, OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snapRow("snap-f", "t3", "w1"), MaxPerTenant: 2})

	if r := f.ok(OpSnapshotDelete, &wire.SnapshotDeleteCommand{Id: "snap-b"}).(*SnapshotDeleteResult); r.Removed.GetId() != "snap-b" {
		t.Fatalf("delete: %v; want snap-b removed", r.Removed)
	}
	if r := f.ok(OpSnapshotDelete, &wire.SnapshotDeleteCommand{Id: "snap-b"}).(*SnapshotDeleteResult); r.Removed != nil {
		t.Fatalf("second delete removed %v; want nothing", r.Removed)
	}
	if got := snapIDs(f.View().Snapshots("")); got != "snap-d" {
		t.Fatalf("at the end: %s; want snap-d", got)
	}
}

// Under rules 2 a worker going down keeps the table's snapshots as they
// are (there are none to keep: the ops are refused; the rule is 3's).
func TestWorkerDownBeforeRules3KeepsNothingElse(t *testing.T) {
	f := newTestFSM(t, 0)
	f.ok(OpSetRules, wrapperspb.UInt64(2))
	f.upsert("w1", 64000, 64, 0)
	if r := f.down("w1", "dead", false); r.Lost.Snapshots != 0 {
		t.Fatalf("worker down under rules 2 took %d snapshots", r.Lost.Snapshots)
	}
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
