package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/leaseinit"
	"github.com/megaflow/megaflow/runtime/contract"
)

// spawnEnv is a runtime, a lease directory holding a lease of an hour, and
// the Init that runs tasks under the spawner.
type spawnEnv struct {
	r     *Runtime
	lease string
	init  *contract.Init
}

func newSpawnEnv(t *testing.T, grace time.Duration) spawnEnv {
	t.Helper()
	return newSpawnEnvOn(t, newRuntime(t), grace)
}

// newSpawnEnvOn is newSpawnEnv on runtime r.
func newSpawnEnvOn(t *testing.T, r *Runtime, grace time.Duration) spawnEnv {
	t.Helper()
	e := spawnEnv{r: r, lease: t.TempDir()}
	e.renew(t, time.Hour)
	e.init = &contract.Init{Path: builtInit(t), LeaseDir: e.lease, Grace: grace}
	return e
}

func (e spawnEnv) renew(t *testing.T, in time.Duration) {
	t.Helper()
	if err := leaseinit.WriteExpiry(e.lease, time.Now().Add(in)); err != nil {
		t.Fatal(err)
	}
}

func (e spawnEnv) start(t *testing.T, log string, command ...string) string {
	t.Helper()
	id, err := e.r.Start(context.Background(), contract.Spec{Command: command, LogPath: log, Init: e.init})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// spawnerPid returns the pid of the runtime's one spawner.
func spawnerPid(t *testing.T, r *Runtime) int {
	t.Helper()
	r.spawnMu.Lock()
	defer r.spawnMu.Unlock()
	if len(r.spawners) != 1 {
		t.Fatalf("%d spawners, want 1", len(r.spawners))
	}
	for _, sp := range r.spawners {
		return sp.cmd.Process.Pid
	}
	return 0
}

// Many tasks with an init share one spawner, which starts each with its
// own exit code, output and environment, and says of each that it left
// nothing, so that no end scans /proc. What cannot start fails Start as
// it does without the init.
func TestSpawnerRunsEveryTask(t *testing.T) {
	e := newSpawnEnv(t, time.Second)
	dir := t.TempDir()
	scans := e.r.sweep.scanCount()
	const n = 40
	ids := make([]string, n)
	for i := range n {
		ids[i] = e.start(t, filepath.Join(dir, fmt.Sprint(i)), "sh", "-c", fmt.Sprintf("echo out $((%d * 2)) $MEGAFLOW_X; echo err %d >&2; exit %d", i, i, i%5), "ignored")
	}
	for i, id := range ids {
		exit := wait(t, e.r, id)
		if exit.Code != i%5 || exit.Reason != "" {
			t.Errorf("task %d: exit %+v, want %d", i, exit, i%5)
		}
		if exit.StartedAt.IsZero() || exit.FinishedAt.Before(exit.StartedAt) {
			t.Errorf("task %d: started %v, finished %v", i, exit.StartedAt, exit.FinishedAt)
		}
		if got, want := read(t, filepath.Join(dir, fmt.Sprint(i))), fmt.Sprintf("out %d\nerr %d\n", 2*i, i); got != want {
			t.Errorf("task %d: log %q, want %q", i, got, want)
		}
	}
	if got := e.r.spawnerStarts.Load(); got != 1 {
		t.Errorf("%d spawners started for %d tasks, want 1", got, n)
	}
	if got := e.r.sweep.scanCount() - scans; got != 0 {
		t.Errorf("%d scans of /proc, want 0: every task left nothing", got)
	}
	if got := e.r.cleanEnds.Load(); got != n {
		t.Errorf("%d clean ends, want %d", got, n)
	}

	// The environment (bytes that are not UTF-8 included), the working
	// directory and the GPU variables.
	log := filepath.Join(dir, "env")
	wd := t.TempDir()
	id, err := e.r.Start(context.Background(), contract.Spec{Command: []string{"sh", "-c", `pwd; echo $MEGAFLOW_X $CUDA_VISIBLE_DEVICES; echo $` + TreeEnv + `; printf %s "$MEGAFLOW_L1"`},
		Env: map[string]string{"MEGAFLOW_X": "x y", "MEGAFLOW_L1": "caf\xe9-\xff\xfe"}, GPUUUIDs: []string{"GPU-a", "GPU-b"}, WorkingDir: wd, LogPath: log, Init: e.init})
	if err != nil {
		t.Fatal(err)
	}
	if exit := wait(t, e.r, id); exit.Code != 0 {
		t.Fatalf("exit %+v", exit)
	}
	if got, want := read(t, log), wd+"\nx y GPU-a,GPU-b\n"+id+"\ncaf\xe9-\xff\xfe"; got != want {
		t.Errorf("log %q, want %q", got, want)
	}

	// A signal's end, through Stop: the group's SIGTERM.
	id = e.start(t, "", "sleep", uniqueSleep(20))
	eventually(t, "the sleep running", func() bool { return count("sleep", uniqueSleep(20)) == 1 })
	if err := e.r.Stop(context.Background(), id, time.Minute); err != nil {
		t.Fatal(err)
	}
	if exit := wait(t, e.r, id); exit.Code != 128+int(syscall.SIGTERM) || exit.Reason != "killed by signal 15 (terminated)" {
		t.Errorf("exit %+v, want 143 killed by signal 15 (terminated)", exit)
	}

	// What cannot start: contract.ErrInvalidSpec, as without the init.
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		spec contract.Spec
		says string
	}{
		{contract.Spec{Command: []string{"no-such-program-here"}}, "no-such-program-here"},
		{contract.Spec{Command: []string{"/no/such/program"}}, "/no/such/program"},
		{contract.Spec{Command: []string{notExec}}, notExec},
		{contract.Spec{Command: []string{"true"}, WorkingDir: "/no/such/dir"}, "working directory /no/such/dir"},
		{contract.Spec{Command: []string{"true"}, WorkingDir: notExec}, "working directory " + notExec},
	} {
		c.spec.Init = e.init
		_, err := e.r.Start(context.Background(), c.spec)
		if !errors.Is(err, contract.ErrInvalidSpec) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("Start %v in %q: %v, want contract.ErrInvalidSpec saying %q", c.spec.Command, c.spec.WorkingDir, err, c.says)
		}
	}
	if got := e.r.spawnerStarts.Load(); got != 1 {
		t.Errorf("%d spawners started, want 1", got)
	}
}

