package sandboxtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/image"
	dockerclient "github.com/moby/moby/client"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/docker"
	"github.com/megaflow/megaflow/worker"
)

// removeSnapshotImages removes, at the end of the test, every snapshot
// image this test's cluster committed that is still there. A snapshot of
// a fork is a child of its snapshot's image, which the engine keeps
// (untagged) until the child is gone: newest first, a few passes.
func (e *env) removeSnapshotImages() {
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for range 3 {
			left := e.snapshotImages()
			if len(left) == 0 {
				return
			}
			for _, ref := range left {
				_, _ = e.cli.ImageRemove(ctx, ref, dockerclient.ImageRemoveOptions{Force: true, PruneChildren: true})
			}
		}
	})
}

// snapshotImages returns the ids of the snapshot images of this test's
// cluster the engine holds, newest first.
func (e *env) snapshotImages() []string {
	f := make(dockerclient.Filters).Add("label", worker.LabelCluster+"="+e.cluster).Add("label", worker.LabelSnapshot)
	res, err := e.cli.ImageList(context.Background(), dockerclient.ImageListOptions{Filters: f})
	if err != nil {
		e.t.Fatal(err)
	}
	items := res.Items
	slices.SortFunc(items, func(a, b image.Summary) int { return cmp.Compare(b.Created, a.Created) })
	var out []string
	for _, im := range items {
		out = append(out, im.ID)
	}
	return out
}

// hasImage reports whether the engine holds image ref.
func (e *env) hasImage(ref string) bool {
	_, err := e.cli.ImageInspect(context.Background(), ref)
	if err != nil && !cerrdefs.IsNotFound(err) {
		e.t.Fatal(err)
	}
	return err == nil
}

// snapshot takes a snapshot of s as a user must: Snapshot is not retried
// once sent, so on Unavailable (a leader change while committing, seen on
// a loaded host) it asks the leader's table whether the snapshot was
// taken (SyncSession, then ListSnapshots: a new snapshot of s with this
// name) and takes it again only if not. Any other error fails the test.
func (e *env) snapshot(ctx context.Context, s *client.Sandbox, name string) *client.SandboxSnapshot {
	e.t.Helper()
	ofS := func() map[string]*client.SandboxSnapshot {
		e.t.Helper()
		if err := e.cl.SyncSession(ctx); err != nil {
			e.t.Fatalf("SyncSession: %v", err)
		}
		all, err := e.cl.ListSnapshots(ctx, "")
		if err != nil {
			e.t.Fatalf("ListSnapshots: %v", err)
		}
		out := map[string]*client.SandboxSnapshot{}
		for _, sn := range all {
			if sn.GetSandboxId() == s.ID() && sn.GetName() == name {
				out[sn.GetId()] = sn
			}
		}
		return out
	}
	before := ofS()
	for try := 1; ; try++ {
		snap, err := s.Snapshot(ctx, name)
		if err == nil {
			return snap
		}
		if !errors.Is(err, errs.ErrUnavailable) || try == 3 {
			e.t.Fatalf("Snapshot of %s (try %d): %v", s.ID(), try, err)
		}
		e.t.Logf("Snapshot of %s: %v; asking whether it was taken", s.ID(), err)
		for id, sn := range ofS() {
			if before[id] == nil {
				return sn
			}
		}
	}
}

func (e *env) read(ctx context.Context, s *client.Sandbox, path string) string {
	e.t.Helper()
	b, err := s.ReadFile(ctx, path)
	if err != nil {
		e.t.Fatalf("ReadFile %s in %s: %v", path, s.ID(), err)
	}
	return string(b)
}

