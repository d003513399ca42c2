package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/runtime/contract"
)

// Exec runs spec.Command in the running container id (a persistent pool's
// warm container) with spec.Env added to the container's environment
// (GPUUUIDs as in Start), in spec.WorkingDir, appends its stdout and stderr
// to spec.LogPath, and returns its exit when it ends. spec's image,
// limits, network, capabilities and labels are the container's and are
// ignored here. The worker calls it from the attempt's goroutine, one
// exec at a time per container.
//
// Whatever the exec started ends with it: once its own process ended,
// every process of the container outside its init's session (what execs
// left: background children, double forks, setsid) is killed from the
// host (reapExec), so that a warm container's next task runs alone.
//
// When ctx ends first the exec is killed and Exec returns its Exit
// (usually Code 137, Reason saying why) together with ctx's error. The
// engine has no call to kill an exec, so Exec kills it from the host: it
// reads the exec's host PID from the engine, checks in /proc that the
// process belongs to container id (a PID the system reused is left alone),
// and sends SIGKILL to its process group (the engine starts each exec as
// a process-group leader, so the exec's children die with it, unless they
// made their own session). Where the worker cannot see or signal that
// process within execKillWait (2 s; the engine on another host, the worker
// in its own PID namespace or without the right to signal root's
// processes) it kills the whole container instead, and the Exit's Reason
// says so: an exec never outlives its context, and the pool replaces the
// container.
//
// Errors: contract.ErrNotFound (no such container), contract.ErrUnavailable,
// ctx's error, or the engine's refusal (the container is not running).
func (r *Runtime) Exec(ctx context.Context, id string, spec contract.Spec) (contract.Exit, error) {
	if len(spec.Command) == 0 {
		return contract.Exit{Code: -1}, fmt.Errorf("docker exec in %s: Spec.Command is empty", id)
	}
	out := io.Discard
	if spec.LogPath != "" {
		lf := &contract.LazyLog{Path: spec.LogPath} // created with the first byte
		defer lf.Close()                            // after the copy ended
		out = lf
	}

	cctx, cancel := r.callCtx(ctx)
	created, err := r.cli.ExecCreate(cctx, id, client.ExecCreateOptions{
		Cmd:          spec.Command,
		Env:          envList(spec.Env, spec.GPUUUIDs),
		WorkingDir:   spec.WorkingDir,
		AttachStdout: true,
		AttachStderr: true,
	})
	cancel()
	if err != nil {
		if cerrdefs.IsConflict(err) && ctx.Err() == nil {
			return contract.Exit{Code: -1}, fmt.Errorf("docker exec in %s: the container is not running: %v", id, err)
		}
		return contract.Exit{Code: -1}, r.wrap(ctx, "exec in", id, err, contract.ErrNotFound)
	}

	// The deadline covers the upgrade of the connection only: once
	// attached, the stream is the exec's and lives until it ends.
	cctx, cancel = r.callCtx(ctx)
	att, err := r.cli.ExecAttach(cctx, created.ID, client.ExecAttachOptions{})
	cancel()
	if err != nil {
		return contract.Exit{Code: -1}, r.wrap(ctx, "exec attach in", id, err, contract.ErrNotFound)
	}
	started := r.clock.Now()
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(out, out, att.Reader)
		copied <- err
	}()

	var cause error
	var killNote string
	copyDone := false
	select {
	case err := <-copied:
		copyDone = true
		if err != nil {
			r.log.Warn("exec output copy failed", "container", id, "exec", created.ID, "err", err)
		}
	case <-ctx.Done():
		cause = ctx.Err()
		killNote = r.killExec(ctx, id, created.ID)
		t := time.NewTimer(r.cfg.CallTimeout) // a CallTimeout: the system clock (Config.Clock)
		select {
		case <-copied:
			copyDone = true
		case <-t.C:
			r.log.Warn("exec output still open after its kill", "container", id, "exec", created.ID)
		}
		t.Stop()
	}
	att.Close()
	if !copyDone {
		<-copied // returns promptly: the connection is closed
	}
	finished := r.clock.Now()

	code, err := r.execExitCode(ctx, created.ID)
	exit := contract.Exit{Code: code, StartedAt: started, FinishedAt: finished}
	if n, rerr := r.reapExec(ctx, id); rerr != nil {
		r.log.Warn("cannot end what an exec left running", "container", id, "exec", created.ID, "err", rerr)
	} else if n > 0 {
		r.log.Debug("killed processes an exec left running", "container", id, "exec", created.ID, "processes", n)
	}
	if cause != nil {
		exit.Reason = "killed: " + cause.Error()
		if killNote != "" {
			exit.Reason += "; " + killNote
		}
		if code == -1 {
			exit.Code = 128 + int(syscall.SIGKILL)
		}
		return exit, fmt.Errorf("docker exec in %s: %w", id, cause)
	}
	if err != nil {
		return exit, err
	}
	return exit, nil
}

