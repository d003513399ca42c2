package spec

import (
	"io"
	"strings"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// Snapshot bounds (docs/sandboxes.md, "Snapshots and forks").
const (
	// SnapshotIDPrefix starts every snapshot id.
	SnapshotIDPrefix = "snap-"
	// SnapshotMaxIDSuffix bounds the part of an id after the prefix.
	SnapshotMaxIDSuffix = 64
	// SnapshotMaxName bounds Snapshot.name, in bytes.
	SnapshotMaxName = 128
	// SnapshotImageRepo is the repository of every snapshot's image on its
	// worker: "megaflow-snapshot:<snapshot id>".
	SnapshotImageRepo = "megaflow-snapshot"
	// SnapshotDefaultMaxPerTenant is how many snapshots a tenant may hold
	// when the head's configuration says nothing else.
	SnapshotDefaultMaxPerTenant = 64
	// SnapshotMaxPerTenantLimit bounds that setting.
	SnapshotMaxPerTenantLimit = 100_000
)

// NewSnapshotID returns "snap-" and 16 characters of Crockford base32 read
// from entropy (crypto/rand.Reader in production).
func NewSnapshotID(entropy io.Reader) string {
	return SnapshotIDPrefix + strings.TrimPrefix(NewSandboxID(entropy), SandboxIDPrefix)
}

// SnapshotImage returns the image reference of snapshot id on its worker.
func SnapshotImage(id string) string { return SnapshotImageRepo + ":" + id }

// IsSnapshotImage reports whether image reference ref names a snapshot's
// image: the repository SnapshotImageRepo, with any tag or digest, written
// short or with Docker Hub's registry and library/ prefixes. Only a
// sandbox created from a snapshot runs one (state.Txn.CheckForks).
func IsSnapshotImage(ref string) bool {
	name, _, _ := strings.Cut(ref, "@")
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name = name[:i]
	}
	for _, p := range []string{"docker.io/", "index.docker.io/", "registry-1.docker.io/"} {
		if rest, ok := strings.CutPrefix(name, p); ok {
			name = rest
			break
		}
	}
	name = strings.TrimPrefix(name, "library/")
	return name == SnapshotImageRepo
}

// CheckClientGraph refuses what only the heads may put in a graph: a
// task's SandboxSpec.from_snapshot or snapshot_worker (CreateSandbox with
// from_snapshot fills them: ForkFrom) and a snapshot's image
// (IsSnapshotImage). The head calls it on every SubmitGraph a client
// sends, beside Validate. Errors: InvalidArgument naming the task and
// what to do instead.
func CheckClientGraph(g *wire.GraphSpec) error {
	for i, t := range g.GetTasks() {
		sb := t.GetSandbox()
		switch {
		case sb.GetSnapshotWorker() != "":
			return errs.New(errs.InvalidArgument, "task %d (%q): sandbox.snapshot_worker is set by the heads, never by a client: create a sandbox from a snapshot with CreateSandbox's from_snapshot (megaflow sandbox create --from-snapshot)", i, t.GetName())
		case sb.GetFromSnapshot() != "":
			return errs.New(errs.InvalidArgument, "task %d (%q): sandbox.from_snapshot is set by the heads, never in a submitted graph: create a sandbox from a snapshot with CreateSandbox's from_snapshot (megaflow sandbox create --from-snapshot)", i, t.GetName())
		case IsSnapshotImage(t.GetImage()):
			return errs.New(errs.InvalidArgument, "task %d (%q): image %q is a sandbox snapshot's: create a sandbox from the snapshot with CreateSandbox's from_snapshot (megaflow sandbox create --from-snapshot)", i, t.GetName(), t.GetImage())
		}
	}
	return nil
}

// CheckSnapshotID checks that id is "snap-" then 1 to 64 of [a-z0-9];
// errors are InvalidArgument naming the field.
func CheckSnapshotID(field, id string) error {
	rest, ok := strings.CutPrefix(id, SnapshotIDPrefix)
	if !ok || rest == "" || len(rest) > SnapshotMaxIDSuffix {
		return errs.New(errs.InvalidArgument, "%s %q is not a snapshot id: want %q then 1 to %d of [a-z0-9], as SnapshotSandbox returns", field, id, SnapshotIDPrefix, SnapshotMaxIDSuffix)
	}
	for _, c := range rest {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return errs.New(errs.InvalidArgument, "%s %q is not a snapshot id: %q is not in [a-z0-9]", field, id, c)
		}
	}
	return nil
}

// CheckSnapshotName checks a snapshot's name: at most 128 bytes of
// printable ASCII. Errors: InvalidArgument.
func CheckSnapshotName(name string) error {
	if len(name) > SnapshotMaxName {
		return errs.New(errs.InvalidArgument, "snapshot name of %d bytes: at most %d", len(name), SnapshotMaxName)
	}
	if i := strings.IndexFunc(name, func(r rune) bool { return r < ' ' || r >= 0x7f }); i >= 0 {
		return errs.New(errs.InvalidArgument, "snapshot name %q: byte %d is not printable ASCII", name, i)
	}
	return nil
}

// CheckSnapshot checks a snapshot row's fields before it enters the table:
// its id, name, sandbox id, worker, image (SnapshotImage of its id),
// tenant and sizes, and that unavailable is empty. Errors: InvalidArgument naming the field.
func CheckSnapshot(s *wire.Snapshot) error {
	if s == nil {
		return errs.New(errs.InvalidArgument, "snapshot: none given")
	}
	if err := CheckSnapshotID("snapshot id", s.GetId()); err != nil {
		return err
	}
	if err := CheckSnapshotName(s.GetName()); err != nil {
		return err
	}
	if err := CheckSandboxID("snapshot "+s.GetId()+": sandbox_id", s.GetSandboxId()); err != nil {
		return err
	}
	switch {
	case s.GetTenant() == "" || len(s.GetTenant()) > 128:
		return errs.New(errs.InvalidArgument, "snapshot %s: tenant %q: 1 to 128 bytes", s.GetId(), s.GetTenant())
	case s.GetWorkerId() == "" || len(s.GetWorkerId()) > 256:
		return errs.New(errs.InvalidArgument, "snapshot %s: worker_id %q: 1 to 256 bytes", s.GetId(), s.GetWorkerId())
	case s.GetImage() != SnapshotImage(s.GetId()):
		return errs.New(errs.InvalidArgument, "snapshot %s: image %q: want %q", s.GetId(), s.GetImage(), SnapshotImage(s.GetId()))
	case len(s.GetImageId()) > 256:
		return errs.New(errs.InvalidArgument, "snapshot %s: image_id of %d bytes: at most 256", s.GetId(), len(s.GetImageId()))
	case s.GetSizeBytes() < 0 || s.GetCreateUnixNanos() < 0:
		return errs.New(errs.InvalidArgument, "snapshot %s: size_bytes %d or create_unix_nanos %d is negative", s.GetId(), s.GetSizeBytes(), s.GetCreateUnixNanos())
	case s.GetUnavailable() != "":
		return errs.New(errs.InvalidArgument, "snapshot %s: unavailable %q is set: the heads fill it in their answers only, never in a row", s.GetId(), s.GetUnavailable())
	}
	return nil
}
