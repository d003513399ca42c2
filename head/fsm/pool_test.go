package fsm

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
	"google.golang.org/protobuf/proto"
)

func poolTargets(f *testFSM) string {
	var parts []string
	for _, p := range f.View().PoolTargets() {
		parts = append(parts, fmt.Sprintf("%s/%s=%d@%d %v", p.GetImage(), p.GetTenant(), p.GetSize(), p.GetModifyIndex(), p.GetWorkerSelector()))
	}
	return strings.Join(parts, " ")
}

// Pre-warm targets are set, replaced and removed through OpPoolWarm; bad
// targets are refused and change nothing; targets survive a snapshot.
func TestPoolWarm(t *testing.T) {
	f := newTestFSM(t, 0)
	warm := func(tg *wire.PoolTarget) *PoolWarmResult {
		t.Helper()
		return f.ok(OpPoolWarm, &wire.PoolWarmCommand{Target: tg, UnixNanos: f.now()}).(*PoolWarmResult)
	}
	warm(&wire.PoolTarget{Image: "swe/django:1", Size: 4, WorkerSelector: map[string]string{"zone": "a"}})
	warm(&wire.PoolTarget{Image: "busybox", Size: 2, Tenant: "team-a", CpuMillis: 500})
	warm(&wire.PoolTarget{Image: "swe/django:1", Size: 8})
	if got, want := poolTargets(f), "busybox/team-a=2@2 map[] swe/django:1/default=8@3 map[]"; got != want {
		t.Fatalf("targets %q, want %q", got, want)
	}
	if got := f.View().PoolTargetsFor(map[string]string{"zone": "b"}); len(got) != 2 {
		t.Fatalf("targets for zone b: %v", got)
	}
	for _, bad := range []*wire.PoolTarget{nil, {Size: 1}, {Image: "a b", Size: 1}, {Image: "x", Size: 65}, {Image: "x", Size: -1},
		{Image: "x", Size: 1, CpuMillis: -1}, {Image: "x", Size: 1, WorkerSelector: map[string]string{"": "v"}}} {
		f.refused(errs.InvalidArgument, OpPoolWarm, &wire.PoolWarmCommand{Target: bad})
	}

	snap := snapshotBytes(t, f.View())
	dst := newTestFSM(t, 0)
	if err := dst.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
		t.Fatal(err)
	}
	if got, want := poolTargets(dst), poolTargets(f); got != want {
		t.Fatalf("restored targets %q, want %q", got, want)
	}
	if !proto.Equal(dst.View().PoolTargets()[0], f.View().PoolTargets()[0]) {
		t.Fatal("restored target differs")
	}

	if r := warm(&wire.PoolTarget{Image: "busybox", Tenant: "team-a"}); !r.Removed {
		t.Fatal("size 0 did not remove the target")
	}
	if r := warm(&wire.PoolTarget{Image: "busybox", Tenant: "team-a"}); r.Removed {
		t.Fatal("removing a missing target reports a removal")
	}
	if got, want := poolTargets(f), "swe/django:1/default=8@3 map[]"; got != want {
		t.Fatalf("targets %q, want %q", got, want)
	}
}