// execExitCode polls the engine until exec execID no longer runs (the
// stream may end a moment before the engine records the exit) and returns
// its exit code; -1 when it cannot tell within CallTimeout.
func (r *Runtime) execExitCode(ctx context.Context, execID string) (int, error) {
	cctx, cancel := r.cleanupCtx(ctx)
	defer cancel()
	backoff := 2 * time.Millisecond
	for {
		ins, err := r.cli.ExecInspect(cctx, execID, client.ExecInspectOptions{})
		if err != nil {
			return -1, r.wrap(context.WithoutCancel(ctx), "exec inspect", execID, err, contract.ErrNotFound)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		if !clock.Sleep(r.clock, backoff, cctx.Done()) {
			return -1, fmt.Errorf("docker exec %s: %w: still running %v after its output ended", execID, contract.ErrUnavailable, r.cfg.CallTimeout)
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// killExec kills exec execID of container id: its process group, from the
// host, when the worker can see it; otherwise the whole container. It
// returns "" when the exec's process group was killed or the exec had
// ended (or never started), or why its container was killed.
//
// The engine's view and /proc can disagree for a while (an exec whose
// process just died is still "running" to the engine; an exec whose start
// request is on its way is "running" with no PID: seen for over a second
// on a loaded host), so it polls the engine until one of:
//   - the engine says the exec ended, or that it failed to start (not
//     running, no PID, an exit code): nothing of it runs;
//   - its process group is killed, or its PID is gone from /proc while the
//     container's own init is visible there (the worker sees the
//     container's processes, so the exec ended and the engine has not
//     noticed yet);
//   - the engine has not started it within CallTimeout, or execKillWait
//     has passed since its PID was first seen without a kill landing (the
//     worker cannot see the container's processes: another PID namespace,
//     or an engine on another host): then the container is killed, and
//     Wait gives why as its Exit.Reason.
//
// Killing a sandbox's container for a cancelled exec ends the sandbox, so
// the container is killed only when the exec may still run and nothing
// else can stop it.
// thawForKill lets a kill sent to exec execID's processes land when
// container id is paused (a frozen process dies only once thawed; a
// persistent task's timeout in a warm container someone paused came a
// minute late, when its container was removed): it unpauses the container,
// waits until the exec ended (execKillWait at most), and pauses it again.
func (r *Runtime) thawForKill(ctx context.Context, id, execID string) {
	ins, err := r.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil || ins.Container.State == nil || !ins.Container.State.Paused {
		return
	}
	r.log.Warn("unpausing a paused container so that a killed exec ends; it is paused again after", "container", id, "exec", execID)
	if err := r.Unpause(ctx, id); err != nil {
		r.log.Warn("cannot unpause a container to end a killed exec", "container", id, "exec", execID, "err", err)
		return
	}
	until := r.clock.Now().Add(execKillWait)
	for r.clock.Now().Before(until) {
		if x, err := r.cli.ExecInspect(ctx, execID, client.ExecInspectOptions{}); err != nil || !x.Running {
			break
		}
		if !clock.Sleep(r.clock, 50*time.Millisecond, ctx.Done()) {
			break
		}
	}
	if err := r.Pause(ctx, id); err != nil {
		r.log.Warn("cannot pause a container again after ending a killed exec", "container", id, "exec", execID, "err", err)
	}
}

func (r *Runtime) killExec(ctx context.Context, id, execID string) string {
	cctx, cancel := r.cleanupCtx(ctx)
	defer cancel()
	startBy := r.clock.Now().Add(r.cfg.CallTimeout)
	var killBy time.Time // execKillWait after the PID was first seen
	var last error
	for {
		ins, err := r.cli.ExecInspect(cctx, execID, client.ExecInspectOptions{})
		switch {
		case err != nil:
			last = fmt.Errorf("inspecting the exec: %w", err)
		case !ins.Running && ins.PID != 0:
			return "" // it ended
		case !ins.Running && ins.ExitCode != 0:
			return "" // the engine could not start it (126, 127): nothing runs
		case ins.PID == 0:
			last = fmt.Errorf("the engine has not started the exec's process within %v", r.cfg.CallTimeout)
		default:
			if killBy.IsZero() {
				killBy = r.clock.Now().Add(execKillWait)
			}
			kerr := r.killGroup(ins.PID, ins.ContainerID)
			if kerr == nil {
				r.thawForKill(cctx, id, execID)
				return ""
			}
			if errors.Is(kerr, fs.ErrNotExist) && r.seesContainer(cctx, id) {
				return "" // it ended; the engine has not noticed yet
			}
			last = fmt.Errorf("killing host process group %d: %w", ins.PID, kerr)
		}
		deadline := startBy
		if !killBy.IsZero() {
			deadline = killBy
		}
		if r.clock.Now().After(deadline) {
			break
		}
		// Polling the engine, which has no exec-exit event to wait on.
		if !clock.Sleep(r.clock, 50*time.Millisecond, cctx.Done()) || cctx.Err() != nil {
			break
		}
	}
	why := fmt.Sprintf("its container was killed: a cancelled exec's processes could not be killed from the host (%v)", last)
	r.log.Warn("cannot kill exec from the host; killing its container", "container", id, "exec", execID, "err", last)
	r.markKilled(id, why)
	if _, err := r.cli.ContainerKill(cctx, id, client.ContainerKillOptions{Signal: "KILL"}); err != nil && !cerrdefs.IsNotFound(err) {
		r.log.Error("cannot kill container of a cancelled exec", "container", id, "exec", execID, "err", err)
	}
	return why
}

// seesContainer reports whether the worker sees container id's processes
// in /proc: its init's host PID is there, in the container's cgroup.
func (r *Runtime) seesContainer(ctx context.Context, id string) bool {
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	ins, err := r.cli.ContainerInspect(cctx, id, client.ContainerInspectOptions{})
	if err != nil || ins.Container.State == nil || ins.Container.State.Pid <= 0 {
		return false
	}
	return r.procVisible(ins.Container.State.Pid, ins.Container.ID)
}

// procOf reports whether host process pid is in container containerID's
// cgroup; false when /proc cannot tell.
func procOf(pid int, containerID string) bool {
	in, err := procInContainer(pid, containerID)
	return err == nil && in
}

// procInContainer reports whether host process pid is in container
// containerID's cgroup, as /proc/<pid>/cgroup says. Errors: the file's
// (fs.ErrNotExist when the process is gone or not visible from here).
func procInContainer(pid int, containerID string) (bool, error) {
	cg, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false, err
	}
	return containerID != "" && bytes.Contains(cg, []byte(containerID)), nil
}

// execKillWait bounds how long killExec tries to kill an exec from the host
// once the engine gave its PID, before it kills the exec's container.
const execKillWait = 2 * time.Second

// errNotOurs means the PID is not (or no longer) a process of the container.
var errNotOurs = errors.New("process is not in the container's cgroup")

// killHostGroup sends SIGKILL to the process group led by host PID pid,
// after checking in /proc/<pid>/cgroup that the process belongs to
// container containerID. A process already gone is no error.
func killHostGroup(pid int, containerID string) error {
	if pid <= 0 || containerID == "" {
		return fmt.Errorf("no host pid (%d) or container id (%q)", pid, containerID)
	}
	in, err := procInContainer(pid, containerID)
	if err != nil {
		return err // not visible from here (ErrNotExist), or gone: let the caller decide
	}
	if !in {
		return errNotOurs
	}
	err = syscall.Kill(-pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		// Not a group leader after all: kill the process alone.
		err = syscall.Kill(pid, syscall.SIGKILL)
	}
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