// When the lease in the file lapses, the spawner stops every task it runs
// (SIGTERM, then SIGKILL after the grace to one that ignores it, and to
// what a task left in a session of its own), says so in each task's log,
// and refuses new tasks (exit leaseinit.ExitNoLease, the reason in the
// log) until the lease is renewed.
func TestSpawnerStopsTasksWhenTheLeaseLapses(t *testing.T) {
	e := newSpawnEnv(t, 300*time.Millisecond)
	dir := t.TempDir()
	e.renew(t, 2*time.Second)
	polite := e.start(t, filepath.Join(dir, "polite"), "sleep", uniqueSleep(30))
	stubborn := e.start(t, filepath.Join(dir, "stubborn"), "sh", "-c", "trap '' TERM; setsid sleep "+uniqueSleep(31)+" & echo trapped; while :; do sleep 0.05; done")
	eventually(t, "the stubborn task trapping", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "stubborn"))
		return strings.Contains(string(b), "trapped")
	})
	if exit := wait(t, e.r, polite); exit.Code != 128+int(syscall.SIGTERM) {
		t.Errorf("polite: exit %+v, want SIGTERM's", exit)
	}
	if exit := wait(t, e.r, stubborn); exit.Code != 128+int(syscall.SIGKILL) {
		t.Errorf("stubborn: exit %+v, want SIGKILL's", exit)
	}
	for _, name := range []string{"polite", "stubborn"} {
		if got := read(t, filepath.Join(dir, name)); !strings.Contains(got, "the worker's lease expired") {
			t.Errorf("%s's log does not say why it stopped: %q", name, got)
		}
	}
	eventually(t, "no sleep "+uniqueSleep(31)+" left", func() bool { return count("sleep", uniqueSleep(31)) == 0 })

	refused := e.start(t, filepath.Join(dir, "refused"), "true")
	if exit := wait(t, e.r, refused); exit.Code != leaseinit.ExitNoLease {
		t.Errorf("a task started under an expired lease: exit %+v, want %d", exit, leaseinit.ExitNoLease)
	}
	if got := read(t, filepath.Join(dir, "refused")); !strings.Contains(got, "the task is not started") {
		t.Errorf("the refused task's log: %q", got)
	}
	e.renew(t, time.Hour)
	if exit := wait(t, e.r, e.start(t, "", "true")); exit.Code != 0 {
		t.Errorf("a task after the renewal: exit %+v", exit)
	}
	if got := e.r.spawnerStarts.Load(); got != 1 {
		t.Errorf("%d spawners started, want 1", got)
	}
}

