package spec

import (
	"io"
	"maps"
	"path"
	"strings"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// Sandboxes (docs/sandboxes.md): what a SandboxCreateSpec becomes in the
// task table, the bounds of every request field, and the state a sandbox
// shows, derived from its task. Heads, workers and the client share them.

const (
	// SandboxIDPrefix starts every sandbox id (and its graph's id).
	SandboxIDPrefix = "sbx-"
	// SandboxTaskName is the name of a sandbox graph's one task: the
	// sandbox's task id is "<sandbox id>/box".
	SandboxTaskName = "box"
	// SandboxMaxIDSuffix is the longest id after the prefix.
	SandboxMaxIDSuffix = 64
	// SandboxDefaultLifetimeSeconds is a sandbox's lifetime when the
	// spec gives none: one hour.
	SandboxDefaultLifetimeSeconds = 3600
	// SandboxMaxSeconds bounds lifetime_seconds and idle_timeout_seconds:
	// 7 days.
	SandboxMaxSeconds = 7 * 24 * 3600
	// SandboxMaxWaitReadyMillis bounds CreateSandbox's wait_ready_millis:
	// 10 minutes.
	SandboxMaxWaitReadyMillis = 10 * 60 * 1000
	// SandboxMaxStdin bounds an exec's stdin: 16 MiB.
	SandboxMaxStdin = 16 << 20
	// SandboxMaxOutput is how much of each of an exec's stdout and stderr
	// is kept: 16 MiB; the rest is dropped and the exit says truncated.
	SandboxMaxOutput = 16 << 20
	// SandboxMaxFile bounds a file written or read: 64 MiB.
	SandboxMaxFile = 64 << 20
	// SandboxMaxPath bounds a file path or an exec's cwd: 4096 bytes.
	SandboxMaxPath = 4096
	// SandboxMaxArchive bounds a tar stream uploaded into or downloaded
	// from a sandbox (UploadArchive, DownloadArchive): 256 MiB.
	SandboxMaxArchive = 256 << 20
	// SandboxArchiveChunk bounds one message of a tar stream: 1 MiB.
	SandboxArchiveChunk = 1 << 20
	// SandboxMaxPageSize bounds ListSandboxes' page_size: 1000.
	SandboxMaxPageSize = 1000
	// SandboxDefaultExecTimeoutMillis is an exec's timeout when it gives
	// none: 10 minutes; SandboxMaxExecTimeoutMillis bounds it: 24 hours.
	SandboxDefaultExecTimeoutMillis = 10 * 60 * 1000
	SandboxMaxExecTimeoutMillis     = 24 * 3600 * 1000
)

// SandboxIdleCommand is the command a sandbox's container runs: a shell
// loop of sleeps that keeps it alive doing nothing, using only the image's
// sh and sleep (busybox's do).
var SandboxIdleCommand = []string{"/bin/sh", "-c", "while :; do sleep 3600; done"}

// NewSandboxID returns "sbx-" and 16 characters of Crockford base32 read
// from entropy (crypto/rand.Reader in production).
func NewSandboxID(entropy io.Reader) string {
	var b [16]byte
	if _, err := io.ReadFull(entropy, b[:]); err != nil {
		panic("spec: reading entropy for a sandbox id: " + err.Error())
	}
	var sb strings.Builder
	sb.WriteString(SandboxIDPrefix)
	for _, c := range b {
		sb.WriteByte(crockford[c%32])
	}
	return sb.String()
}

// CheckSandboxID checks that id is "sbx-" then 1 to 64 of [a-z0-9];
// errors are InvalidArgument naming the field.
func CheckSandboxID(field, id string) error {
	rest, ok := strings.CutPrefix(id, SandboxIDPrefix)
	if !ok || rest == "" || len(rest) > SandboxMaxIDSuffix {
		return errs.New(errs.InvalidArgument, "%s %q is not a sandbox id: want %q then 1 to %d of [a-z0-9], as CreateSandbox returns", field, id, SandboxIDPrefix, SandboxMaxIDSuffix)
	}
	for _, c := range rest {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return errs.New(errs.InvalidArgument, "%s %q is not a sandbox id: %q is not in [a-z0-9]", field, id, c)
		}
	}
	return nil
}

// SandboxTaskID returns the task id of sandbox id.
func SandboxTaskID(id string) string { return id + "/" + SandboxTaskName }

