package leaseinit

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// Exit codes of Main when the task never ran.
const (
	ExitUsage    = 2   // bad command line
	ExitNoLease  = 125 // the lease file is missing, unreadable or already expired
	ExitNotExec  = 126 // the command exists but cannot be run
	ExitNotFound = 127 // the command does not exist
)

// CleanFDEnv names, in the init's environment, a file descriptor it
// inherited (a pipe's write end) on which it writes one byte, CleanByte,
// just before it exits when it knows that nothing of the task is left: it
// is a child subreaper, not PID 1, and it has no child left once the
// task's own process was reaped (every live descendant would have a chain
// of live parents up to a child of the init). The process runtime then
// skips its own scan of /proc for the task's marked processes (issue 17:
// the scan read every process's environment at every task end). No byte
// (an init killed, one of an older version, one that is not a subreaper,
// or a task that left processes behind) leaves the scan in place. The
// init removes the variable from its own environment and marks the
// descriptor close-on-exec, so the task inherits neither (an init older
// than the variable leaves the descriptor open to the task, which could
// then write the byte itself: run the megaflow-init that ships with the
// worker).
const CleanFDEnv = "MEGAFLOW_INIT_CLEAN_FD"

// CleanByte is the byte written on CleanFDEnv's descriptor.
const CleanByte = 'c'

// forwarded are the signals the init passes on to the task's process
// group (as tini with TINI_KILL_PROCESS_GROUP does).
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// Main runs megaflow-init with args (without the program name):
//
//	megaflow-init [--lease FILE] [--grace 1s] [--poll 200ms] -- COMMAND [ARG...]
//
// As PID 1 (a container) it starts COMMAND in a process group of its own
// and forwards the signals it gets to that group, as tini does. Elsewhere
// (the parent of a process-runtime task) COMMAND stays in the init's own
// process group, so that the runtime's signals to that group reach the
// task directly, and the init, a child subreaper, passes the signals it
// gets on to its descendants (orphans of the task come to it). It reaps
// every child, and reads FILE every --poll: once the expiry it holds has
// passed, it says so on stderr, sends SIGTERM to the task, and --grace
// later SIGKILL to every process it can reach (all of the container's as
// PID 1; its descendants otherwise). When COMMAND exits, whatever it left in its
// group (and, outside a container, below the init) is killed, and Main
// returns COMMAND's exit status (128+N for a signal N). Without --lease
// it is a plain init. Messages go to stderr, the task's log.
func Main(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("megaflow-init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	leaseFile := fs.String("lease", "", "file holding the lease's expiry in Unix nanoseconds (empty: no lease)")
	grace := fs.Duration("grace", time.Second, "time between SIGTERM and SIGKILL when the lease lapses")
	poll := fs.Duration("poll", 200*time.Millisecond, "how often the lease file is read")
	spawnFD := fs.Int("spawn-fd", -1, "run as the spawner of many tasks, on the unix SOCK_SEQPACKET socket at this descriptor (spawn.go); needs --lease and no command")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	command := fs.Args()
	if *spawnFD >= 0 {
		if len(command) > 0 || *leaseFile == "" || *poll <= 0 || *grace < 0 {
			fmt.Fprintln(stderr, "megaflow-init: usage: megaflow-init --spawn-fd N --lease FILE [--grace 1s] [--poll 200ms], without a command")
			return ExitUsage
		}
		return Spawn(*spawnFD, *leaseFile, *grace, *poll, stderr)
	}
	if len(command) == 0 {
		fmt.Fprintln(stderr, "megaflow-init: no command: usage: megaflow-init [--lease FILE] [--grace 1s] -- COMMAND [ARG...]")
		return ExitUsage
	}
	if *poll <= 0 || *grace < 0 {
		fmt.Fprintf(stderr, "megaflow-init: --poll %v must be positive and --grace %v not negative\n", *poll, *grace)
		return ExitUsage
	}
	var expiry time.Time
	if *leaseFile != "" {
		var err error
		expiry, err = ReadExpiry(*leaseFile)
		if err != nil {
			fmt.Fprintf(stderr, "megaflow-init: cannot read the worker's lease: %v; the task is not started\n", err)
			return ExitNoLease
		}
		if !time.Now().Before(expiry) {
			fmt.Fprintf(stderr, "megaflow-init: the worker's lease expired at %s; the task is not started\n", expiry.Format(time.RFC3339Nano))
			return ExitNoLease
		}
	}
	clean := cleanFD()
	if clean != nil {
		defer clean.Close()
	}
	pid1 := os.Getpid() == 1
	subreaper := false
	if !pid1 {
		// Orphans of the task are reparented to the init, not to the
		// host's init, so that they can be reaped and killed with it.
		subreaper = setChildSubreaper() == nil
	}

	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, forwarded...)...)
	path, err := exec.LookPath(command[0])
	if err != nil {
		fmt.Fprintf(stderr, "megaflow-init: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return ExitNotFound
		}
		return ExitNotExec
	}
	proc, err := os.StartProcess(path, command, &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: pid1},
	})
	if err != nil {
		fmt.Fprintf(stderr, "megaflow-init: start %s: %v\n", command[0], err)
		if errors.Is(err, os.ErrNotExist) {
			return ExitNotFound
		}
		return ExitNotExec
	}
	child := proc.Pid
	tick := time.NewTicker(*poll)
	defer tick.Stop()
	var killAt time.Time // SIGKILL due (zero: the lease holds)
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGCHLD {
				if code, done := reap(child); done {
					// The task is over: what it left behind goes with it.
					sayClean(clean, finish(child, pid1, subreaper))
					return code
				}
				continue
			}
			signalTask(child, pid1, s.(syscall.Signal))
		case now := <-tick.C:
			if *leaseFile == "" {
				continue
			}
			if e, err := ReadExpiry(*leaseFile); err == nil {
				expiry = e // unreadable for a moment: the last one read holds
			}
			if killAt.IsZero() && !now.Before(expiry) {
				fmt.Fprintf(stderr, "megaflow-init: the worker's lease expired at %s (the worker is gone or frozen and did not renew it); stopping the task (SIGTERM, SIGKILL in %v)\n",
					expiry.Format(time.RFC3339Nano), *grace)
				signalTask(child, pid1, syscall.SIGTERM)
				killAt = now.Add(*grace)
			}
			if !killAt.IsZero() && !now.Before(killAt) {
				killTree(child, pid1, syscall.SIGKILL)
			}
		}
		if code, done := reap(child); done { // a SIGCHLD merged with another
			sayClean(clean, finish(child, pid1, subreaper))
			return code
		}
	}
}

