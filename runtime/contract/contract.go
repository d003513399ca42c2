// Package contract is the one small interface every container runtime of
// MegaFlow implements (runtime/docker, runtime/process, runtime/fake), and
// the types that cross it. The worker drives a Runtime; nothing else does.
// There is no root runtime package, so nothing shadows Go's runtime.
package contract

import (
	"context"
	"errors"
	"io"
	"time"
)

// Runtime runs attempts of tasks as isolated processes: one container (or
// process group) per attempt. Every method takes a context and returns
// promptly when it ends: a runtime whose backend hangs must not hang the
// worker. Implementations are safe for concurrent use.
type Runtime interface {
	// Name returns "docker", "process" or "fake".
	Name() string
	// Start creates and starts a container for spec and returns its id. The
	// container's combined stdout and stderr are appended to spec.LogPath
	// (created with the first byte of output) until it exits. Errors: ErrImageNotFound, ErrUnavailable (backend down
	// or not answering), or another error naming what failed; after an
	// error no container of spec.Name is left running.
	Start(ctx context.Context, spec Spec) (id string, err error)
	// Wait blocks until container id (as Start returned it) exits and
	// returns how; once it returns, the container's output is in
	// spec.LogPath. Calling it again after the exit returns the same Exit.
	// Errors: ErrNotFound, ErrUnavailable, ctx's error.
	Wait(ctx context.Context, id string) (Exit, error)
	// Stop sends SIGTERM, then SIGKILL after grace, to the whole container;
	// a container already stopped is no error. Errors: ErrNotFound.
	Stop(ctx context.Context, id string, grace time.Duration) error
	// Remove deletes a container and its resources, killing it first if
	// it still runs, and ends the copy of its output; a container already
	// gone is no error. Errors: ErrUnavailable, ctx's error.
	Remove(ctx context.Context, id string) error
	// List returns the containers (running or exited, not removed) whose
	// labels include every label in match.
	List(ctx context.Context, match map[string]string) ([]Container, error)
}

// Spec is one attempt's container.
type Spec struct {
	// Name is unique per attempt (the runtime refuses a second container of
	// the same name with ErrConflict).
	Name string
	// Image to run; ignored by the process runtime.
	Image string
	// Command is argv; Command[0] is the program.
	Command []string
	// Env is added to the image's (or the worker's) environment.
	Env map[string]string
	// WorkingDir is where Command runs; "": the image's (or the worker's).
	WorkingDir string
	// CPUMillis limits CPU (1000 = one core); 0: no limit.
	CPUMillis int64
	// MemoryBytes limits memory; 0: no limit. Exceeding it OOM-kills.
	MemoryBytes int64
	// PidsLimit bounds the processes in the container; 0: the runtime's default.
	PidsLimit int64
	// User is who the command runs as: "uid" or "uid:gid", numeric; "":
	// the image's user. The process runtime cannot switch users and
	// refuses a Spec that sets it.
	User string
	// ReadOnlyRootfs makes the container's root file system read-only, with
	// a small writable tmpfs at /tmp (mounts stay as they are). The process
	// runtime cannot and refuses a Spec that sets it.
	ReadOnlyRootfs bool
	// Network mode: "none" (default), "bridge", "host" or a network name.
	Network string
	// Capabilities kept; every other Linux capability is dropped.
	Capabilities []string
	// Labels identify the container as ours: cluster, worker, task, attempt.
	Labels map[string]string
	// GPUUUIDs are the devices the attempt may see (CUDA_VISIBLE_DEVICES).
	GPUUUIDs []string
	// LogPath is the file the container's output is appended to. The
	// runtime creates it, and its missing parent directories, with the
	// first byte of output (OpenLog, LazyLog): a container that prints
	// nothing leaves no file, which readers take for an empty log. "": the
	// output is discarded.
	LogPath string
	// Mounts are host directories the container sees (the attempt's output
	// and input directories). The docker runtime bind-mounts them; the
	// process runtime has no separate filesystem and ignores them (the
	// worker then passes host paths in Env instead; see Isolated).
	Mounts []Mount
	// Ports are the TCP ports a service attempt listens on, published on
	// the worker's host (Docker: on all host addresses; the process
	// runtime's processes listen on the host port themselves, which must
	// then equal the container port).
	Ports []PortBinding
	// Init, when set, is the init the container runs under (megaflow-init,
	// internal/leaseinit): PID 1 of a Docker container (instead of the
	// engine's --init), the parent of a process-runtime task. It stops the
	// task when the worker's lease lapses. nil: the runtime's own init
	// (Docker's tini) or none; the fake runtime ignores it.
	Init *Init
}

