package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/moby/moby/client"
)

// reapExec kills what a finished exec left running in container id: the
// processes of the container that are not in the session of its init (the
// container's own processes: its init, the pool's keeper and their
// children), which only execs start. A persistent pool runs one exec at a
// time in a warm container, so these are the ended exec's: children in its
// process group or session, and those that made a session of their own
// (setsid). It looks from the host, through /proc (each process checked in
// /proc/<pid>/cgroup to belong to the container), as killExec does; where
// the worker cannot see the container's processes (the engine on another
// host, the worker in its own PID namespace) it kills nothing and says so.
// It returns how many processes it killed. Exec calls it once the exec's
// own process ended.
func (r *Runtime) reapExec(ctx context.Context, id string) (int, error) {
	cctx, cancel := r.cleanupCtx(ctx)
	defer cancel()
	ins, err := r.cli.ContainerInspect(cctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return 0, r.wrap(context.WithoutCancel(ctx), "inspect", id, err, nil)
	}
	st := ins.Container.State
	if st == nil || !st.Running || st.Pid <= 0 {
		return 0, nil // stopped: nothing runs in it
	}
	fullID := ins.Container.ID
	initSess, _, err := procSession(st.Pid)
	if err != nil {
		return 0, fmt.Errorf("the container's processes are not visible from the worker (%v): an exec's leftovers stay until the container is removed", err)
	}
	// Two rounds: a leftover may fork while the first kills.
	killed := 0
	for range 2 {
		n := 0
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return killed, err
		}
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == st.Pid {
				continue
			}
			sess, _, err := procSession(pid)
			if err != nil || sess == initSess {
				continue
			}
			if in, err := procInContainer(pid, fullID); err != nil || !in {
				continue
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				n++
			} else if !errors.Is(err, syscall.ESRCH) {
				return killed, fmt.Errorf("killing process %d an exec left in %s: %w", pid, id, err)
			}
		}
		killed += n
		if n == 0 {
			break
		}
	}
	return killed, nil
}

// procSession reads the session and process group of host process pid
// from /proc/<pid>/stat ("pid (comm) state ppid pgrp session ...").
func procSession(pid int) (sess, pgrp int, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 4 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	if pgrp, err = strconv.Atoi(string(f[2])); err != nil {
		return 0, 0, err
	}
	if sess, err = strconv.Atoi(string(f[3])); err != nil {
		return 0, 0, err
	}
	return sess, pgrp, nil
}
