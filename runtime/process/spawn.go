package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/leaseinit"
	"github.com/megaflow/megaflow/runtime/contract"
)

// A task with Spec.Init runs under one megaflow-init shared by all the
// tasks of its init binary, lease file and grace: a spawner (leaseinit,
// spawn.go there), started on the first such task and again after it
// dies, that forks each task on request and keeps the lease's promise for
// all of them, as one init per task did (issue 17: the per-task init, a
// Go program started once per task, held the process runtime to a fifth
// of what a bare fork/exec loop runs). The runtime still signals each
// task's process group itself and sweeps its marked processes; the
// spawner reports each task's end, and whether it left anything.
//
// A binary that does not greet as a spawner within spawnHello (an older
// megaflow-init, or another init) is used as before, once per task, and
// the runtime says so in its log once. So is the spawner for a request
// too large for one message (leaseinit.MaxSpawnMessage, an environment
// of hundreds of KB). When the spawner dies, every task it had is killed
// and ends with a reason that says so; the next start starts a new one,
// as does a start that was in flight when the spawner died (after a kill
// by its marker of whatever it might have forked).

// spawnHello bounds the wait for a new spawner's greeting.
const spawnHello = 5 * time.Second

// spawnKey identifies one spawner: the init binary, the lease file and the
// grace.
type spawnKey struct {
	path, leaseFile string
	grace           time.Duration
}

// spawner is the runtime's end of one running megaflow-init spawner.
type spawner struct {
	key  spawnKey
	log  *slog.Logger
	cmd  *exec.Cmd
	conn *net.UnixConn
	done chan struct{} // closed once the reader ended and the spawner was reaped
	// closing is set by close: the spawner's exit is expected.
	closing atomic.Bool

	sendMu sync.Mutex // one request on the socket at a time

	// clk and answer time the wait for an answer (Config.SpawnAnswer) and
	// the watch for a stopped spawner (watch).
	clk    clock.Clock
	answer time.Duration

	mu    sync.Mutex
	dead  bool                  // the socket ended (or retire saw it die): no more requests
	tasks map[string]*spawnTask // by process id, until its end is delivered
	hung  string                // why the runtime killed it as hung ("": it did not)
}

// spawnTask is one request to a spawner, from its send to its end.
type spawnTask struct {
	first     chan leaseinit.SpawnReply // Pid, Err, or Exited for a task refused: one message
	exit      chan spawnEnd             // the task's end: one message
	answered  bool                      // first was sent
	died      bool                      // first is the reader's: the spawner died before it answered
	abandoned bool                      // Start stopped waiting: kill it once it starts
	pid       int
	start     uint64 // its process's start time, from the spawner's answer
	// salvaged is its end, read from /proc while it was a zombie of a
	// spawner about to be killed as hung (which can no longer reap it).
	salvaged *leaseinit.SpawnReply
}

// spawnEnd is a task's end as the reader delivers it.
type spawnEnd struct {
	rep leaseinit.SpawnReply
	// salvaged: rep was read from the zombie of a spawner killed as hung;
	// the rest of its process group was not killed.
	salvaged bool
	died     string // the spawner died first: why, and rep is empty
}

var errSpawnerGone = errors.New("the spawner (megaflow-init) exited")

// startSpawner starts a spawner for key and waits for its greeting.
// Errors: it could not be started, or did not greet as a spawner of this
// protocol within spawnHello (the caller then runs an init per task).
func startSpawner(key spawnKey, log *slog.Logger, clk clock.Clock, answer time.Duration) (*spawner, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket pair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "spawner"), os.NewFile(uintptr(fds[1]), "spawner-child")
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		theirs.Close()
		return nil, fmt.Errorf("socket pair: %w", err)
	}
	conn := c.(*net.UnixConn)
	cmd := exec.Command(key.path, "--spawn-fd", "3", "--lease", key.leaseFile, "--grace", key.grace.String())
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stdout = logWriter{log}
	cmd.Stderr = logWriter{log}
	// Its own group: a terminal's ^C to the worker's group does not reach
	// it (the worker stops its tasks itself, then closes the socket).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	theirs.Close() // the child holds its own copy: its exit ends the socket
	if err != nil {
		conn.Close()
		return nil, err
	}
	sp := &spawner{key: key, log: log, cmd: cmd, conn: conn, done: make(chan struct{}), tasks: map[string]*spawnTask{},
		clk: clk, answer: answer}
	if err := sp.hello(); err != nil {
		conn.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		return nil, err
	}
	go sp.read()  // ends with the socket; reaps the spawner
	go sp.watch() // ends with read (done)
	return sp, nil
}