// Init is the lease-holding init of a container (Spec.Init).
type Init struct {
	// Path is the host path of the static megaflow-init binary.
	Path string
	// LeaseDir is the host directory holding the worker's lease file
	// (leaseinit.FileName); the docker runtime mounts it read-only.
	LeaseDir string
	// Grace is the time between SIGTERM and SIGKILL when the lease lapses.
	Grace time.Duration
}

// PortBinding publishes one TCP port of a container on the host.
type PortBinding struct {
	// ContainerPort is the port the task listens on inside its container.
	ContainerPort int
	// HostPort is the port on the worker's host that reaches it.
	HostPort int
}

// Mount is a host directory bind-mounted into a container.
type Mount struct {
	// Source is the absolute host path; Target the absolute container path.
	Source string
	Target string
	// ReadOnly mounts it read-only.
	ReadOnly bool
}

// Isolated reports whether runtime rt gives each container its own
// filesystem, so that Spec.Mounts are needed to share directories with
// it: true for every runtime but "process".
func Isolated(rt Runtime) bool { return rt.Name() != "process" }

// Exit is how a container ended.
type Exit struct {
	// Code is the exit status; 128+N for a signal N; -1 when unknown.
	Code int
	// OOMKilled is true when the kernel killed it for exceeding its memory.
	OOMKilled bool
	// Reason says what the runtime knows beyond the code ("" if nothing).
	Reason string
	// Lost is true when the task's end is not the task's own but the
	// runtime's: what held it died (the process runtime's spawner), so
	// its exit status is unknown and it was killed, or stopped it with a
	// signal that killed it (the spawner told to stop, or the worker's
	// lease lapsed). The worker ends such an attempt STOPPED, which the
	// head runs again as it does the attempts of a worker that died,
	// without counting a failure.
	Lost bool
	// ExitedFirst is true when the runtime knows no Stop reached the task
	// before it ended: none was asked for, or Stop found it exited
	// already and signalled nothing. Its end is then its own (a task that
	// completes in the instant a worker shutting down stops it keeps its
	// success). A runtime that cannot tell leaves it false, and the worker
	// takes the end of a task it asked to stop for the stop's.
	ExitedFirst bool
	// StartedAt and FinishedAt bound the run (zero when unknown).
	StartedAt  time.Time
	FinishedAt time.Time
}

// Container is a container of ours as the runtime lists it.
type Container struct {
	// ID is what Start returned; Name and Labels are the Spec's.
	ID     string
	Name   string
	Labels map[string]string
	// Running is true while its process runs; Exit is set once it exited
	// (from List, the Docker runtime fills in the code only: Wait gives
	// the rest).
	Running bool
	Exit    *Exit
	// Paused is true while its processes are frozen (Pauser.Pause);
	// Running is true then too.
	Paused bool
	// NeverStarted is true for a container the engine created but never
	// started (Docker's "created" state: a worker killed between the
	// create and the start of Runtime.Start). Running is false and Exit
	// nil then: the container's command never ran, so it has no exit (the
	// engine reports exit code 0 for it, which is not a success).
	NeverStarted bool
}

// Errors a runtime returns (wrapped, with context); test with errors.Is.
var (
	ErrNotFound      = errors.New("container not found")
	ErrImageNotFound = errors.New("image not found")
	ErrConflict      = errors.New("container name already in use")
	ErrUnavailable   = errors.New("container runtime unavailable")
	// ErrInvalidSpec is a spec the runtime refuses whatever the retry: the
	// command's program is not found or not executable, the working
	// directory does not exist, the engine rejects the configuration (an
	// HTTP 400 on start). A task failing with it is not retried.
	ErrInvalidSpec = errors.New("invalid container spec")
)

