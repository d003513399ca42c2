package docker

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/runtime/contract"
)

// Wait blocks until container id is not running and returns how it ended:
// the exit code (128+N after signal N), whether the kernel OOM-killed it,
// and its start and finish times, read by an inspect after the wait. It
// returns only once the container's output is in its log file (or after
// CallTimeout more, if the copy lags); when the log file may lack some of
// it, Exit.Reason says so and why. The worker calls it after Start,
// from the attempt's goroutine; calling it again after the exit returns
// the same Exit at once.
//
// Errors: contract.ErrNotFound, contract.ErrUnavailable (no answer to the
// wait request within CallTimeout, or the connection broke), ctx's error.
func (r *Runtime) Wait(ctx context.Context, id string) (contract.Exit, error) {
	sctx, answered, cancel := r.streamCtx(ctx)
	defer cancel()
	// The engine answers the request at once (headers) and sends the body
	// when the container stops; the deadline covers the first part only.
	res := r.cli.ContainerWait(sctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	inTime := answered()
	select {
	case <-res.Result:
	case err := <-res.Error:
		if !inTime && ctx.Err() == nil {
			return contract.Exit{Code: -1}, fmt.Errorf("docker wait %s: %w: the engine at %s did not answer within %v",
				id, contract.ErrUnavailable, r.cli.DaemonHost(), r.cfg.CallTimeout)
		}
		return contract.Exit{Code: -1}, r.wrap(ctx, "wait", id, err, contract.ErrNotFound)
	case <-ctx.Done():
		return contract.Exit{Code: -1}, fmt.Errorf("docker wait %s: %w", id, ctx.Err())
	}

	exit, limited, err := r.inspectExit(ctx, id)
	if err != nil {
		return exit, err
	}
	// containerd reports a task's OOM and its exit as two events, and an
	// engine that handles the exit first never sets OOMKilled (seen with
	// Docker 20.10 on cgroup v1 under load). A memory-limited container
	// that died of SIGKILL which this runtime did not send was most likely
	// killed by the kernel's OOM killer: it counts as OOM killed, and its
	// reason says the kill was inferred (a docker kill from outside reads
	// the same).
	r.mu.Lock()
	why, killedByUs := r.killed[id]
	r.mu.Unlock()
	switch {
	case exit.Code == 137 && !exit.OOMKilled && limited && !killedByUs:
		exit.OOMKilled = true
		exit.Reason = "probably OOM killed: a SIGKILL (exit 137) the worker did not send, in a container with a memory limit; the engine did not flag an OOM kill, so it may also have come from outside the worker (docker kill, docker rm -f)"
	case exit.Code == 137 && !exit.OOMKilled && why != "" && exit.Reason == "":
		exit.Reason = why
	}
	if why := r.awaitLogCopy(ctx, id); why != "" {
		note := "the task's output is incomplete: " + why
		if exit.Reason != "" {
			note = exit.Reason + "; " + note
		}
		exit.Reason = note
	}
	return exit, nil
}

// inspectExit reads how container id ended, and whether it had a memory
// limit.
func (r *Runtime) inspectExit(ctx context.Context, id string) (contract.Exit, bool, error) {
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	ins, err := r.cli.ContainerInspect(cctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return contract.Exit{Code: -1}, false, r.wrap(ctx, "inspect", id, err, contract.ErrNotFound)
	}
	if ins.Container.State == nil {
		return contract.Exit{Code: -1}, false, fmt.Errorf("docker inspect %s: the engine returned no state", id)
	}
	limited := ins.Container.HostConfig != nil && ins.Container.HostConfig.Memory > 0
	return exitFromState(ins.Container.State), limited, nil
}

// exitFromState maps the engine's state of a stopped container to an Exit.
// A container that never started (created, never run) has no exit of its
// own: the engine says exit code 0, which would read as a success; it is
// code -1 with a reason instead.
func exitFromState(st *container.State) contract.Exit {
	if st.Status == container.StateCreated {
		return contract.Exit{Code: -1, Reason: "the container was created but never started"}
	}
	e := contract.Exit{
		Code:       st.ExitCode,
		OOMKilled:  st.OOMKilled,
		Reason:     st.Error,
		StartedAt:  parseTime(st.StartedAt),
		FinishedAt: parseTime(st.FinishedAt),
	}
	if e.Reason == "" && e.OOMKilled {
		e.Reason = "OOM killed"
	}
	return e
}

// parseTime parses the engine's RFC 3339 times; the engine's zero time
// ("0001-01-01T00:00:00Z") and garbage become the zero time.Time.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() <= 1 {
		return time.Time{}
	}
	return t
}