// hello reads the spawner's greeting.
func (sp *spawner) hello() error {
	if err := sp.conn.SetReadDeadline(time.Now().Add(spawnHello)); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, _, _, err := sp.conn.ReadMsgUnix(buf, nil)
	if err != nil || n == 0 {
		return fmt.Errorf("no greeting from %s --spawn-fd within %v (an older megaflow-init?): %v", sp.key.path, spawnHello, err)
	}
	var rep leaseinit.SpawnReply
	if err := json.Unmarshal(buf[:n], &rep); err != nil || rep.Hello != leaseinit.SpawnProtocol {
		return fmt.Errorf("%s --spawn-fd greeted with %q, want %s", sp.key.path, buf[:n], leaseinit.SpawnProtocol)
	}
	return sp.conn.SetReadDeadline(time.Time{})
}

// read delivers the spawner's replies until its socket ends, then ends
// every task it still had (their processes are the runtime's to kill)
// and reaps the spawner.
func (sp *spawner) read() {
	defer close(sp.done)
	buf := make([]byte, 64<<10)
	why := "the socket closed"
	for {
		n, _, _, _, err := sp.conn.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			if err != nil && !errors.Is(err, net.ErrClosed) {
				why = err.Error()
			}
			break
		}
		var rep leaseinit.SpawnReply
		if err := json.Unmarshal(buf[:n], &rep); err != nil {
			sp.log.Warn("a reply from the spawner that is not JSON: ignored", "reply", string(buf[:min(n, 200)]), "err", err)
			continue
		}
		sp.deliver(rep)
	}
	sp.mu.Lock()
	sp.dead = true
	tasks, hung := sp.tasks, sp.hung
	sp.tasks = nil
	sp.mu.Unlock()
	sp.conn.Close()
	err := sp.cmd.Wait()
	how := why
	if err != nil {
		how = err.Error() // "signal: killed", "exit status 2"
	}
	died := fmt.Sprintf("its megaflow-init (the spawner, pid %d) exited (%s): the task was killed", sp.cmd.Process.Pid, how)
	if hung != "" {
		died = fmt.Sprintf("its megaflow-init (the spawner, pid %d) %s and was killed as hung: the task was killed", sp.cmd.Process.Pid, hung)
	}
	if !sp.closing.Load() {
		sp.log.Warn("megaflow-init, the tasks' spawner, exited unexpectedly: its running tasks are stopped and run again, and the next task starts a new spawner", "pid", sp.cmd.Process.Pid, "exit", how, "tasks", len(tasks))
	}
	for _, t := range tasks {
		switch {
		case t.abandoned:
			if t.pid > 0 {
				_ = syscall.Kill(-t.pid, syscall.SIGKILL)
			}
		case !t.answered:
			t.died = true
			t.first <- leaseinit.SpawnReply{Err: died}
		case t.salvaged != nil: // it had ended: its own end, not the kill
			t.exit <- spawnEnd{rep: *t.salvaged, salvaged: true}
		default:
			t.exit <- spawnEnd{died: died}
		}
	}
}