// SandboxGraph checks s's own bounds and returns the graph that holds the
// sandbox: id s.Id (which must be set), one task "box" running
// SandboxIdleCommand with s's image (none yet for a sandbox from a
// snapshot: ForkFrom sets it), resources, env, working dir and
// network, no retries, TaskSpec.sandbox set, and deadline_seconds the
// lifetime. The caller validates the graph with Validate, which bounds the
// rest (env, labels, network, resources). Errors: InvalidArgument naming
// the field.
func SandboxGraph(s *wire.SandboxCreateSpec) (*wire.GraphSpec, error) {
	if s == nil {
		return nil, errs.New(errs.InvalidArgument, "sandbox: no spec given; send a SandboxCreateSpec with at least an image")
	}
	if err := CheckSandboxID("sandbox id", s.GetId()); err != nil {
		return nil, err
	}
	switch {
	case s.GetFromSnapshot() != "" && s.GetImage() != "":
		return nil, errs.New(errs.InvalidArgument, "sandbox %s: both image %q and from_snapshot %q given; give one (a snapshot brings its own image)", s.GetId(), s.GetImage(), s.GetFromSnapshot())
	case s.GetFromSnapshot() != "":
		if err := CheckSnapshotID("sandbox "+s.GetId()+": from_snapshot", s.GetFromSnapshot()); err != nil {
			return nil, err
		}
	case s.GetImage() == "":
		return nil, errs.New(errs.InvalidArgument, "sandbox %s: image is empty; name the image to run, e.g. python:3.12-slim", s.GetId())
	}
	for _, f := range []struct {
		name string
		v    int64
		max  int64
	}{
		{"lifetime_seconds", s.GetLifetimeSeconds(), SandboxMaxSeconds},
		{"idle_timeout_seconds", s.GetIdleTimeoutSeconds(), SandboxMaxSeconds},
		{"cpu_millis", s.GetCpuMillis(), 1 << 40},
		{"memory_bytes", s.GetMemoryBytes(), 1 << 50},
	} {
		if f.v < 0 || f.v > f.max {
			return nil, errs.New(errs.InvalidArgument, "sandbox %s: %s %d is out of range: 0 to %d", s.GetId(), f.name, f.v, f.max)
		}
	}
	if wd := s.GetWorkingDir(); wd != "" && (!path.IsAbs(wd) || len(wd) > SandboxMaxPath) {
		return nil, errs.New(errs.InvalidArgument, "sandbox %s: working_dir %q must be an absolute path of at most %d bytes", s.GetId(), wd, SandboxMaxPath)
	}
	life := s.GetLifetimeSeconds()
	if life == 0 {
		life = SandboxDefaultLifetimeSeconds
	}
	task := &wire.TaskSpec{
		Name:       SandboxTaskName,
		Image:      s.GetImage(),
		Command:    SandboxIdleCommand,
		Env:        maps.Clone(s.GetEnv()),
		WorkingDir: s.GetWorkingDir(),
		Network:    s.GetNetwork(),
		Runtime:    "docker",
		Sandbox:    &wire.SandboxSpec{IdleTimeoutSeconds: s.GetIdleTimeoutSeconds()},
	}
	if id := s.GetFromSnapshot(); id != "" {
		// The caller (the head) resolves the snapshot: ForkFrom.
		task.Sandbox.FromSnapshot = id
	}
	if s.GetCpuMillis() != 0 || s.GetMemoryBytes() != 0 {
		task.Resources = &wire.Resources{CpuMillis: s.GetCpuMillis(), MemoryBytes: s.GetMemoryBytes()}
	}
	return &wire.GraphSpec{
		Id:              s.GetId(),
		Tenant:          s.GetTenant(),
		Labels:          maps.Clone(s.GetLabels()),
		DeadlineSeconds: life,
		Tasks:           []*wire.TaskSpec{task},
		Name:            "sandbox " + s.GetId(),
	}, nil
}

// CheckSandboxExec checks an exec request's bounds. Errors: InvalidArgument
// naming the field.
func CheckSandboxExec(r *wire.SandboxExecRequest) error {
	if err := CheckSandboxID("sandbox_id", r.GetSandboxId()); err != nil {
		return err
	}
	lim := DefaultLimits()
	switch n := len(r.GetArgv()); {
	case n == 0:
		return errs.New(errs.InvalidArgument, "exec in %s: argv is empty; give the program and its arguments, e.g. [\"sh\", \"-c\", \"ls\"]", r.GetSandboxId())
	case n > lim.MaxCommandArgs:
		return errs.New(errs.InvalidArgument, "exec in %s: argv has %d elements; the limit is %d", r.GetSandboxId(), n, lim.MaxCommandArgs)
	}
	if r.GetArgv()[0] == "" {
		return errs.New(errs.InvalidArgument, "exec in %s: argv[0] is empty; it names the program", r.GetSandboxId())
	}
	if n := len(r.GetEnv()); n > lim.MaxEnvEntries {
		return errs.New(errs.InvalidArgument, "exec in %s: env has %d entries; the limit is %d", r.GetSandboxId(), n, lim.MaxEnvEntries)
	}
	size := 0
	for k, v := range r.GetEnv() {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
			return errs.New(errs.InvalidArgument, "exec in %s: env name %q is empty or holds '=' or NUL", r.GetSandboxId(), k)
		}
		size += len(k) + len(v)
	}
	if size > lim.MaxEnvBytes {
		return errs.New(errs.InvalidArgument, "exec in %s: env holds %d bytes; the limit is %d", r.GetSandboxId(), size, lim.MaxEnvBytes)
	}
	if c := r.GetCwd(); c != "" && (!path.IsAbs(c) || len(c) > SandboxMaxPath) {
		return errs.New(errs.InvalidArgument, "exec in %s: cwd %q must be an absolute path of at most %d bytes", r.GetSandboxId(), c, SandboxMaxPath)
	}
	if n := len(r.GetStdin()); n > SandboxMaxStdin {
		return errs.New(errs.InvalidArgument, "exec in %s: stdin of %d bytes; the limit is %d (write a file instead)", r.GetSandboxId(), n, SandboxMaxStdin)
	}
	if t := r.GetTimeoutMillis(); t < 0 || t > SandboxMaxExecTimeoutMillis {
		return errs.New(errs.InvalidArgument, "exec in %s: timeout_millis %d is out of range: 0 (10 minutes) to %d", r.GetSandboxId(), t, SandboxMaxExecTimeoutMillis)
	}
	return nil
}

