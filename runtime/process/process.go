// Package process is MegaFlow's runtime for machines without Docker: each
// task attempt is a plain process in its own process group, a child of the
// worker's megaflow-init spawner when the worker holds a lease (Spec.Init:
// spawn.go) and of the worker itself otherwise (os/exec), with its stdout and stderr appended to the attempt's log
// file (through a pipe the runtime copies: output.go). It implements
// contract.Runtime. A task ends whole, as a container does: its stop, its
// removal and its leader's exit signal its process group and every
// process that carries its marker in its environment (TreeEnv), so a
// descendant that left the group and the session (setsid, a daemon's
// double fork) ends too (tree.go says what it cannot reach).
//
// It owns the processes it started, in this process's lifetime only: a
// restarted worker could not adopt them (List would no longer show them),
// so the worker stops them all through StopAll (contract.StopAller) when it
// shuts down cleanly, and then closes the runtime (Close). A worker that
// crashes leaves the spawner's tasks to the spawner, which stops them as
// soon as the worker's end of its socket closes; tasks without one run
// until the worker starts again on the same Config.StateDir, which kills
// them (orphans.go), or until they write output (its pipe has no reader
// any more: SIGPIPE). Their tasks are re-run. There is no isolation: Image,
// Network, Capabilities and PidsLimit are ignored (User and ReadOnlyRootfs
// are refused: ErrInvalidSpec), and CPUMillis and
// MemoryBytes are not enforced. (RLIMIT_AS would bound address space, not
// memory, and breaks runtimes that reserve large virtual ranges, such as
// Go, the JVM and CUDA; a cgroup would need privileges a worker without
// Docker usually lacks.) Exit.OOMKilled is therefore never set by this
// runtime. GPUs are pinned by environment only (CUDA_VISIBLE_DEVICES,
// NVIDIA_VISIBLE_DEVICES).
//
// Only the programs that build a worker on it import it (cmd/megaflow-worker,
// `megaflow up` in cmd/megaflow, and `megaflow-bench procrt`, which
// measures it).
package process

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/leaseinit"
	"github.com/megaflow/megaflow/runtime/contract"
)

var (
	_ contract.Runtime   = (*Runtime)(nil)
	_ contract.StopAller = (*Runtime)(nil)
)

// Config configures a Runtime.
type Config struct {
	// Environ is the environment every process starts from, as KEY=VALUE
	// pairs; nil: the worker's own (os.Environ()). Spec.Env is added to
	// it, and Spec.GPUUUIDs override CUDA_VISIBLE_DEVICES and
	// NVIDIA_VISIBLE_DEVICES in it.
	Environ []string
	// Logger receives what the runtime cannot return (a kill that failed).
	// nil: discard.
	Logger *slog.Logger
	// StateDir, if set, is where the runtime records each process group it
	// starts (a few bytes per process), and New kills the groups a
	// previous Runtime on the directory left running (a worker that
	// crashed): their tasks are re-run elsewhere, and two copies must not
	// run at once. The worker daemon uses <data dir>/process. "": no
	// records, and a crash leaves its processes running.
	StateDir string
	// Clock stamps each Exit's StartedAt and FinishedAt and times Stop's
	// grace and SpawnAnswer; nil: clock.Real (what the daemons use). Tests
	// pass a clock.Fake.
	Clock clock.Clock
	// SpawnAnswer bounds how long a start waits for the spawner's answer
	// (spawn.go; a fork takes milliseconds): a spawner silent that long is
	// taken for hung (stopped, or stuck), killed, and the start goes to a
	// new one; the tasks it ran end lost and run again. 0: 30 s.
	SpawnAnswer time.Duration
}

// defaultSpawnAnswer is Config.SpawnAnswer's default: a thousand times a
// loaded machine's fork, far below the worker's start timeout (15 min).
const defaultSpawnAnswer = 30 * time.Second