// Execer is an optional extra of a Runtime: running a command inside a
// running container (persistent mode's warm containers). Test for it with a
// type assertion.
type Execer interface {
	// Exec runs spec.Command in container id with spec's environment and
	// working directory, appends its output to spec.LogPath (created with
	// the first byte, as Start's), and returns its exit when it ends.
	// When ctx ends first, the exec is killed and Exec
	// returns its Exit (Code 137, Reason saying why) together with ctx's
	// error. Errors: ErrNotFound, ErrUnavailable, ctx's error, or why the
	// exec could not run (the container is not running).
	Exec(ctx context.Context, id string, spec Spec) (Exit, error)
}

// Adopter is an optional extra of a Runtime whose containers outlive the
// worker process (Docker's): a restarted worker takes over the containers
// it finds and calls Adopt for each before Wait.
type Adopter interface {
	// Adopt resumes appending container id's output to the file at
	// logPath, whose bytes are taken to be the first bytes of that output
	// (a missing file: none yet, and it is created with the first byte);
	// Wait returns once the file holds all of it. Errors: the file exists
	// but cannot be read.
	Adopt(ctx context.Context, id, logPath string) error
}

// Logger is an optional extra: reading a container's output directly.
type Logger interface {
	// Logs returns container id's combined output; with follow, the
	// reader streams until the container exits or ctx ends. The caller
	// closes it. Errors: ErrNotFound, ErrUnavailable, ctx's error.
	Logs(ctx context.Context, id string, follow bool) (io.ReadCloser, error)
}

// MatchLabels reports whether have holds every label of want with the same
// value. Runtimes use it to answer List.
func MatchLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// ImageLister is an optional extra of a Runtime: the container images its
// engine holds locally, so that the worker can advertise them and the
// scheduler can prefer workers that hold a task's image (image locality).
// The process runtime has no images and does not implement it.
type ImageLister interface {
	// Images returns the references ("repo:tag") of the images held
	// locally, sorted, without duplicates; untagged images are left out.
	// Errors: ErrUnavailable, ctx's error.
	Images(ctx context.Context) ([]string, error)
}

// StopAller is an optional extra of a Runtime whose containers cannot
// outlive the worker process (the process runtime's children: a restarted
// worker cannot adopt them). The worker calls StopAll when it shuts down
// cleanly, after its stream is closed.
type StopAller interface {
	// StopAll stops every container the runtime started and has not
	// removed (SIGTERM, SIGKILL after grace) and waits for them until ctx
	// ends. Errors: ctx's error when some did not exit in time.
	StopAll(ctx context.Context, grace time.Duration) error
}

// StreamExecer is an optional extra of a Runtime: running a command inside
// a running container with its own stdin and its stdout and stderr apart
// (sandboxes, docs/sandboxes.md). Unlike Execer it leaves the container's
// other processes alone (several execs may run at once in one container,
// and background processes an exec starts outlive it), except on a kill.
type StreamExecer interface {
	// ExecStream runs req.Command in container id and returns its exit
	// when it ends, its output written to req.Stdout and req.Stderr as it
	// comes. When ctx ends first the exec is killed with its process group
	// and ExecStream returns its Exit (Code 137, Reason saying why)
	// together with ctx's error. Errors: ErrNotFound, ErrUnavailable,
	// ctx's error, or why the exec could not run (the container is not
	// running, the program is missing).
	ExecStream(ctx context.Context, id string, req ExecRequest) (Exit, error)
}

// ExecRequest is one command run by StreamExecer.ExecStream.
type ExecRequest struct {
	// Command is argv; Command[0] is the program.
	Command []string
	// Env is added to the container's environment.
	Env map[string]string
	// WorkingDir is where Command runs; "": the container's.
	WorkingDir string
	// Stdin is written to the command's standard input, which is then
	// closed; nil: the command reads end of file at once.
	Stdin []byte
	// Stdout and Stderr receive the command's output; nil discards it.
	// Writes to each come from one goroutine at a time.
	Stdout, Stderr io.Writer
}