// Stop asks container id to stop: SIGTERM to its init, which forwards it to
// the command's process group, then SIGKILL to the whole container after
// grace (rounded up to whole seconds: the engine's unit). It returns once
// the container stopped. A container already stopped is no error. The
// worker calls it on cancel and timeout.
//
// Errors: contract.ErrNotFound, contract.ErrUnavailable (no answer within
// grace plus CallTimeout), ctx's error.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	secs := int(math.Ceil(grace.Seconds()))
	if secs < 0 {
		secs = 0
	}
	r.markKilled(id, "")
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout+time.Duration(secs)*time.Second)
	defer cancel()
	_, err := r.cli.ContainerStop(cctx, id, client.ContainerStopOptions{Timeout: &secs})
	return r.wrap(ctx, "stop", id, err, contract.ErrNotFound)
}

// Remove removes container id with its anonymous volumes, killing it
// first if it still runs, and ends its log copy. A container already gone,
// or being removed by another call, is no error. The worker calls it after
// Wait (ephemeral mode) or when a pool retires a container.
//
// A running container is stopped with no grace (killed, and waited for
// until the engine handled its exit) before the removal, not removed by
// force while it runs: on Debian's Engine 20.10.24 a forced removal of a
// running container races the engine's own handling of its exit in
// libnetwork, and 256 at once deadlocked the engine (every later kill, rm
// and inspect hung until it was restarted; bench/results/sandbox.md). For
// a container that already exited the stop is a no-op call.
//
// Errors: contract.ErrUnavailable, ctx's error.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	r.markKilled(id, "")
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	none := 0
	if _, err := r.cli.ContainerStop(cctx, id, client.ContainerStopOptions{Timeout: &none}); err != nil && !cerrdefs.IsNotFound(err) && ctx.Err() == nil {
		// Not fatal: the forced removal below kills it as before.
		r.log.Debug("stop before remove failed; removing by force", "container", id, "err", err)
	}
	_, err := r.cli.ContainerRemove(cctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !(cerrdefs.IsConflict(err) && ctx.Err() == nil) {
		return r.wrap(ctx, "remove", id, err, nil)
	}
	r.endLogCopy(ctx, id)
	r.mu.Lock()
	delete(r.killed, id)
	r.mu.Unlock()
	return nil
}

// markKilled records that this runtime stops, removes or kills container
// id, so that Wait does not take its SIGKILL for the OOM killer's; why,
// when not "", is the Exit.Reason Wait gives for that SIGKILL. A reason
// already recorded is kept.
func (r *Runtime) markKilled(id, why string) {
	r.mu.Lock()
	if r.killed[id] == "" {
		r.killed[id] = why
	}
	r.mu.Unlock()
}

// List returns the containers, running or stopped, whose labels include
// every pair in match (a pair with an empty value matches only an empty
// label value). A stopped container's Exit carries the code only (from the
// engine's summary): Wait on it gives the full Exit. The worker calls it
// to reconcile after a restart.
//
// Errors: contract.ErrUnavailable, ctx's error.
func (r *Runtime) List(ctx context.Context, match map[string]string) ([]contract.Container, error) {
	f := make(client.Filters)
	for k, v := range match {
		f.Add("label", k+"="+v)
	}
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	res, err := r.cli.ContainerList(cctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, r.wrap(ctx, "list", fmt.Sprint(match), err, nil)
	}
	out := make([]contract.Container, 0, len(res.Items))
	for _, s := range res.Items {
		if !hasLabels(s.Labels, match) {
			continue
		}
		c := contract.Container{ID: s.ID, Labels: s.Labels}
		if len(s.Names) > 0 {
			c.Name = strings.TrimPrefix(s.Names[0], "/")
		}
		switch s.State {
		case container.StateRunning, container.StatePaused, container.StateRestarting:
			c.Running, c.Paused = true, s.State == container.StatePaused
		case container.StateExited, container.StateDead:
			c.Exit = &contract.Exit{Code: exitCodeFromStatus(s.Status)}
		case container.StateCreated:
			c.NeverStarted = true
		}
		out = append(out, c)
	}
	return out, nil
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

var exitedRE = regexp.MustCompile(`^Exited \((-?\d+)\)`)

// exitCodeFromStatus reads the code from a summary's status, e.g.
// "Exited (137) 5 seconds ago"; -1 when it has none.
func exitCodeFromStatus(status string) int {
	m := exitedRE.FindStringSubmatch(status)
	if m == nil {
		return -1
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return -1
	}
	return n
}