// Runtime runs task attempts as process groups. It is safe for concurrent
// use; the worker creates one with New.
type Runtime struct {
	environ  []string
	log      *slog.Logger
	stateDir string
	clock    clock.Clock

	// sweep signals and kills what left a task's process group (tree.go).
	sweep sweeper
	// cleanEnds counts the ends that skipped the sweep because the task's
	// init said nothing was left (tests read it).
	cleanEnds atomic.Uint64

	mu    sync.Mutex
	procs map[string]*proc  // id -> process, until Remove
	names map[string]string // name -> id, from Start (before the fork) until Remove

	// The spawners of tasks with Spec.Init (spawn.go).
	spawnMu       sync.Mutex
	spawners      map[spawnKey]*spawner
	retired       []*spawner        // spawners replaced (dead or stopping), for Close to wait for
	noSpawn       map[spawnKey]bool // inits that did not greet as spawners: one per task
	closed        bool              // Close was called: no more spawners
	spawnerStarts atomic.Uint64     // spawners started (tests read it)
	spawnAnswer   time.Duration     // Config.SpawnAnswer
}

// proc is one started process group.
type proc struct {
	id     string
	name   string
	labels map[string]string
	pid    int // also the process group id (Setpgid)

	done chan struct{} // closed once reaped; exit is set before
	exit contract.Exit
	// signalled is set by Stop before it signals a leader it found alive:
	// from then on the end counts as the stop's (exit.ExitedFirst false).
	signalled atomic.Bool
}

// New returns a Runtime. With a StateDir it first kills the process groups
// a previous Runtime on that directory left running, and logs how many.
// Errors: the StateDir cannot be created or read, or a recorded group
// cannot be killed.
func New(cfg Config) (*Runtime, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real()
	}
	answer := cfg.SpawnAnswer
	if answer <= 0 {
		answer = defaultSpawnAnswer
	}
	r := &Runtime{environ: cfg.Environ, log: log.With("runtime", "process"), stateDir: cfg.StateDir, clock: clk, spawnAnswer: answer,
		procs: map[string]*proc{}, names: map[string]string{},
		spawners: map[spawnKey]*spawner{}, noSpawn: map[spawnKey]bool{}}
	if r.stateDir != "" {
		if err := os.MkdirAll(r.stateDir, 0o700); err != nil {
			return nil, fmt.Errorf("process runtime: state dir: %w", err)
		}
		n, err := killOrphans(r.stateDir)
		if err != nil {
			return nil, fmt.Errorf("process runtime: the processes of a previous run in %s: %w", r.stateDir, err)
		}
		if n > 0 {
			r.log.Warn("killed the processes a previous run left (a crash): their tasks are re-run", "groups", n, "state_dir", r.stateDir)
		}
	}
	return r, nil
}

// Name returns "process".
func (r *Runtime) Name() string { return "process" }