// A spawner that dies (SIGKILL) takes its tasks with it: each ends lost
// (contract.Exit.Lost: the worker retries it without counting a failure),
// with a reason naming the spawner, none of their processes is left, and the
// next start starts a new spawner.
func TestSpawnerDeathEndsItsTasks(t *testing.T) {
	e := newSpawnEnv(t, time.Second)
	var ids []string
	for i := range 3 {
		ids = append(ids, e.start(t, "", "sh", "-c", "sleep "+uniqueSleep(40+i)+"; true"))
	}
	eventually(t, "3 sleeps running", func() bool {
		return count("sleep", uniqueSleep(40))+count("sleep", uniqueSleep(41))+count("sleep", uniqueSleep(42)) == 3
	})
	if err := syscall.Kill(spawnerPid(t, e.r), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if exit := wait(t, e.r, id); exit.Code != -1 || !exit.Lost || !strings.Contains(exit.Reason, "the spawner") {
			t.Errorf("exit %+v, want -1, lost, with a reason naming the spawner", exit)
		}
	}
	eventually(t, "no sleep left", func() bool {
		return count("sleep", uniqueSleep(40))+count("sleep", uniqueSleep(41))+count("sleep", uniqueSleep(42)) == 0
	})
	if exit := wait(t, e.r, e.start(t, "", "true")); exit.Code != 0 {
		t.Errorf("a task after the spawner's death: exit %+v", exit)
	}
	if got := e.r.spawnerStarts.Load(); got != 2 {
		t.Errorf("%d spawners started, want 2", got)
	}
}

// Close ends the spawner, which stops what it still runs: a worker that
// exits, cleanly or not, closes the socket the same way.
func TestCloseEndsTheSpawnerAndItsTasks(t *testing.T) {
	e := newSpawnEnv(t, 200*time.Millisecond)
	log := filepath.Join(t.TempDir(), "log")
	id := e.start(t, log, "sh", "-c", "trap '' TERM; echo trapped; while :; do sleep 0.05; done")
	eventually(t, "the task trapping", func() bool {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "trapped")
	})
	pid := spawnerPid(t, e.r)
	done := make(chan struct{})
	go func() { // ends with Close, bounded by the spawner's grace and 10 s
		e.r.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return within 30s")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the spawner %d is still there after Close: %v", pid, err)
	}
	exit := wait(t, e.r, id)
	if exit.Code == 0 {
		t.Errorf("exit %+v, want the task stopped", exit)
	}
	if got := read(t, log); !strings.Contains(got, "the worker is gone") {
		t.Errorf("the log does not say why the task stopped: %q", got)
	}
	// After Close, a task gets an init of its own.
	if exit := wait(t, e.r, e.start(t, "", "true")); exit.Code != 0 {
		t.Errorf("a task after Close: exit %+v", exit)
	}
}

