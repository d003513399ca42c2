package worker

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/fake"
)

// Which sandbox assignments the warm pool may serve: a sandbox, not a
// fork, on a worker with a pool whose keeper is an idle loop.
func TestWarmServes(t *testing.T) {
	rt := fake.New(clock.Real())
	withPool := &Worker{cfg: Config{PoolKeeper: DefaultPoolKeeper}, rt: rt}
	withPool.pool = &pool{w: withPool}
	imageKeeper := &Worker{cfg: Config{PoolKeeper: []string{}}, rt: rt}
	imageKeeper.pool = &pool{w: imageKeeper}
	noPool := &Worker{cfg: Config{PoolKeeper: DefaultPoolKeeper}, rt: rt}
	sbx := func(sb *wire.SandboxSpec, mode wire.ExecutionMode) *wire.Assignment {
		return &wire.Assignment{Spec: &wire.TaskSpec{Image: "i", Sandbox: sb, Mode: mode}}
	}
	eph := wire.ExecutionMode_EXECUTION_MODE_UNSPECIFIED
	for _, c := range []struct {
		name string
		w    *Worker
		a    *wire.Assignment
		want bool
	}{
		{"sandbox", withPool, sbx(&wire.SandboxSpec{}, eph), true},
		{"a task, not a sandbox", withPool, sbx(nil, eph), false},
		{"fork", withPool, sbx(&wire.SandboxSpec{FromSnapshot: "snap-a", SnapshotWorker: "w1"}, eph), false},
		{"fork, worker not resolved", withPool, sbx(&wire.SandboxSpec{FromSnapshot: "snap-a"}, eph), false},
		{"no pool", noPool, sbx(&wire.SandboxSpec{}, eph), false},
		{"keeper is the image's command", imageKeeper, sbx(&wire.SandboxSpec{}, eph), false},
		{"persistent mode", withPool, sbx(&wire.SandboxSpec{}, wire.ExecutionMode_EXECUTION_MODE_PERSISTENT), false},
	} {
		if got := c.w.warmServes(c.a); got != c.want {
			t.Errorf("%s: warmServes %v, want %v", c.name, got, c.want)
		}
	}
}

// A warm container is LabelPool without attempt labels; a fork's
// container, which inherits LabelPool from a warm-served sandbox's
// snapshot image, is an attempt's.
func TestIsWarm(t *testing.T) {
	for _, c := range []struct {
		labels map[string]string
		want   bool
	}{
		{map[string]string{LabelPool: "abc"}, true},
		{map[string]string{LabelPool: "abc", LabelTask: "sbx-f/box", LabelAttempt: "1"}, false},
		{map[string]string{LabelTask: "g/t", LabelAttempt: "1"}, false},
		{nil, false},
	} {
		if got := isWarm(c.labels); got != c.want {
			t.Errorf("isWarm(%v) = %v, want %v", c.labels, got, c.want)
		}
	}
}

// take serves a sandbox only from an idle container that never ran an
// exec and is bound to no session, the newest first, and takes it out of
// the pool.
func TestPoolTakeOnlyUnused(t *testing.T) {
	w := &Worker{}
	p := &pool{w: w, keys: map[poolKey]*keyPool{}, changed: make(chan struct{})}
	key := poolKey{image: "i", tenant: "t"}
	old := &warm{id: "old", key: key}
	used := &warm{id: "used", key: key, used: true}
	bound := &warm{id: "bound", key: key, session: "g\x00s"}
	newest := &warm{id: "new", key: key}
	kp := &keyPool{all: map[string]*warm{"old": old, "used": used, "bound": bound, "new": newest},
		idle: []*warm{old, newest, used, bound}}
	p.keys[key] = kp
	var claimed []string
	take := func(k poolKey) string {
		c := p.take(k, func(c *warm) { claimed = append(claimed, c.id) })
		if c == nil {
			return ""
		}
		return c.id
	}
	for i, want := range []string{"new", "old", ""} {
		if got := take(key); got != want {
			t.Fatalf("take %d: %q, want %q", i+1, got, want)
		}
	}
	if got := take(poolKey{image: "other"}); got != "" {
		t.Fatalf("take of another key: %q", got)
	}
	if len(kp.all) != 2 || kp.all["used"] == nil || kp.all["bound"] == nil || len(kp.idle) != 2 {
		t.Fatalf("pool after the takes: all %v idle %d; want used and bound left", kp.all, len(kp.idle))
	}
	if len(claimed) != 2 {
		t.Fatalf("claimed %v", claimed)
	}
}

// dropClaim removes what a warm-served sandbox wrote under its files mount
// (the warm container's files directory) with the claim: its files are the
// user's, and a non-empty directory survived os.Remove (found by a tester:
// a note written under /megaflow/attempts stayed on the worker's disk).
func TestDropClaimRemovesTheSandboxsFiles(t *testing.T) {
	dir := t.TempDir()
	w := &Worker{cfg: Config{DataDir: dir}, claims: map[string]*warmClaim{}}
	cl := &warmClaim{ContainerID: "c1", PoolName: "mf-w1-p1", Task: "sbx-a/box", Attempt: 1}
	files := poolFilesDir(dir, cl.PoolName)
	if err := os.MkdirAll(filepath.Join(files, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(files, "note"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeClaim(dir, cl); err != nil {
		t.Fatal(err)
	}
	w.claims[cl.ContainerID] = cl
	w.dropClaim(cl.ContainerID)
	for _, p := range []string{files, claimPath(dir, cl.ContainerID)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after dropClaim: %v; want it gone", p, err)
		}
	}
}