// Start starts spec.Command (Command[0] looked up in PATH when it has no
// slash) in spec.WorkingDir, in a new process group, with the environment
// described in Config.Environ, stdout and stderr appended to spec.LogPath
// (created, with its missing directories, on the first byte of output: a
// process that prints nothing leaves no file; no LogPath: discarded). It
// returns the generated id at once; a goroutine reaps the process, and
// when it exits kills what is left of its group, as a container's end
// would, and waits for the end of its output. With spec.Init the task is
// a child of the init's spawner instead of the runtime's (spawn.go),
// which holds the lease for it. The worker calls it once per attempt.
//
// Errors: contract.ErrConflict (spec.Name is in use by a process not yet
// removed), or why the program could not be started (not found, not
// executable, a bad working directory: contract.ErrInvalidSpec), ctx's
// error. ctx is checked on entry and, with spec.Init, while the spawner
// answers (a few ms; a new spawner's greeting at most 5 s).
func (r *Runtime) Start(ctx context.Context, spec contract.Spec) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("process start %s: %w", spec.Name, err)
	}
	if len(spec.Command) == 0 {
		return "", fmt.Errorf("process start %s: Spec.Command is empty", spec.Name)
	}
	if spec.User != "" || spec.ReadOnlyRootfs {
		return "", fmt.Errorf("process start %s: the process runtime cannot run a task as another user or on a read-only root (an admission policy asks for it): run it on a docker worker: %w",
			spec.Name, contract.ErrInvalidSpec)
	}
	var copier *output
	var out *os.File // the child's stdout and stderr
	if spec.LogPath == "" {
		f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return "", fmt.Errorf("process start %s: %w", spec.Name, err)
		}
		out = f
	} else {
		o, w, err := newOutput()
		if err != nil {
			return "", fmt.Errorf("process start %s: output pipe: %w", spec.Name, err)
		}
		copier, out = o, w
		defer func() {
			if copier != nil { // not started: nothing will write
				copier.r.Close()
			}
		}()
	}
	defer out.Close() // the child holds its own copy

	// With an init, the program and the working directory must be there:
	// a missing one fails the start, as without the init (whose own lookup
	// would only fail the task).
	path := spec.Command[0]
	if spec.Init != nil && spec.WorkingDir != "" {
		if fi, err := os.Stat(spec.WorkingDir); err != nil || !fi.IsDir() {
			if err == nil {
				err = errors.New("not a directory")
			}
			return "", fmt.Errorf("process start %s: %w: working directory %s: %w", spec.Name, contract.ErrInvalidSpec, spec.WorkingDir, err)
		}
	}
	if spec.Init != nil {
		if !strings.Contains(path, "/") {
			lp, err := exec.LookPath(path)
			if err != nil {
				return "", fmt.Errorf("process start %s: %w: %w", spec.Name, contract.ErrInvalidSpec, err)
			}
			path = lp
		} else {
			if !filepath.IsAbs(path) && spec.WorkingDir != "" {
				path = filepath.Join(spec.WorkingDir, path)
			}
			if _, err := os.Stat(path); err != nil {
				return "", fmt.Errorf("process start %s: %w: %w", spec.Name, contract.ErrInvalidSpec, err)
			}
		}
	}
	p := &proc{id: newID(), name: spec.Name, labels: maps.Clone(spec.Labels), done: make(chan struct{})}
	env := maps.Clone(spec.Env)
	if env == nil {
		env = map[string]string{}
	}
	env[TreeEnv] = p.id // marks the task's processes, wherever they go (tree.go)
	if spec.Name != "" {
		r.mu.Lock()
		if other, ok := r.names[spec.Name]; ok {
			r.mu.Unlock()
			return "", fmt.Errorf("process start %s: %w (process %s)", spec.Name, contract.ErrConflict, other)
		}
		r.names[spec.Name] = p.id // reserved while forking, outside the lock
		r.mu.Unlock()
	}
	unreserve := func() {
		if spec.Name != "" {
			r.mu.Lock()
			delete(r.names, spec.Name)
			r.mu.Unlock()
		}
	}

	if spec.Init != nil {
		key := spawnKey{path: spec.Init.Path, leaseFile: filepath.Join(spec.Init.LeaseDir, leaseinit.FileName), grace: spec.Init.Grace}
		req := leaseinit.NewSpawnRequest(p.id, path, spec.Command, r.env(env, spec.GPUUUIDs), spec.WorkingDir)
		started := r.clock.Now()
		t, rep, err := r.spawn(ctx, key, req, out)
		switch {
		case err == nil && rep.Err != "":
			unreserve()
			return "", fmt.Errorf("process start %s: %w", spec.Name, spawnErr(rep))
		case err == nil:
			p.pid = rep.Pid // 0: refused (rep.Exited), nothing runs
			r.register(p, rep.StartTime, spec.LogPath, copier)
			if rep.Exited {
				t.exit <- spawnEnd{rep: rep}
			}
			go r.reapSpawned(p, t, started, copier)
			copier = nil // the goroutines own it now
			return p.id, nil
		case errors.Is(err, errStopped):
			unreserve()
			return "", fmt.Errorf("process start %s: %w", spec.Name, ctx.Err())
		}
		// No spawner (an init that is none, a request too large for
		// one): an init of its own, as below.
	}

	argv := spec.Command
	if spec.Init != nil {
		// megaflow-init is the task's parent: it stops the task when the
		// worker's lease lapses, even with the worker gone.
		argv = leaseinit.Argv(spec.Init.Path, filepath.Join(spec.Init.LeaseDir, leaseinit.FileName), spec.Init.Grace, spec.Command)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	// The init says on this pipe when nothing of the task is left at its
	// end, and reap then skips the scan of /proc (leaseinit.CleanFDEnv).
	var cleanR *os.File
	if spec.Init != nil {
		pr, pw, err := os.Pipe()
		if err != nil {
			unreserve()
			return "", fmt.Errorf("process start %s: the init's pipe: %w", spec.Name, err)
		}
		cleanR = pr
		defer func() {
			if cleanR != nil { // not started: nobody reads it
				cleanR.Close()
			}
		}()
		defer pw.Close()                // the init holds its own copy
		cmd.ExtraFiles = []*os.File{pw} // fd 3
		env[leaseinit.CleanFDEnv] = "3" // ExtraFiles[0]
	}
	cmd.Dir = spec.WorkingDir
	cmd.Stdout, cmd.Stderr = out, out // one *os.File: handed to the child, no os/exec goroutine
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = r.env(env, spec.GPUUUIDs)
	started := r.clock.Now()
	if err := cmd.Start(); err != nil {
		unreserve()
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			// No such program, not executable, or no working directory:
			// the same spec fails the same way on a retry.
			return "", fmt.Errorf("process start %s: %w: %w", spec.Name, contract.ErrInvalidSpec, err)
		}
		return "", fmt.Errorf("process start %s: %w", spec.Name, err)
	}
	p.pid = cmd.Process.Pid
	r.register(p, 0, spec.LogPath, copier)
	go r.reap(p, cmd, started, copier, cleanR)
	copier, cleanR = nil, nil // the goroutines own them now
	return p.id, nil
}