// A spawned task's process group is recorded in the state directory with
// its leader's start time, as the spawner read it, while it runs, and the
// record goes with it; a `true` reaped before the runtime could have read
// /proc is recorded too.
func TestSpawnedTasksAreRecorded(t *testing.T) {
	state := t.TempDir()
	var logs syncBuffer
	r, err := New(Config{StateDir: state, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	e := newSpawnEnvOn(t, r, time.Second)
	for range 20 {
		if exit := wait(t, r, e.start(t, "", "true")); exit.Code != 0 {
			t.Fatalf("exit %+v", exit)
		}
	}
	if got := logs.String(); strings.Contains(got, "cannot record") {
		t.Errorf("a task the spawner reaped at once was not recorded:\n%s", got)
	}
	id := e.start(t, "", "sleep", uniqueSleep(50))
	b, err := os.ReadFile(filepath.Join(state, id+recordExt))
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	var st uint64
	if _, err := fmt.Sscan(string(b), &pid, &st); err != nil {
		t.Fatalf("record %q: %v", b, err)
	}
	if want, err := leaseinit.StartTime(pid); err != nil || st != want {
		t.Errorf("record %q: start time %d, /proc says %d (%v)", b, st, want, err)
	}
	if err := r.Stop(context.Background(), id, time.Minute); err != nil {
		t.Fatal(err)
	}
	wait(t, r, id)
	if ents, err := os.ReadDir(state); err != nil || len(ents) != 0 {
		t.Errorf("records left after every task ended: %v %v", ents, err)
	}
}

// syncBuffer is a bytes.Buffer safe for the runtime's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A lease that lapses and is renewed while its tasks are being stopped:
// the tasks started after the renewal run (the spawner refuses a start
// only while the file's lease has expired), and the SIGKILL that follows
// the lapse's grace spares them and the daemons they left, with their
// marker or without it.
func TestSpawnerStartsTasksOnceTheLeaseIsRenewed(t *testing.T) {
	e := newSpawnEnv(t, 2*time.Second)
	dir := t.TempDir()
	e.renew(t, time.Second)
	stubborn := e.start(t, filepath.Join(dir, "stubborn"), "sh", "-c", "trap '' TERM; echo trapped; while :; do sleep 0.05; done")
	eventually(t, "the lapse's SIGTERM said in the log", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "stubborn"))
		return strings.Contains(string(b), "the worker's lease expired")
	})
	e.renew(t, time.Hour) // the worker is back, within the grace
	after := e.start(t, filepath.Join(dir, "after"), "sh", "-c", "setsid env -i /bin/sh -c 'exec sleep "+uniqueSleep(61)+"' & "+
		"setsid /bin/sh -c 'sleep "+uniqueSleep(62)+" &'; echo started; sleep "+uniqueSleep(60))
	eventually(t, "the new task's daemons", func() bool { return count("sleep", uniqueSleep(61))+count("sleep", uniqueSleep(62)) == 2 })
	if exit := wait(t, e.r, stubborn); exit.Code != 128+int(syscall.SIGKILL) || !strings.Contains(exit.Reason, "lease expired") {
		t.Errorf("the stubborn task: exit %+v, want SIGKILL's with the lapse as its reason", exit)
	}
	for i := 60; i <= 62; i++ {
		if n := count("sleep", uniqueSleep(i)); n != 1 {
			t.Errorf("%d sleep %s after the lapse's SIGKILL, want 1: the task started after the renewal, or a daemon of it, was killed", n, uniqueSleep(i))
		}
	}
	if got := read(t, filepath.Join(dir, "after")); got != "started\n" {
		t.Errorf("the task started after the renewal: log %q", got)
	}
	if err := e.r.Stop(context.Background(), after, time.Minute); err != nil {
		t.Fatal(err)
	}
	wait(t, e.r, after)
	eventually(t, "the daemons gone with their task", func() bool { return count("sleep", uniqueSleep(61))+count("sleep", uniqueSleep(62)) == 0 })
}