// Snapshot a sandbox with a file in it, fork 3 sandboxes from the
// snapshot: each is on the snapshot's worker, sees the file, and diverges
// on its own (and the source too). The tenant's bound refuses a snapshot
// beyond it, saying what to do; a snapshot in use cannot be deleted;
// once its forks are closed it is, with its image; a fork from it is then
// NotFound. The heads' tables are replayed from their logs at the end
// (testcluster's replay check) with the snapshots in them.
func TestSandboxSnapshotAndFork(t *testing.T) {
	t.Parallel() // it waits for the engine (see internal/testcluster)
	e := newEnvWith(t, 2, func(cfg *head.Config) { cfg.MaxSnapshots = 2 })
	e.removeSnapshotImages()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	src := e.create(ctx, client.SandboxSpec{Tenant: "team-a"})
	if res, err := src.Exec(ctx, sh(`mkdir -p /work && echo prepared > /work/state`), client.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("setup exec: %v %v", res, err)
	}
	snap := e.snapshot(ctx, src, "prepared env")
	if !strings.HasPrefix(snap.GetId(), spec.SnapshotIDPrefix) || snap.GetWorkerId() != src.Info().GetWorkerId() || snap.GetTenant() != "team-a" ||
		snap.GetSandboxId() != src.ID() || snap.GetName() != "prepared env" || snap.GetImage() != spec.SnapshotImage(snap.GetId()) ||
		snap.GetSizeBytes() <= 0 || snap.GetCreateIndex() == 0 {
		t.Fatalf("snapshot %v; want one of %s on %s, tenant team-a, with its image, size and index", snap, src.ID(), src.Info().GetWorkerId())
	}
	if !e.hasImage(snap.GetImage()) {
		t.Fatalf("the engine holds no image %s after the snapshot", snap.GetImage())
	}
	list, err := e.cl.ListSnapshots(ctx, "team-a")
	if err != nil || len(list) != 1 || list[0].GetId() != snap.GetId() {
		t.Fatalf("ListSnapshots(team-a): %v, %v; want the snapshot", list, err)
	}
	if other, err := e.cl.ListSnapshots(ctx, "team-b"); err != nil || len(other) != 0 {
		t.Fatalf("ListSnapshots(team-b): %v, %v; want none", other, err)
	}

	// Three forks, created at once, each with the file, each diverging on
	// its own.
	forks := make([]*client.Sandbox, 3)
	createErrs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range forks {
		wg.Go(func() {
			forks[i], createErrs[i] = e.cl.CreateSandbox(ctx, client.SandboxSpec{Tenant: "team-a", FromSnapshot: snap.GetId(), WaitReady: 2 * time.Minute})
		})
	}
	wg.Wait()
	for i, f := range forks {
		if createErrs[i] != nil {
			t.Fatalf("fork %d: %v", i, createErrs[i])
		}
		info := f.Info()
		if info.GetState() != client.SandboxReady || info.GetWorkerId() != snap.GetWorkerId() || info.GetFromSnapshot() != snap.GetId() || info.GetImage() != snap.GetImage() {
			t.Fatalf("fork %d: %s on %s from %q image %s; want READY on %s from %s", i, info.GetState(), info.GetWorkerId(), info.GetFromSnapshot(), info.GetImage(), snap.GetWorkerId(), snap.GetId())
		}
	}
	for i, f := range forks {
		if got := e.read(ctx, f, "/work/state"); got != "prepared\n" {
			t.Fatalf("fork %d reads %q; want the snapshot's \"prepared\\n\"", i, got)
		}
		if err := f.WriteFile(ctx, "/work/state", []byte(fmt.Sprintf("fork %d\n", i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := src.Exec(ctx, sh(`echo source > /work/state`), client.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, f := range forks {
		if got := e.read(ctx, f, "/work/state"); got != fmt.Sprintf("fork %d\n", i) {
			t.Fatalf("fork %d reads %q after the others wrote; want its own", i, got)
		}
	}
	if got := e.read(ctx, src, "/work/state"); got != "source\n" {
		t.Fatalf("the source reads %q; want its own", got)
	}

	// The bound (2 per tenant): a second snapshot fits, a third does not.
	e.snapshot(ctx, forks[0], "")
	_, err = forks[1].Snapshot(ctx, "")
	if !errors.Is(err, errs.ErrResourceExhausted) || errs.ReasonOf(err) != client.ReasonSnapshotQuota || !strings.Contains(err.Error(), "delete one") {
		t.Fatalf("third snapshot: %v (reason %q); want ResourceExhausted, %s, saying to delete one", err, errs.ReasonOf(err), client.ReasonSnapshotQuota)
	}
	if n := len(e.snapshotImages()); n != 2 {
		t.Fatalf("%d snapshot images on the engine; want 2 (the refused one's removed)", n)
	}
	// In use: refused; forks closed: deleted, with its image.
	err = e.cl.DeleteSnapshot(ctx, snap.GetId())
	if !errors.Is(err, errs.ErrFailedPrecondition) || errs.ReasonOf(err) != client.ReasonSnapshotInUse {
		t.Fatalf("delete while forks run: %v (reason %q); want FailedPrecondition, %s", err, errs.ReasonOf(err), client.ReasonSnapshotInUse)
	}
	for _, f := range forks {
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
		e.waitGone(f, time.Minute)
	}
	if err := e.cl.DeleteSnapshot(ctx, snap.GetId()); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	if e.hasImage(snap.GetImage()) {
		t.Fatalf("image %s still on the engine after DeleteSnapshot", snap.GetImage())
	}
	if list, err := e.cl.ListSnapshots(ctx, "team-a"); err != nil || len(list) != 1 || list[0].GetId() == snap.GetId() {
		t.Fatalf("ListSnapshots after the delete: %v, %v; want only the second", list, err)
	}
	_, err = e.cl.CreateSandbox(ctx, client.SandboxSpec{Tenant: "team-a", FromSnapshot: snap.GetId()})
	if !errors.Is(err, errs.ErrNotFound) || errs.ReasonOf(err) != client.ReasonSnapshotNotFound {
		t.Fatalf("fork of a deleted snapshot: %v (reason %q); want NotFound, %s", err, errs.ReasonOf(err), client.ReasonSnapshotNotFound)
	}
	if err := e.cl.DeleteSnapshot(ctx, snap.GetId()); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("second DeleteSnapshot: %v; want NotFound", err)
	}
	// A retried create of a fork (same id) is the same sandbox, even with
	// its snapshot gone since.
	again, err := e.cl.CreateSandbox(ctx, client.SandboxSpec{ID: forks[0].ID(), Tenant: "team-a", FromSnapshot: snap.GetId()})
	if err != nil || again.Info().GetCreateUnixNanos() != forks[0].Info().GetCreateUnixNanos() {
		t.Fatalf("retried create of fork 0: %v, %v; want the same sandbox", again.Info(), err)
	}
}

// snapshotIn returns snapshot id from the listing of every tenant's, or
// nil; a head that is not ready yet (a leader change) answers nil too.
func (e *env) snapshotIn(ctx context.Context, id string) *client.SandboxSnapshot {
	e.t.Helper()
	list, err := e.cl.ListSnapshots(ctx, "")
	if err != nil {
		if !errors.Is(err, errs.ErrUnavailable) && !errors.Is(err, errs.ErrNotLeader) {
			e.t.Fatal(err)
		}
		return nil
	}
	for _, s := range list {
		if s.GetId() == id {
			return s
		}
	}
	return nil
}

// The worker-down grace of these tests' snapshot images: short, so that
// reconciliation acts within the test, long enough for a snapshot's record
// to commit after its image under load.
const testSnapshotGrace = 5 * time.Second

// A worker that stops (a graceful restart, as for an upgrade) keeps its
// snapshots in the table: they are listed as unavailable, saying that
// the worker left, and a fork is refused (FailedPrecondition,
// SNAPSHOT_WORKER_DOWN) saying to retry once it is back. A snapshot
// deleted meanwhile loses its row at once; its image, which the stopped
// worker could not remove, is removed by the worker's reconciliation
// when it is back. Back with the same id, the worker makes the other
// snapshot available again, and a fork from it starts there with the
// snapshot's files. The heads' tables are replayed from their logs at the
// end (testcluster's replay check).
func TestSandboxSnapshotKeptWhileWorkerDown(t *testing.T) {
	t.Parallel() // it waits for the engine and a worker's return (see internal/testcluster)
	e := newEnvOpts(t, 2, nil, func(cfg *worker.Config) { cfg.SnapshotGrace = testSnapshotGrace }, nil)
	e.removeSnapshotImages()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	src := e.create(ctx, client.SandboxSpec{Tenant: "team-a"})
	if res, err := src.Exec(ctx, sh(`mkdir -p /work && echo prepared > /work/state`), client.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("setup exec: %v %v", res, err)
	}
	snap := e.snapshot(ctx, src, "kept")
	gone := e.snapshot(ctx, src, "deleted while its worker is away")
	wid := snap.GetWorkerId()
	idx := -1
	for i, w := range e.c.Workers() {
		if w.ID == wid {
			idx = i
		}
	}
	e.c.StopWorker(idx)
	var listed *client.SandboxSnapshot
	testcluster.WaitFor(t, 2*time.Minute, "the stopped worker's snapshot to be listed as unavailable", func() bool {
		listed = e.snapshotIn(ctx, snap.GetId())
		return listed != nil && listed.GetUnavailable() != ""
	})
	if why := listed.GetUnavailable(); !strings.HasPrefix(why, "worker "+wid+" left") && !strings.HasPrefix(why, "worker "+wid+" is down") {
		t.Fatalf("unavailable %q; want it to say that worker %s left or is down", why, wid)
	}
	_, err := e.cl.CreateSandbox(ctx, client.SandboxSpec{Tenant: "team-a", FromSnapshot: snap.GetId()})
	if !errors.Is(err, errs.ErrFailedPrecondition) || errs.ReasonOf(err) != client.ReasonSnapshotWorkerDown ||
		!strings.Contains(err.Error(), "worker "+wid) || !strings.Contains(err.Error(), "rejoins with the same id") {
		t.Fatalf("fork while its worker is away: %v (reason %q); want FailedPrecondition, %s, naming %s and saying to retry once it rejoins",
			err, errs.ReasonOf(err), client.ReasonSnapshotWorkerDown, wid)
	}
	if err := e.cl.DeleteSnapshot(ctx, gone.GetId()); err != nil {
		t.Fatalf("DeleteSnapshot while its worker is away: %v", err)
	}
	if e.snapshotIn(ctx, gone.GetId()) != nil {
		t.Fatalf("snapshot %s is listed after its delete", gone.GetId())
	}
	if !e.hasImage(gone.GetImage()) {
		t.Fatalf("image %s is gone while its worker is stopped; want it left for the worker's reconciliation", gone.GetImage())
	}

	if err := e.c.Cluster.RestartWorker(idx); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 2*time.Minute, "the snapshot to be available again", func() bool {
		listed = e.snapshotIn(ctx, snap.GetId())
		return listed != nil && listed.GetUnavailable() == ""
	})
	testcluster.WaitFor(t, time.Minute, "the back worker's reconciliation to remove the deleted snapshot's image", func() bool {
		return !e.hasImage(gone.GetImage())
	})
	if !e.hasImage(snap.GetImage()) {
		t.Fatalf("image %s of the kept snapshot is gone", snap.GetImage())
	}
	fork, err := e.cl.CreateSandbox(ctx, client.SandboxSpec{Tenant: "team-a", FromSnapshot: snap.GetId(), WaitReady: 2 * time.Minute})
	if err != nil {
		t.Fatalf("fork once the worker is back: %v", err)
	}
	if info := fork.Info(); info.GetState() != client.SandboxReady || info.GetWorkerId() != wid {
		t.Fatalf("fork: %s on %s; want READY on %s", info.GetState(), info.GetWorkerId(), wid)
	}
	if got := e.read(ctx, fork, "/work/state"); got != "prepared\n" {
		t.Fatalf("the fork reads %q; want the snapshot's \"prepared\\n\"", got)
	}
	if err := fork.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitGone(fork, time.Minute)
	e.waitGone(src, time.Minute)
}

// The worker removes the snapshot images of its own that no snapshot of
// the table names once they are older than its grace (a commit whose
// record never committed: here an image committed by hand, labelled as a
// snapshot of this worker), and keeps the image of a snapshot the table
// holds, taken after the worker connected (the leader sends the new id),
// and the images labelled as another worker's.
func TestSandboxSnapshotImageReconcile(t *testing.T) {
	t.Parallel() // it waits out a 5 s grace (see internal/testcluster)
	e := newEnvOpts(t, 1, nil, func(cfg *worker.Config) { cfg.SnapshotGrace = testSnapshotGrace }, nil)
	e.removeSnapshotImages()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	src := e.create(ctx, client.SandboxSpec{})
	snap := e.snapshot(ctx, src, "")
	rt, err := docker.New(docker.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	cid := e.containers(src.ID())[0]
	wid := src.Info().GetWorkerId()
	// Sorts after every id the heads pick ("snap-" and 16 characters), so
	// that once it is removed the round has looked at the others.
	orphan := "snap-" + strings.Repeat("z", 24)
	other := "snap-" + strings.Repeat("y", 24)
	committed := time.Now()
	for id, w := range map[string]string{orphan: wid, other: "w-other"} {
		labels := map[string]string{worker.LabelSnapshot: id, worker.LabelCluster: e.cluster, worker.LabelWorker: w}
		if _, _, err := rt.Commit(ctx, cid, spec.SnapshotImage(id), labels); err != nil {
			t.Fatal(err)
		}
	}
	testcluster.WaitFor(t, time.Minute, "the worker to remove the image no snapshot names", func() bool {
		if e.hasImage(spec.SnapshotImage(orphan)) {
			return false
		}
		if age := time.Since(committed); age < testSnapshotGrace-time.Second {
			t.Fatalf("the image no snapshot names was removed %v after its commit, within the grace of %v", age, testSnapshotGrace)
		}
		return true
	})
	if !e.hasImage(snap.GetImage()) {
		t.Fatalf("image %s of snapshot %s in the table was removed", snap.GetImage(), snap.GetId())
	}
	if !e.hasImage(spec.SnapshotImage(other)) {
		t.Fatalf("the image labelled as worker w-other's was removed")
	}
	if list, err := e.cl.ListSnapshots(ctx, ""); err != nil || len(list) != 1 || list[0].GetId() != snap.GetId() || list[0].GetUnavailable() != "" {
		t.Fatalf("ListSnapshots: %v, %v; want the one snapshot, available", list, err)
	}
}

// Without workers (no Docker): snapshots of a sandbox that is not READY
// are refused as not ready; a fork naming an unknown snapshot is
// NotFound; one naming an image too is InvalidArgument; the list is empty.
func TestSnapshotAPIWithoutWorkers(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := cl.CreateSandbox(ctx, client.SandboxSpec{ID: "sbx-snapapi", Image: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx, ""); !errors.Is(err, errs.ErrFailedPrecondition) || errs.ReasonOf(err) != client.ReasonSandboxNotReady {
		t.Fatalf("snapshot of a PENDING sandbox: %v (reason %q); want FailedPrecondition, %s", err, errs.ReasonOf(err), client.ReasonSandboxNotReady)
	}
	if _, err := s.Snapshot(ctx, "bad\nname"); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("snapshot with a bad name: %v; want InvalidArgument", err)
	}
	if _, err := cl.CreateSandbox(ctx, client.SandboxSpec{FromSnapshot: "snap-nope"}); !errors.Is(err, errs.ErrNotFound) || errs.ReasonOf(err) != client.ReasonSnapshotNotFound {
		t.Fatalf("fork of an unknown snapshot: %v (reason %q); want NotFound, %s", err, errs.ReasonOf(err), client.ReasonSnapshotNotFound)
	}
	if _, err := cl.CreateSandbox(ctx, client.SandboxSpec{Image: "busybox", FromSnapshot: "snap-nope"}); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("a fork naming an image too: %v; want InvalidArgument", err)
	}
	if err := cl.DeleteSnapshot(ctx, "snap-nope"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("delete of an unknown snapshot: %v; want NotFound", err)
	}
	if list, err := cl.ListSnapshots(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("ListSnapshots: %v, %v; want none", list, err)
	}
}

// SetTimeout (no Docker: the sandbox stays PENDING, its graph live):
// longer, then refused beyond 7 days from creation saying the most it may
// be, then 1 s: the leader's deadline loop ends it EXPIRED
// (CANCELLED_DEADLINE); an ended sandbox's timeout is refused.
func TestSandboxSetTimeoutWithoutWorkers(t *testing.T) {
	t.Parallel() // it waits out a 1 s lifetime (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := cl.CreateSandbox(ctx, client.SandboxSpec{Image: "busybox", Lifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetTimeout(ctx, 2*time.Hour); err != nil {
		t.Fatalf("SetTimeout(2h): %v", err)
	}
	if l := s.Info().GetLifetimeSeconds(); l < 7200 || l > 7200+60 {
		t.Fatalf("lifetime %d s after SetTimeout(2h); want 7200 s plus its age", l)
	}
	err = s.SetTimeout(ctx, 7*24*time.Hour)
	if !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), "give at most") {
		t.Fatalf("SetTimeout(7 days) of a sandbox already alive: %v; want InvalidArgument saying the most", err)
	}
	if err := s.SetTimeout(ctx, 8*24*time.Hour); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("SetTimeout(8 days): %v; want InvalidArgument", err)
	}
	if err := s.SetTimeout(ctx, time.Second); err != nil {
		t.Fatalf("SetTimeout(1s): %v", err)
	}
	var info *client.SandboxInfo
	testcluster.WaitFor(t, 30*time.Second, "the sandbox to expire", func() bool {
		info, err = s.Refresh(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.GetState() == client.SandboxExpired
	})
	if info.GetReasonCode() != wire.ReasonCode_REASON_CODE_CANCELLED_DEADLINE {
		t.Fatalf("expired with %s %q; want CANCELLED_DEADLINE", info.GetReasonCode(), info.GetReason())
	}
	if err := s.SetTimeout(ctx, time.Hour); !errors.Is(err, errs.ErrFailedPrecondition) || errs.ReasonOf(err) != client.ReasonSandboxExpired {
		t.Fatalf("SetTimeout of an expired sandbox: %v (reason %q); want FailedPrecondition, %s", err, errs.ReasonOf(err), client.ReasonSandboxExpired)
	}
	if _, err := cl.GetSandbox(ctx, "sbx-nosuch"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("GetSandbox of an unknown id: %v; want NotFound", err)
	}
}