// register adds p to the runtime's processes, records its group (a pid
// of 0, a task the spawner refused, has none; a start time of 0: read it
// from /proc, the runtime's own child not being reaped yet) and starts
// copying its output to logPath.
func (r *Runtime) register(p *proc, startTime uint64, logPath string, copier *output) {
	r.mu.Lock()
	r.procs[p.id] = p
	r.mu.Unlock()
	if r.stateDir != "" && p.pid > 0 { // outside the lock: other starts need not wait for the disk
		var err error
		if startTime == 0 {
			err = writeRecord(r.stateDir, p)
		} else {
			err = writeRecordAt(r.stateDir, p, startTime)
		}
		if err != nil {
			r.log.Warn("cannot record a started process: a crash would leave it running", "id", p.id, "pid", p.pid, "err", err)
		}
	}
	if copier != nil {
		go copier.copy(logPath, r.log)
	}
}

// spawn starts req under the spawner of key (starting one when none runs,
// again once if the one running just died). Errors: errStopped (ctx
// ended while the spawner had the request: nothing runs), or any other
// error, with nothing sent: the caller runs an init of its own.
func (r *Runtime) spawn(ctx context.Context, key spawnKey, req leaseinit.SpawnRequest, out *os.File) (*spawnTask, leaseinit.SpawnReply, error) {
	for try := 0; ; try++ {
		sp := r.spawnerFor(key)
		if sp == nil {
			return nil, leaseinit.SpawnReply{}, errors.New("no spawner")
		}
		t, rep, err := sp.spawn(req, out, ctx.Done())
		if err == nil && t.died {
			// It died with the request: should it have forked the task
			// first, the task dies here, by its marker, before another try.
			r.sweep.killTree(req.ID)
		}
		if try == 0 && (errors.Is(err, errSpawnerGone) || (err == nil && t.died)) {
			r.retire(sp) // gone: the next try gets a new one
			continue
		}
		return t, rep, err
	}
}