// deliver passes one reply to its task.
func (sp *spawner) deliver(rep leaseinit.SpawnReply) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	t := sp.tasks[rep.ID]
	if t == nil {
		sp.log.Warn("a reply from the spawner for no task of it: ignored", "id", rep.ID)
		return
	}
	switch {
	case rep.Pid > 0 && !rep.Exited:
		t.pid, t.start = rep.Pid, rep.StartTime
		if t.abandoned { // Start gave up: the task must not run unseen
			_ = syscall.Kill(-rep.Pid, syscall.SIGKILL)
			return
		}
		t.answered = true
		t.first <- rep
	case rep.Err != "":
		delete(sp.tasks, rep.ID)
		if !t.abandoned {
			t.answered = true
			t.first <- rep
		}
	case rep.Exited:
		delete(sp.tasks, rep.ID)
		switch {
		case t.abandoned:
		case !t.answered: // refused (the lease): it never ran
			t.answered = true
			t.first <- rep
		default:
			t.exit <- spawnEnd{rep: rep}
		}
	}
}

// spawn sends req with the task's output descriptor and waits for the
// first answer. A spawner that has not answered within sp.answer (on
// sp.clk) is taken for hung and killed: its reader then answers for it that it died
// (spawnTask.died), and the caller starts another. Errors: errSpawnerGone
// (nothing was sent: the caller may start another spawner), errTooLarge
// (the caller runs an init of its own), errStopped (stop closed first:
// nothing runs).
func (sp *spawner) spawn(req leaseinit.SpawnRequest, out *os.File, stop <-chan struct{}) (*spawnTask, leaseinit.SpawnReply, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, leaseinit.SpawnReply{}, err
	}
	if len(b) > leaseinit.MaxSpawnMessage {
		return nil, leaseinit.SpawnReply{}, errTooLarge
	}
	t := &spawnTask{first: make(chan leaseinit.SpawnReply, 1), exit: make(chan spawnEnd, 1)}
	sp.mu.Lock()
	if sp.dead {
		sp.mu.Unlock()
		return nil, leaseinit.SpawnReply{}, errSpawnerGone
	}
	sp.tasks[req.ID] = t
	sp.mu.Unlock()
	sp.sendMu.Lock()
	// A spawner that reads nothing fills its socket: the write waits for
	// it as long as for an answer (the socket's deadline is the system's
	// time, not clk's).
	_ = sp.conn.SetWriteDeadline(time.Now().Add(sp.answer))
	_, _, err = sp.conn.WriteMsgUnix(b, syscall.UnixRights(int(out.Fd())), nil) // Fd: blocking, as the task expects
	sp.sendMu.Unlock()
	if err != nil { // a datagram is sent whole or not at all
		sp.mu.Lock()
		delete(sp.tasks, req.ID)
		sp.mu.Unlock()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			sp.kill(fmt.Sprintf("read no start for %v", sp.answer))
		}
		return nil, leaseinit.SpawnReply{}, fmt.Errorf("%w: %v", errSpawnerGone, err)
	}
	deadline := sp.clk.NewTimer(sp.answer)
	defer deadline.Stop()
	hung := deadline.C()
	for {
		select {
		case rep := <-t.first:
			return t, rep, nil
		case <-hung:
			hung = nil
			sp.kill(fmt.Sprintf("answered no start for %v", sp.answer)) // its reader then answers t.first (died)
		case <-stop:
			sp.mu.Lock()
			defer sp.mu.Unlock()
			select {
			case rep := <-t.first: // it answered meanwhile
				return t, rep, nil
			default:
			}
			t.abandoned = true // deliver kills it if it starts after all
			return nil, leaseinit.SpawnReply{}, errStopped
		}
	}
}

// kill kills a spawner taken for hung (why: what it did not do), once,
// and says so. The tasks that had ended and wait, as its zombies, for it
// to reap them keep their ends (salvage); its reader ends the others
// (lost: they run again), and the next start starts a new spawner.
func (sp *spawner) kill(why string) {
	sp.mu.Lock()
	if sp.hung != "" || sp.dead {
		sp.mu.Unlock()
		return
	}
	sp.hung = why
	salvaged := sp.salvageLocked()
	sp.mu.Unlock()
	sp.log.Warn("megaflow-init, the tasks' spawner, is taken for hung (stopped or stuck) and killed: the tasks it still ran are stopped and run again, and the next start goes to a new spawner",
		"pid", sp.cmd.Process.Pid, "why", why, "ended_tasks_kept", salvaged)
	_ = syscall.Kill(-sp.cmd.Process.Pid, syscall.SIGKILL)
}

