package process

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
)

// Every process a task starts, and whatever it starts in turn, inherits
// TreeEnv=<the process id Start returned> in its environment. Ending a task
// (its leader exits, Stop, Remove, StopAll) signals its process group and
// then every process that carries its marker (killMarked): a descendant
// that left the group and the session (setsid, a daemon's double fork) and
// was reparented to init is found by its environment, which survives both.
// This needs no privileges and no cgroup (which a worker without Docker
// usually cannot create), and only /proc. What it cannot reach: a process
// that clears or rewrites its environment before exec (env -i), and
// processes of another user (a setuid program) whose /proc environ this
// worker cannot read. A task run under megaflow-init (Spec.Init) also has
// its init as a child subreaper, which kills its remaining descendants.
//
// The marker is read and the signal sent in two steps: a pid that ended
// and was reused in between by a new process of the same task tree is
// still ours; one reused by an unrelated process is not marked (it has its
// own environment), so it is never signalled.

// TreeEnv is the environment variable that marks a task's processes.
const TreeEnv = "MEGAFLOW_PROCESS_ID"

// maxKillRounds bounds killTree's rounds against a tree that forks while
// it is being killed: each round signals every marked process found.
const maxKillRounds = 20

// killMarked sends sig to every process (but this one) whose environment
// holds TreeEnv=id, and returns how many it signalled. Processes it may
// not read or signal are skipped.
func killMarked(id string, sig syscall.Signal) int {
	if id == "" {
		return 0
	}
	marker := []byte(TreeEnv + "=" + id)
	self := os.Getpid()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, de := range ents {
		pid, err := strconv.Atoi(de.Name())
		if err != nil || pid <= 1 || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + de.Name() + "/environ")
		if err != nil || !hasEntry(env, marker) {
			continue // gone, not ours to read, a zombie (empty), or not marked
		}
		if err := syscall.Kill(pid, sig); err == nil || !errors.Is(err, syscall.ESRCH) {
			n++
		}
	}
	return n
}

// hasEntry reports whether the NUL-separated environment env holds entry
// exactly.
func hasEntry(env, entry []byte) bool {
	for len(env) > 0 {
		var e []byte
		e, env, _ = bytes.Cut(env, []byte{0})
		if bytes.Equal(e, entry) {
			return true
		}
	}
	return false
}

// killTree SIGKILLs every marked process of id, round after round until a
// round finds none (a process killed between a round's scan and its
// signal, or born from one not yet killed, is caught by the next), at
// most maxKillRounds rounds.
func killTree(id string) {
	for range maxKillRounds {
		if killMarked(id, syscall.SIGKILL) == 0 {
			return
		}
	}
}