// What a task leaves in a session of its own without its marker (env -i)
// is killed by the spawner once every task that could have left it has
// ended, and not before: a live task's daemon is not killed under it. A
// task started after the daemon could not have left it, and does not
// keep it.
func TestSpawnerKillsUnmarkedOrphans(t *testing.T) {
	e := newSpawnEnv(t, time.Second)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The long task leaves a daemon without a marker, then waits.
	long := e.start(t, "", "sh", "-c", "setsid env -i /bin/sh -c 'exec sleep "+uniqueSleep(70)+"' & cat "+fifo)
	eventually(t, "the long task's daemon", func() bool { return count("sleep", uniqueSleep(70)) == 1 })
	// A short task leaves one too and ends; the long task still runs, so
	// either could have left it.
	short := e.start(t, "", "sh", "-c", "setsid env -i /bin/sh -c 'exec sleep "+uniqueSleep(71)+"' & sleep 0.2")
	wait(t, e.r, short)
	if exit := wait(t, e.r, e.start(t, "", "true")); exit.Code != 0 { // one more end: the spawner looks again
		t.Fatalf("exit %+v", exit)
	}
	if n := count("sleep", uniqueSleep(70)) + count("sleep", uniqueSleep(71)); n != 2 {
		t.Errorf("%d daemons while the long task runs, want 2", n)
	}
	// A task that starts after both daemons (a clock tick later: start
	// times count ticks) and runs on.
	daemon := pidOf("sleep", uniqueSleep(71))
	st, err := leaseinit.StartTime(daemon)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a clock tick after the daemon's start", func() bool { return ticksSinceBoot(t) > st })
	later := e.start(t, "", "sleep", uniqueSleep(72))
	// The long task ends: both daemons go.
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	wait(t, e.r, long)
	eventually(t, "no daemon left", func() bool {
		return count("sleep", uniqueSleep(70))+count("sleep", uniqueSleep(71)) == 0
	})
	if n := count("sleep", uniqueSleep(72)); n != 1 {
		t.Errorf("%d of the later task's sleep, want 1", n)
	}
	if err := e.r.Stop(context.Background(), later, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// pidOf returns the pid of a process whose argv is exactly argv (0: none).
func pidOf(argv ...string) int {
	if pids := pidsOf(argv...); len(pids) > 0 {
		return pids[0]
	}
	return 0
}

// ticksSinceBoot is the time since boot in clock ticks (USER_HZ, 100 on
// Linux), the unit of a process's start time.
func ticksSinceBoot(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	var up float64
	if _, err := fmt.Sscan(string(b), &up); err != nil {
		t.Fatal(err)
	}
	return uint64(up * 100)
}

// Stray signals do not stop the spawner: SIGTERM, SIGINT and SIGHUP sent
// to it (a task's `kill $PPID`, a service manager's stop of the whole
// group) leave its tasks running and it serves the next start. A spawner
// that dies (SIGKILL) while a start waits for its answer (it was frozen)
// does not fail the start: the runtime starts the task under a new one.
func TestSpawnerIgnoresStraySignalsAndAStartOutlivesItsDeath(t *testing.T) {
	e := newSpawnEnv(t, 300*time.Millisecond)
	id := e.start(t, "", "sleep", uniqueSleep(80))
	eventually(t, "the sleep", func() bool { return count("sleep", uniqueSleep(80)) == 1 })
	pid := spawnerPid(t, e.r)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatal(err)
		}
	}
	if exit := wait(t, e.r, e.start(t, "", "sh", "-c", "kill $PPID; kill -HUP $PPID")); exit.Code != 0 {
		t.Errorf("a task that signals its parent: exit %+v, want 0", exit)
	}
	if exit := wait(t, e.r, e.start(t, "", "true")); exit.Code != 0 {
		t.Errorf("a task after the signals: exit %+v, want 0", exit)
	}
	if n := count("sleep", uniqueSleep(80)); n != 1 {
		t.Errorf("%d sleep %s after the signals, want 1: they stopped the spawner's task", n, uniqueSleep(80))
	}
	if got := e.r.spawnerStarts.Load(); got != 1 {
		t.Errorf("%d spawners started, want 1", got)
	}

	// Frozen, then killed, with a start waiting for its answer.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 1)
	go func() { // ends with the Start, which the second spawner answers
		id, err := e.r.Start(context.Background(), contract.Spec{Command: []string{"true"}, Init: e.init})
		if err != nil {
			t.Errorf("a start whose spawner died under it: %v", err)
		}
		started <- id
	}()
	eventually(t, "the start waiting on the frozen spawner", func() bool {
		e.r.spawnMu.Lock()
		defer e.r.spawnMu.Unlock()
		for _, sp := range e.r.spawners {
			sp.mu.Lock()
			n := len(sp.tasks)
			sp.mu.Unlock()
			if n == 2 { // the sleep and the start's
				return true
			}
		}
		return false
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-started:
		if id != "" {
			if exit := wait(t, e.r, id); exit.Code != 0 {
				t.Errorf("the start's task: exit %+v, want 0", exit)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the start did not return within 30s of its spawner's death")
	}
	if exit := wait(t, e.r, id); !exit.Lost {
		t.Errorf("the sleep under the dead spawner: exit %+v, want lost", exit)
	}
	if got := e.r.spawnerStarts.Load(); got != 2 {
		t.Errorf("%d spawners started, want 2", got)
	}
}

// A spawner that does not answer a start within Config.SpawnAnswer (here
// stopped with SIGSTOP) is taken for hung: it is killed, the tasks it ran
// end lost (they run again), and the start goes to a new spawner instead
// of waiting for the worker's start timeout.
func TestHungSpawnerIsReplaced(t *testing.T) {
	r := newRuntimeWith(t, Config{SpawnAnswer: 300 * time.Millisecond})
	e := newSpawnEnvOn(t, r, time.Second)
	long := e.start(t, "", "sleep", uniqueSleep(50))
	eventually(t, "the sleep running", func() bool { return count("sleep", uniqueSleep(50)) == 1 })
	hung := spawnerPid(t, r)
	if err := syscall.Kill(hung, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(hung, syscall.SIGCONT) // if the test fails before the kill

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a bound: the old runtime waited for ever
	defer cancel()
	id, err := r.Start(ctx, contract.Spec{Command: []string{"true"}, Init: e.init})
	if err != nil {
		t.Fatalf("the start after the hang: %v", err)
	}
	if exit := wait(t, r, id); exit.Code != 0 {
		t.Errorf("the start after the hang: exit %+v, want 0", exit)
	}
	if got := r.spawnerStarts.Load(); got != 2 {
		t.Errorf("%d spawners started, want 2", got)
	}
	if exit := wait(t, r, long); !exit.Lost || !strings.Contains(exit.Reason, "the spawner") {
		t.Errorf("the hung spawner's task: exit %+v, want lost, with a reason naming the spawner", exit)
	}
	eventually(t, "the hung spawner gone", func() bool { return errors.Is(syscall.Kill(hung, 0), syscall.ESRCH) })
	eventually(t, "no sleep left", func() bool { return count("sleep", uniqueSleep(50)) == 0 })
}

// A stopped spawner also stops reading: a start whose request no longer
// fits its socket waits for the write as long as for an answer, then the
// spawner is killed and the start goes to a new one, even when no earlier
// start still waits for an answer (here the one that filled the socket
// gave up).
func TestHungSpawnerWithAFullSocketIsReplaced(t *testing.T) {
	r := newRuntimeWith(t, Config{SpawnAnswer: 2 * time.Second})
	e := newSpawnEnvOn(t, r, time.Second)
	if exit := wait(t, r, e.start(t, "", "true")); exit.Code != 0 {
		t.Fatalf("a first task: exit %+v", exit)
	}
	hung := spawnerPid(t, r)
	if err := syscall.Kill(hung, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(hung, syscall.SIGCONT) // if the test fails before the kill

	// Requests of about 135 KB (100 KB of environment, in base64): a send
	// waits once the socket holds its send buffer's worth (208 KB by
	// default), so it takes two.
	big := map[string]string{}
	for i := range 4 {
		big[fmt.Sprintf("BIG%d", i)] = strings.Repeat("x", 25<<10)
	}
	spec := contract.Spec{Command: []string{"true"}, Env: big, Init: e.init}
	for range 2 {
		quick, cancelQuick := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := r.Start(quick, spec)
		cancelQuick()
		if err == nil {
			t.Fatal("a start under a stopped spawner succeeded before its context ended")
		}
	}
	type started struct {
		id  string
		err error
	}
	res := make(chan started, 1)
	go func() { // returns at the latest when the cleanup closes the runtime
		id, err := r.Start(context.Background(), spec)
		res <- started{id, err}
	}()
	var st started
	select {
	case st = <-res:
	case <-time.After(30 * time.Second): // a bound: the old runtime waited for ever, in the socket's write
		t.Fatal("a start behind a full socket did not return within 30s")
	}
	if st.err != nil {
		t.Fatalf("a start behind a full socket: %v", st.err)
	}
	if exit := wait(t, r, st.id); exit.Code != 0 {
		t.Errorf("a start behind a full socket: exit %+v, want 0", exit)
	}
	if got := r.spawnerStarts.Load(); got != 2 {
		t.Errorf("%d spawners started, want 2", got)
	}
	eventually(t, "the hung spawner gone", func() bool { return errors.Is(syscall.Kill(hung, 0), syscall.ESRCH) })
}

// A spawner stopped (SIGSTOP) for Config.SpawnAnswer is killed as hung
// even when no start comes to find it: the tasks that ended meanwhile,
// zombies it could not reap, keep their own ends (read from /proc), and
// the ones still running end lost, with a reason that says why.
func TestStoppedSpawnerIsKilledAndFinishedTasksKeepTheirEnds(t *testing.T) {
	r := newRuntimeWith(t, Config{SpawnAnswer: 2 * time.Second})
	e := newSpawnEnvOn(t, r, time.Second)
	long := e.start(t, "", "sleep", uniqueSleep(60))
	ends := e.start(t, "", "sh", "-c", "sleep 0.5; exit 7")
	killed := e.start(t, "", "sleep", uniqueSleep(61))
	eventually(t, "the sleeps running", func() bool { return count("sleep", uniqueSleep(60))+count("sleep", uniqueSleep(61)) == 2 })
	hung := spawnerPid(t, r)
	if err := syscall.Kill(hung, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(hung, syscall.SIGCONT) // if the test fails before the kill
	// A stop of a task whose spawner is stopped: it dies, unreaped.
	r.mu.Lock()
	pid := r.procs[killed].pid
	r.mu.Unlock()
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	if exit := wait(t, r, ends); exit.Code != 7 || exit.Lost {
		t.Errorf("a task that ended under the stopped spawner: exit %+v, want its own code 7, not lost", exit)
	}
	if exit := wait(t, r, killed); exit.Code != 128+9 || exit.Lost {
		t.Errorf("a task killed under the stopped spawner: exit %+v, want killed by signal 9, not lost", exit)
	}
	if exit := wait(t, r, long); !exit.Lost || !strings.Contains(exit.Reason, "was stopped (SIGSTOP)") {
		t.Errorf("a task still running: exit %+v, want lost, with a reason saying its spawner was stopped", exit)
	}
	eventually(t, "the hung spawner gone", func() bool { return errors.Is(syscall.Kill(hung, 0), syscall.ESRCH) })
	eventually(t, "no sleep left", func() bool { return count("sleep", uniqueSleep(60)) == 0 })
	if exit := wait(t, r, e.start(t, "", "true")); exit.Code != 0 {
		t.Errorf("a task after the hung spawner: exit %+v", exit)
	}
}