// salvageLocked reads the end of each task of sp that has exited and is
// still a zombie (its spawner not having reaped it) from /proc (proc(5):
// the state, field 3, is Z; field 52 is its wait status), checking its
// start time against the one the spawner reported, and returns how many.
// sp.mu is held.
func (sp *spawner) salvageLocked() int {
	n := 0
	for id, t := range sp.tasks {
		if !t.answered || t.pid <= 0 || t.salvaged != nil {
			continue
		}
		f, err := leaseinit.StatFields(t.pid)
		if err != nil || len(f) < 50 || f[0] != "Z" || (t.start != 0 && f[19] != strconv.FormatUint(t.start, 10)) {
			continue
		}
		code, err := strconv.Atoi(f[49])
		if err != nil {
			continue
		}
		ws := syscall.WaitStatus(code)
		rep := leaseinit.SpawnReply{ID: id, Exited: true}
		switch {
		case ws.Exited():
			rep.Code = ws.ExitStatus()
		case ws.Signaled():
			rep.Signal = int(ws.Signal())
		default:
			rep.Code = 1
		}
		t.salvaged = &rep
		n++
	}
	return n
}

// watch kills the spawner, as hung, once it has been stopped (SIGSTOP: the
// state T in /proc) for sp.answer: a stopped spawner neither reaps its
// tasks' ends nor answers a stop, and a start may not come to find it
// hung. It checks every second and returns when the spawner is gone.
func (sp *spawner) watch() {
	var since time.Time // when it was first seen stopped; zero: it is not
	for {
		tick := sp.clk.NewTimer(time.Second)
		select {
		case <-sp.done:
			tick.Stop()
			return
		case <-tick.C():
		}
		f, err := leaseinit.StatFields(sp.cmd.Process.Pid)
		if err != nil || len(f) == 0 || (f[0] != "T" && f[0] != "t") {
			since = time.Time{}
			continue
		}
		now := sp.clk.Now()
		if since.IsZero() {
			since = now
		}
		if now.Sub(since) >= sp.answer {
			sp.kill(fmt.Sprintf("was stopped (SIGSTOP) for %v", sp.answer))
		}
	}
}

var (
	errTooLarge = errors.New("the request is too large for the spawner")
	errStopped  = errors.New("stopped while waiting for the spawner")
)

// close closes the socket, which makes the spawner stop its tasks and
// exit, and waits for it up to its grace and 10 s more; then SIGKILL.
func (sp *spawner) close() {
	sp.closing.Store(true)
	sp.conn.Close()
	t := time.NewTimer(sp.key.grace + 10*time.Second)
	defer t.Stop()
	select {
	case <-sp.done:
		return
	case <-t.C:
	}
	_ = syscall.Kill(-sp.cmd.Process.Pid, syscall.SIGKILL)
	<-sp.done // reaped at once after SIGKILL
}

// spawnerFor returns the running spawner of init's key, starting one if
// there is none (or it died); nil when this init cannot be a spawner
// (said once in the log) or the runtime is closed.
func (r *Runtime) spawnerFor(key spawnKey) *spawner {
	r.spawnMu.Lock()
	defer r.spawnMu.Unlock()
	if r.closed || r.noSpawn[key] {
		return nil
	}
	if sp := r.spawners[key]; sp != nil {
		sp.mu.Lock()
		dead := sp.dead
		sp.mu.Unlock()
		if !dead {
			return sp
		}
		delete(r.spawners, key)
		r.retireLocked(sp) // Close waits for its reader
	}
	sp, err := startSpawner(key, r.log, r.clock, r.spawnAnswer)
	if err != nil {
		r.noSpawn[key] = true
		r.log.Warn("megaflow-init cannot run as a spawner: each task gets an init of its own, which costs a few ms of CPU per task", "init", key.path, "err", err)
		return nil
	}
	r.spawners[key] = sp
	r.spawnerStarts.Add(1)
	r.log.Info("started megaflow-init, the tasks' spawner: it starts each task and stops them all if this worker's lease lapses", "pid", sp.cmd.Process.Pid, "init", key.path)
	return sp
}