// reapSpawned waits for the end of p, a task of a spawner, and then does
// what reap does for a child of the runtime's own.
func (r *Runtime) reapSpawned(p *proc, t *spawnTask, started time.Time, out *output) {
	end := <-t.exit
	// Lost: the spawner died under it, or stopped it and the stop killed
	// it (a task that exited by itself meanwhile keeps its own end).
	lost := end.died != "" || (end.rep.Reason != "" && end.rep.Signal != 0)
	exit := contract.Exit{StartedAt: started, FinishedAt: r.clock.Now(), Lost: lost}
	exit.Code, exit.Reason = exitOf(end)
	if p.pid > 0 {
		if end.died != "" || end.salvaged {
			// The spawner did not reap it: its group may still run.
			if err := syscall.Kill(-p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				r.log.Warn("cannot kill the rest of a process group", "id", p.id, "pgid", p.pid, "err", err)
			}
		}
		if r.stateDir != "" {
			removeRecord(r.stateDir, p.id)
		}
	}
	// The spawner killed the rest of its group; what left the group ends
	// too unless the spawner said nothing was left (or nothing ran).
	r.end(p, exit, p.pid > 0 && !end.rep.Clean, out)
}

// end finishes p: kills its marked processes when sweep (else counts a
// clean end), waits for the end of its output (out; nil when discarded),
// and records its exit.
func (r *Runtime) end(p *proc, exit contract.Exit, sweep bool, out *output) {
	if sweep {
		r.sweep.killTree(p.id)
	} else {
		r.cleanEnds.Add(1)
	}
	if out != nil {
		out.drain()
	}
	exit.ExitedFirst = !p.signalled.Load() && !exit.Lost
	p.exit = exit
	close(p.done)
}

// reap waits for p's process, kills the rest of its process group
// (background children outliving the leader) and its marked processes
// (unless its init said on clean, which reap closes, that none is left),
// waits for the end of its output (out; nil when discarded), and records
// its exit.
func (r *Runtime) reap(p *proc, cmd *exec.Cmd, started time.Time, out *output, clean *os.File) {
	err := cmd.Wait()
	exit := contract.Exit{Code: -1, StartedAt: started, FinishedAt: r.clock.Now()}
	var ee *exec.ExitError
	switch {
	case err == nil:
		exit.Code = 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			exit.Code = 128 + int(ws.Signal())
			exit.Reason = signalReason(ws.Signal())
		} else {
			exit.Code = ee.ExitCode()
		}
	default:
		exit.Reason = err.Error()
	}
	// The leader is reaped, but its group id stays reserved while any
	// member lives, so this cannot hit an unrelated process group.
	if err := syscall.Kill(-p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.log.Warn("cannot kill the rest of a process group", "id", p.id, "pgid", p.pid, "err", err)
	} else if r.stateDir != "" {
		removeRecord(r.stateDir, p.id)
	}
	// Descendants that left the group (setsid, a double fork) end with
	// the task too, as in a container; an init that is a subreaper killed
	// and reaped them already, and says so.
	r.end(p, exit, !saidClean(clean), out)
}

// saidClean reports whether the init wrote leaseinit.CleanByte on f
// before it exited (f nil: no init), and closes f. It does not wait: the
// init wrote before it exited, and reap reads after the exit.
func saidClean(f *os.File) bool {
	if f == nil {
		return false
	}
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var b [1]byte
	n := 0
	_ = rc.Read(func(fd uintptr) bool {
		n, _ = syscall.Read(int(fd), b[:]) // non-blocking: EAGAIN when nothing was written
		return true
	})
	return n == 1 && b[0] == leaseinit.CleanByte
}

// Wait blocks until process id exits and returns how: its code, 128+N
// after signal N. Errors: contract.ErrNotFound (never started here, or
// removed), ctx's error.
func (r *Runtime) Wait(ctx context.Context, id string) (contract.Exit, error) {
	p, err := r.get(id)
	if err != nil {
		return contract.Exit{Code: -1}, err
	}
	select {
	case <-p.done:
		return p.exit, nil
	case <-ctx.Done():
		return contract.Exit{Code: -1}, fmt.Errorf("process wait %s: %w", id, ctx.Err())
	}
}

// Stop sends SIGTERM to process id's whole group, then SIGKILL to the group
// after grace if the leader has not exited, and returns once it has. A
// process already exited is no error: a leader that exited on its own
// (a zombie not yet reaped, or reaped) gets no signal, and its Exit says
// ExitedFirst. Errors: contract.ErrNotFound, ctx's error (the SIGKILL is
// sent anyway when ctx ends first).
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	p, err := r.get(id)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	if p.pid > 0 && exited(p.pid) {
		// Its end is on its way from the reaper; the rest of its group
		// is killed there.
		select {
		case <-p.done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("process stop %s: %w", id, ctx.Err())
		}
	}
	p.signalled.Store(true)
	r.signal(p, syscall.SIGTERM)
	t := r.clock.NewTimer(max(grace, 0))
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C():
	case <-ctx.Done():
	}
	r.signal(p, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("process stop %s: %w", id, ctx.Err())
	}
}