// reap collects every exited child without blocking; done reports that
// the task's own process (child) was among them, with its exit code.
func reap(child int) (code int, done bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return code, done
		}
		if pid == child {
			done = true
			switch {
			case ws.Exited():
				code = ws.ExitStatus()
			case ws.Signaled():
				code = 128 + int(ws.Signal())
			default:
				code = 1
			}
		}
	}
}

// finish kills and reaps what the task left behind, once its own process
// (child) is reaped. An init that is a subreaper (not PID 1) and has no
// child left has no descendant left either: a process's children are
// reparented to the nearest subreaper before the process itself can be
// reaped, so every live descendant has a chain of live parents up to a
// child of the init. It then skips the scan of /proc (every process's
// stat), the common case of a task that leaves nothing (issue 17: a scan
// per task end, on top of the worker's). It reports whether nothing of
// the task is left, which only a subreaper outside a container can tell.
func finish(child int, pid1, subreaper bool) (clean bool) {
	if subreaper && !pid1 && !hasChildren() {
		return true
	}
	killTree(child, pid1, syscall.SIGKILL)
	reapAll()
	return subreaper && !pid1 && !hasChildren()
}

// cleanFD returns the descriptor CleanFDEnv names, marked close-on-exec,
// and removes the variable from the environment; nil when it is not set
// or names no open descriptor above stderr.
func cleanFD() *os.File {
	v, ok := os.LookupEnv(CleanFDEnv)
	if !ok {
		return nil
	}
	_ = os.Unsetenv(CleanFDEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd <= 2 {
		return nil
	}
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil {
		return nil
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "clean")
}

// sayClean writes CleanByte on f when clean (f nil: nobody asked).
func sayClean(f *os.File, clean bool) {
	if f != nil && clean {
		_, _ = f.Write([]byte{CleanByte})
	}
}

// hasChildren reaps the children that already exited and reports whether
// any child is left (true as well when wait4 fails otherwise: the caller
// then scans).
func hasChildren() bool {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.ECHILD):
			return false
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil || pid == 0:
			return true
		}
	}
}

// reapAll reaps the children left after the task's end, for up to a
// second (they were just sent SIGKILL).
func reapAll() {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.ECHILD) {
			return
		}
		if pid <= 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// signalTask passes sig on to the task: its process group as PID 1, every
// descendant of the init otherwise.
func signalTask(child int, pid1 bool, sig syscall.Signal) {
	if pid1 {
		_ = syscall.Kill(-child, sig)
		return
	}
	for _, pid := range descendants(os.Getpid()) {
		_ = syscall.Kill(pid, sig)
	}
}

// killTree sends sig to every process the init can reach: all processes
// of the container's PID namespace when it is PID 1, its descendants
// (orphans included, as a subreaper) otherwise.
func killTree(child int, pid1 bool, sig syscall.Signal) {
	if pid1 {
		_ = syscall.Kill(-child, sig)
		_ = syscall.Kill(-1, sig) // every process but PID 1 itself
		return
	}
	for _, pid := range descendants(os.Getpid()) {
		_ = syscall.Kill(pid, sig)
	}
}

// descendants lists the processes below pid, from /proc.
func descendants(pid int) []int {
	return below(processTree(), pid)
}

// processTree maps each process of /proc to its children.
func processTree() map[int][]int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := StatFields(p)
		if err != nil || len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	return children
}

// below lists the processes below pid in tree, breadth first.
func below(tree map[int][]int, pid int) []int {
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range tree[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// setChildSubreaper makes this process the reaper of its orphaned
// descendants (prctl PR_SET_CHILD_SUBREAPER).
func setChildSubreaper() error {
	const prSetChildSubreaper = 36
	_, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	if e != 0 {
		return e
	}
	return nil
}