// retire stops using sp for new tasks (it is gone, perhaps before its
// reader saw it); its tasks still end through it, and Close waits for it.
func (r *Runtime) retire(sp *spawner) {
	sp.mu.Lock()
	sp.dead = true
	sp.mu.Unlock()
	r.spawnMu.Lock()
	defer r.spawnMu.Unlock()
	if r.spawners[sp.key] == sp {
		delete(r.spawners, sp.key)
		r.retireLocked(sp)
	}
}

// retireLocked keeps sp for Close, and forgets the retired spawners that
// are gone (their readers ended). spawnMu is held.
func (r *Runtime) retireLocked(sp *spawner) {
	kept := r.retired[:0]
	for _, o := range r.retired {
		select {
		case <-o.done:
		default:
			kept = append(kept, o)
		}
	}
	r.retired = append(kept, sp)
}

// Close stops the spawners this Runtime started (each stops what it still
// runs, SIGTERM then SIGKILL after its grace) and waits for them, a
// bounded time. Call it after StopAll, once the worker is done with the
// runtime; a Start after Close runs each task under an init of its own.
func (r *Runtime) Close() error {
	r.spawnMu.Lock()
	r.closed = true
	var sps []*spawner
	for _, sp := range r.spawners {
		sps = append(sps, sp)
	}
	sps = append(sps, r.retired...)
	r.spawners, r.retired = map[spawnKey]*spawner{}, nil
	r.spawnMu.Unlock()
	var wg sync.WaitGroup
	for _, sp := range sps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sp.close()
		}()
	}
	wg.Wait()
	return nil
}

// exitOf turns a spawner's report of a task's end into the task's exit
// code and reason.
func exitOf(end spawnEnd) (code int, reason string) {
	switch {
	case end.died != "":
		return -1, end.died
	case end.rep.Signal != 0:
		reason := signalReason(syscall.Signal(end.rep.Signal))
		if end.rep.Reason != "" {
			reason += ": " + end.rep.Reason
		}
		return 128 + end.rep.Signal, reason
	default:
		return end.rep.Code, end.rep.Reason
	}
}

// signalReason says which signal ended a task: "killed by signal 9
// (killed)".
func signalReason(sig syscall.Signal) string {
	return fmt.Sprintf("killed by signal %d (%v)", int(sig), sig)
}

// spawnErr turns a spawner's refusal to start a task into Start's error:
// contract.ErrInvalidSpec for the errors a retry would meet again (no
// such program or directory, not executable).
func spawnErr(rep leaseinit.SpawnReply) error {
	errno := syscall.Errno(rep.Errno)
	if rep.Errno != 0 && (errors.Is(errno, os.ErrNotExist) || errors.Is(errno, os.ErrPermission) || errno == syscall.ENOTDIR || errno == syscall.ENOEXEC) {
		return fmt.Errorf("%w: %s", contract.ErrInvalidSpec, strings.TrimPrefix(rep.Err, "megaflow-init: "))
	}
	return errors.New(rep.Err)
}

// logWriter passes what the spawner itself prints (a usage error, an
// older init's complaints) to the runtime's log, one record per write.
type logWriter struct{ log *slog.Logger }

func (w logWriter) Write(b []byte) (int, error) {
	w.log.Warn("megaflow-init (the spawner) says", "output", strings.TrimSpace(string(b)))
	return len(b), nil
}