// exited reports whether process pid has exited: it is a zombie (or
// dying), or gone. A leader's pid is not reused while it is unreaped or
// its group lives (the group id stays reserved), which is when Stop asks.
func exited(pid int) bool {
	f, err := leaseinit.StatFields(pid)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X" || f[0] == "x")
}

func (r *Runtime) signal(p *proc, sig syscall.Signal) {
	if p.pid <= 0 {
		return // never kill(0) or kill(-1): that would hit the worker's own group, or everything
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.log.Warn("cannot signal process group", "id", p.id, "pgid", p.pid, "signal", sig, "err", err)
	}
	r.sweep.signal(p.id, sig) // and those that left it (tree.go)
}

// Remove kills process id's group if it still runs, waits for it, and
// forgets it. An unknown id is no error. Errors: ctx's error.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	r.mu.Lock()
	p := r.procs[id]
	r.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := r.Stop(ctx, id, 0); err != nil && !errors.Is(err, contract.ErrNotFound) {
		return err
	}
	r.mu.Lock()
	delete(r.procs, id)
	if p.name != "" && r.names[p.name] == id {
		delete(r.names, p.name)
	}
	r.mu.Unlock()
	return nil
}

// StopAll stops every process group this Runtime started that still runs
// (SIGTERM, then SIGKILL after grace), all at once, and waits until each
// has exited or ctx ends. The processes stay listed until Remove. The
// worker calls it once, on a clean shutdown. Errors: ctx's error, naming
// how many processes had not exited.
func (r *Runtime) StopAll(ctx context.Context, grace time.Duration) error {
	r.mu.Lock()
	var ids []string
	for id, p := range r.procs {
		select {
		case <-p.done:
		default:
			ids = append(ids, id)
		}
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	errc := make(chan error, len(ids))
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Stop(ctx, id, grace); err != nil && !errors.Is(err, contract.ErrNotFound) {
				errc <- err
			}
		}()
	}
	wg.Wait()
	close(errc)
	if n := len(errc); n > 0 {
		return fmt.Errorf("process stop all: %d of %d processes did not exit: %w", n, len(ids), <-errc)
	}
	if len(ids) > 0 {
		r.log.Info("stopped the processes still running", "count", len(ids))
	}
	return nil
}

// List returns the processes started by this Runtime and not removed whose
// labels include every pair in match, sorted by id.
func (r *Runtime) List(ctx context.Context, match map[string]string) ([]contract.Container, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("process list: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []contract.Container
	for _, p := range r.procs {
		if !contract.MatchLabels(p.labels, match) {
			continue
		}
		c := contract.Container{ID: p.id, Name: p.name, Labels: maps.Clone(p.labels), Running: true}
		select {
		case <-p.done:
			exit := p.exit
			c.Running, c.Exit = false, &exit
		default:
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (r *Runtime) get(id string) (*proc, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.procs[id]
	if p == nil {
		return nil, fmt.Errorf("process %s: %w", id, contract.ErrNotFound)
	}
	return p, nil
}

// env builds a process's environment: the base, then extra, then the GPU
// variables, later values replacing earlier ones.
func (r *Runtime) env(extra map[string]string, gpus []string) []string {
	base := r.environ
	if base == nil {
		base = os.Environ()
	}
	m := make(map[string]string, len(base)+len(extra)+2)
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	for k, v := range extra {
		m[k] = v
	}
	if len(gpus) > 0 {
		v := strings.Join(gpus, ",")
		m["CUDA_VISIBLE_DEVICES"] = v
		m["NVIDIA_VISIBLE_DEVICES"] = v
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "proc-" + hex.EncodeToString(b[:])
}
