package spec

import (
	"errors"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

func TestIsSnapshotImage(t *testing.T) {
	for ref, want := range map[string]bool{
		"megaflow-snapshot:snap-a":                         true,
		"megaflow-snapshot":                                true,
		"megaflow-snapshot@sha256:0123":                    true,
		"megaflow-snapshot:snap-a@sha256:0123":             true,
		"library/megaflow-snapshot:snap-a":                 true,
		"docker.io/megaflow-snapshot:snap-a":               true,
		"docker.io/library/megaflow-snapshot:snap-a":       true,
		"index.docker.io/library/megaflow-snapshot:latest": true,
		"registry-1.docker.io/library/megaflow-snapshot:x": true,
		"busybox":                                              false,
		"megaflow-snapshots:snap-a":                            false,
		"acme/megaflow-snapshot:snap-a":                        false,
		"registry.local:5000/megaflow-snapshot:snap-a":         false,
		"registry.local:5000/library/megaflow-snapshot:snap-a": false,
		"": false,
	} {
		if got := IsSnapshotImage(ref); got != want {
			t.Errorf("IsSnapshotImage(%q) = %v; want %v", ref, got, want)
		}
	}
}

// A client's graph may not carry the fields only the heads set for a
// sandbox created from a snapshot, nor a snapshot's image; the error says
// to use CreateSandbox's from_snapshot.
func TestCheckClientGraph(t *testing.T) {
	task := func(image string, sb *wire.SandboxSpec) *wire.GraphSpec {
		return &wire.GraphSpec{Id: "g", Tasks: []*wire.TaskSpec{{Name: "ok", Image: "busybox"}, {Name: "t", Image: image, Sandbox: sb}}}
	}
	for name, c := range map[string]struct {
		g    *wire.GraphSpec
		says string // "" for accepted
	}{
		"plain":           {task("busybox", nil), ""},
		"sandbox":         {task("busybox", &wire.SandboxSpec{IdleTimeoutSeconds: 60}), ""},
		"snapshot_worker": {task("busybox", &wire.SandboxSpec{SnapshotWorker: "w1"}), "sandbox.snapshot_worker is set by the heads"},
		"both":            {task("megaflow-snapshot:snap-a", &wire.SandboxSpec{FromSnapshot: "snap-a", SnapshotWorker: "w1"}), "sandbox.snapshot_worker is set by the heads"},
		"from_snapshot":   {task("busybox", &wire.SandboxSpec{FromSnapshot: "snap-a"}), "sandbox.from_snapshot is set by the heads"},
		"snapshot image":  {task("docker.io/library/megaflow-snapshot:snap-a", nil), "is a sandbox snapshot's"},
	} {
		err := CheckClientGraph(c.g)
		switch {
		case c.says == "" && err != nil:
			t.Errorf("%s: %v; want it accepted", name, err)
		case c.says != "" && (!errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.says) ||
			!strings.Contains(err.Error(), `task 1 ("t")`) || !strings.Contains(err.Error(), "from_snapshot (megaflow sandbox create --from-snapshot)")):
			t.Errorf("%s: %v; want InvalidArgument naming task 1, saying %q and what to use", name, err, c.says)
		}
	}
}

// A row may not carry unavailable: the heads fill it in answers only.
func TestCheckSnapshotUnavailable(t *testing.T) {
	s := &wire.Snapshot{Id: "snap-a", Tenant: "t", SandboxId: "sbx-a", WorkerId: "w1", Image: SnapshotImage("snap-a")}
	if err := CheckSnapshot(s); err != nil {
		t.Fatalf("a valid row: %v", err)
	}
	s.Unavailable = "worker w1 is down"
	if err := CheckSnapshot(s); !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), "unavailable") {
		t.Fatalf("a row with unavailable set: %v; want InvalidArgument", err)
	}
}