// CheckSandboxPath checks a file path of a sandbox request: absolute, not
// the root, at most SandboxMaxPath bytes, no NUL. Errors: InvalidArgument.
func CheckSandboxPath(id, p string) error {
	if !path.IsAbs(p) || path.Clean(p) == "/" || len(p) > SandboxMaxPath || strings.Contains(p, "\x00") {
		return errs.New(errs.InvalidArgument, "sandbox %s: path %q must be an absolute file path of at most %d bytes, e.g. /tmp/main.py", id, p, SandboxMaxPath)
	}
	return nil
}

// SandboxState derives a sandbox's state from its task's state and reason
// code and whether its running attempt is marked paused: QUEUED and
// PENDING are PENDING, ASSIGNED is STARTING, RUNNING is READY, or PAUSED
// when paused; a CANCELLED task is CLOSED, or EXPIRED when its graph's
// deadline (the lifetime) cancelled it; FAILED with SANDBOX_IDLE (or
// TIMED_OUT) is EXPIRED; FAILED with SANDBOX_LOST or a lost worker's code
// is LOST; any other end (FAILED, or a SUCCEEDED box whose loop exited)
// is FAILED. paused counts only while the task is RUNNING.
func SandboxState(task wire.TaskState, code wire.ReasonCode, paused bool) wire.SandboxState {
	switch task {
	case wire.TaskState_TASK_STATE_PENDING, wire.TaskState_TASK_STATE_QUEUED:
		return wire.SandboxState_SANDBOX_STATE_PENDING
	case wire.TaskState_TASK_STATE_ASSIGNED:
		return wire.SandboxState_SANDBOX_STATE_STARTING
	case wire.TaskState_TASK_STATE_RUNNING:
		if paused {
			return wire.SandboxState_SANDBOX_STATE_PAUSED
		}
		return wire.SandboxState_SANDBOX_STATE_READY
	case wire.TaskState_TASK_STATE_CANCELLED:
		if code == wire.ReasonCode_REASON_CODE_CANCELLED_DEADLINE {
			return wire.SandboxState_SANDBOX_STATE_EXPIRED
		}
		return wire.SandboxState_SANDBOX_STATE_CLOSED
	case wire.TaskState_TASK_STATE_TIMED_OUT:
		return wire.SandboxState_SANDBOX_STATE_EXPIRED
	case wire.TaskState_TASK_STATE_FAILED:
		switch code {
		case wire.ReasonCode_REASON_CODE_SANDBOX_IDLE:
			return wire.SandboxState_SANDBOX_STATE_EXPIRED
		case wire.ReasonCode_REASON_CODE_SANDBOX_LOST, wire.ReasonCode_REASON_CODE_WORKER_LOST,
			wire.ReasonCode_REASON_CODE_LEASE_LAPSED, wire.ReasonCode_REASON_CODE_NOT_ON_WORKER,
			wire.ReasonCode_REASON_CODE_STOPPED_BY_WORKER:
			return wire.SandboxState_SANDBOX_STATE_LOST
		}
	}
	return wire.SandboxState_SANDBOX_STATE_FAILED
}

// SandboxLive reports whether a sandbox in state s may still become or be
// READY (PENDING, STARTING, READY, PAUSED).
func SandboxLive(s wire.SandboxState) bool {
	switch s {
	case wire.SandboxState_SANDBOX_STATE_PENDING, wire.SandboxState_SANDBOX_STATE_STARTING, wire.SandboxState_SANDBOX_STATE_READY,
		wire.SandboxState_SANDBOX_STATE_PAUSED:
		return true
	}
	return false
}

// ForkFrom makes sandbox graph g (SandboxGraph of a spec with
// from_snapshot) run snapshot snap's image on snap's worker: the task's
// image becomes the snapshot's and SandboxSpec.snapshot_worker names the
// worker, the only one the leader places it on. The head calls it after
// checking that the snapshot exists and its worker is alive.
func ForkFrom(g *wire.GraphSpec, snap *wire.Snapshot) {
	t := g.GetTasks()[0]
	t.Image = snap.GetImage()
	t.Sandbox.SnapshotWorker = snap.GetWorkerId()
}