// FileCopier is an optional extra of a Runtime: writing and reading single
// files of a running container (sandboxes).
type FileCopier interface {
	// WriteFile creates or replaces the regular file at absolute path in
	// container id with data and permission bits mode, creating missing
	// parent directories. Errors: ErrNotFound (no such container),
	// ErrUnavailable, or the engine's refusal (a read-only path).
	WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) error
	// ReadFile returns the regular file at absolute path in container id
	// and its permission bits. Errors: ErrNotFound (no such container),
	// ErrNoSuchFile, ErrFileTooLarge (over limit bytes), ErrUnavailable.
	ReadFile(ctx context.Context, id, path string, limit int64) ([]byte, uint32, error)
}

// Errors of FileCopier.
var (
	// ErrNoSuchFile: the path names nothing in the container.
	ErrNoSuchFile = errors.New("no such file in the container")
	// ErrFileTooLarge: the file is larger than the caller's limit, or is
	// not a regular file.
	ErrFileTooLarge = errors.New("file too large or not a regular file")
)

// Snapshotter is an optional extra of a Runtime: committing a running
// container's files into an image and removing such an image (sandbox
// snapshots, docs/sandboxes.md).
type Snapshotter interface {
	// Commit commits container id into image ref (a "repo:tag" the engine
	// holds afterwards; an existing ref is moved to the new image), with
	// the image labels in labels, and returns the image's id and size in
	// bytes. The container is paused while its files are copied. Errors:
	// ErrNotFound (no such container), ErrUnavailable, ctx's error.
	Commit(ctx context.Context, id, ref string, labels map[string]string) (imageID string, size int64, err error)
	// RemoveImage removes image ref and reports whether it was there; an
	// image already gone is not an error. Errors: ErrConflict (a
	// container uses it), ErrUnavailable, ctx's error, or the engine's
	// refusal.
	RemoveImage(ctx context.Context, ref string) (existed bool, err error)
	// SnapshotImages lists the images that carry every label of match (a
	// value of "" matches any value of its key), such as the snapshot
	// images Commit made. Errors: ErrUnavailable, ctx's error.
	SnapshotImages(ctx context.Context, match map[string]string) ([]Image, error)
}

// Pauser is an optional extra of a Runtime: freezing every process of a
// running container and thawing them (sandbox pause, docs/sandboxes.md).
// A paused container keeps its memory and processes and uses no CPU;
// Stop, Remove and List work on it as on a running one.
type Pauser interface {
	// Pause freezes container id's processes (docker pause). A container
	// paused already is no error. Errors: ErrNotFound (no such
	// container), ErrUnavailable, ctx's error, or the engine's refusal
	// (the container is not running).
	Pause(ctx context.Context, id string) error
	// Unpause thaws them. A container that is not paused is no error.
	// Errors: as Pause.
	Unpause(ctx context.Context, id string) error
}

// DirMaker is an optional extra of a Runtime: making a directory in a
// container that a given user owns, whatever user the container runs as
// and whatever capabilities it lacks (a sandbox's working directory under
// an admission policy's user, docs/security.md).
type DirMaker interface {
	// MakeDir creates the directory at absolute path p in container id
	// (created or running; its root file system writable), and its
	// missing parents (0755, root's), and gives p itself (mode 0755) to
	// user: "uid" or "uid:gid" in decimal (gid 0 when not given). An
	// existing p changes owner. Errors: ErrNotFound (no such container),
	// ErrUnavailable, ctx's error, a user not in that form, or the
	// engine's refusal (a read-only root).
	MakeDir(ctx context.Context, id, p, user string) error
}

// Renamer is an optional extra of a Runtime: renaming a container (a
// warm container claimed by a sandbox takes the sandbox attempt's name,
// docs/sandboxes.md). The container's labels, processes and files are
// unchanged.
type Renamer interface {
	// Rename gives container id the name name. Errors: ErrNotFound (no
	// such container), ErrConflict (another container has the name),
	// ErrUnavailable, ctx's error.
	Rename(ctx context.Context, id, name string) error
}

// Image is an image a Snapshotter lists.
type Image struct {
	// ID is the engine's image id; Tags its references ("repo:tag").
	ID   string
	Tags []string
	// Labels are the image's labels (Commit's, and those of the container
	// it was committed from).
	Labels map[string]string
	// Created is when the engine created it (to the second).
	Created time.Time
}
