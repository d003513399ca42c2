package leaseinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The spawner: one megaflow-init per worker (and per lease file) instead
// of one per task, for the process runtime (issue 17: a Go program's
// start, about 2.6 ms of CPU, was the process runtime's limit when every
// `true` task had an init of its own). Started as
//
//	megaflow-init --spawn-fd N --lease FILE [--grace 1s] [--poll 200ms]
//
// it is a child subreaper that reads spawn requests (SpawnRequest, with
// the task's output descriptor passed alongside by SCM_RIGHTS) on the
// unix SOCK_SEQPACKET socket N, forks each task in a process group of its
// own, and answers on the same socket: SpawnReply{Pid} once started (or
// Err, with nothing started), SpawnReply{Exited} when the task's process
// is reaped, after SIGKILL to what is left of its group. It keeps the
// lease's promise for all its tasks at once, as the per-task init does
// for one: it reads FILE at every request and refuses to start a task
// under an expired lease (exit ExitNoLease, the reason in the task's
// log), and every --poll it reads FILE again (an unreadable file: the
// last expiry read holds); once the expiry has passed it says so in each
// task's log, sends SIGTERM to every process below it, and --grace later
// SIGKILL to the same tasks and to whatever else is below it but the
// tasks started since (the lease renewed meanwhile). When the socket's
// other end closes (the worker exited or was killed) it stops every
// process below it the same way and exits, starting nothing more: the
// worker's successor re-runs the tasks. SIGTERM,
// SIGINT and SIGHUP do not stop it (a task's `kill $PPID` must not stop
// the worker's other tasks); SIGKILL does, and the worker then ends its
// tasks and starts another spawner. A worker that is frozen keeps the
// socket open, and the lease's lapse stops the tasks.
//
// What a task leaves when it ends: the spawner kills the rest of its
// process group, and says whether anything else is left (Clean). Its
// orphans come to the spawner; one that carries the task's marker
// (TaskMarkerEnv) is the worker's to find, and the spawner also kills the
// orphans that carry no marker (an `env -i` stripped it) once every task
// that was running when the orphan appeared has ended: one of them left
// it, and a live task's daemon is not killed under it.

// MaxSpawnMessage bounds one message on the spawner's socket, in bytes
// (a request's JSON: its environment is most of it). It stays under
// Linux's default socket send buffer (net.core.wmem_default, 212,992
// bytes), the largest datagram a SOCK_SEQPACKET socket sends without
// privileges to raise it; the process runtime starts a larger request's
// task under an init of its own instead.
const MaxSpawnMessage = 192 << 10

// TaskMarkerEnv is the environment variable that marks every process of a
// process-runtime task with the task's id (SpawnRequest.ID): the worker
// sets it, every descendant inherits it, and the spawner reads it to tell
// whose an orphan is.
const TaskMarkerEnv = "MEGAFLOW_PROCESS_ID"

// SpawnProtocol is the spawner's greeting (SpawnReply.Hello): the version
// of this protocol. A runtime that gets another, or none, starts each
// task under an init of its own.
const SpawnProtocol = "megaflow-spawn/2"

// SpawnRequest asks the spawner to start one task.
type SpawnRequest struct {
	// ID names the task in the replies (the process runtime's id).
	ID string `json:"id"`
	// Path is the program's path; Argv its arguments, Argv[0] included.
	// Bytes, not strings: they go to exec as they are, and a value that is
	// not UTF-8 (an environment's Latin-1) must not be altered by JSON.
	Path []byte   `json:"path"`
	Argv [][]byte `json:"argv"`
	// Env is the whole environment, KEY=VALUE; Dir the working directory
	// (empty: the spawner's).
	Env [][]byte `json:"env"`
	Dir []byte   `json:"dir,omitempty"`
}

// NewSpawnRequest returns the request that starts path with argv, env
// and dir as task id.
func NewSpawnRequest(id, path string, argv, env []string, dir string) SpawnRequest {
	bs := func(ss []string) [][]byte {
		out := make([][]byte, len(ss))
		for i, s := range ss {
			out[i] = []byte(s)
		}
		return out
	}
	return SpawnRequest{ID: id, Path: []byte(path), Argv: bs(argv), Env: bs(env), Dir: []byte(dir)}
}

func strs(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

// SpawnReply is one message from the spawner. The first message on a
// new socket is its greeting (Hello set, nothing else). Each request gets
// first either Pid (started) or Err (not started), then, once its process
// is reaped, Exited; a task refused for its lease gets Exited alone.
type SpawnReply struct {
	// Hello is SpawnProtocol, in the greeting only.
	Hello string `json:"hello,omitempty"`
	ID    string `json:"id,omitempty"`
	// Pid is the task's process id, also its process group's; StartTime
	// its start in clock ticks since boot (proc(5): field 22 of
	// /proc/<pid>/stat), read before the spawner could reap it, which
	// tells the task's group from a later one with the same id.
	Pid       int    `json:"pid,omitempty"`
	StartTime uint64 `json:"start_time,omitempty"`
	// Err says why the task could not be started; Errno is the error
	// number of the fork or exec that failed (0: another cause).
	Err   string `json:"err,omitempty"`
	Errno int    `json:"errno,omitempty"`
	// Exited reports the task's end: Code its exit status, or Signal the
	// signal that killed it (then Code is 0); Reason says why the spawner
	// stopped it, if it did (its lease lapsed, the spawner stopped).
	Exited bool   `json:"exited,omitempty"`
	Code   int    `json:"code,omitempty"`
	Signal int    `json:"signal,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Clean reports that nothing of the task was left when it ended: the
	// spawner, a child subreaper, had no child but the other tasks'
	// processes once this one's was reaped (see CleanFDEnv for why that
	// proves it). false leaves the runtime's own scan in place.
	Clean bool `json:"clean,omitempty"`
}

// spawned is one running task of the spawner.
type spawned struct {
	id      string
	out     int    // its stdout and stderr, for the spawner's messages (say); closed at its end
	start   uint64 // its process's start time (0: unknown)
	stopped string // why the spawner stopped it ("": it did not)
}

// suspect is an orphan without a task's marker, and the tasks one of
// which left it: those running when it was first seen that had started
// before it did, and those that had just ended.
type suspect struct {
	start uint64          // its start time: a later process with its pid is another
	tasks map[string]bool // ids of the tasks not yet ended
}

// spawnLoop is the spawner's state, owned by its main loop.
type spawnLoop struct {
	conn      *net.UnixConn
	out       *outbox
	leaseFile string
	grace     time.Duration
	subreaper bool
	devNull   *os.File
	tasks     map[int]*spawned // by pid
	expiry    time.Time        // the last expiry read from the lease file (zero: none yet)
	killAt    time.Time        // SIGKILL due (zero: none due)
	doomed    map[int]bool     // the tasks the SIGKILL is for (pids); the others are spared
	closing   bool             // the worker is gone or the spawner was told to stop: stop everything and exit
	suspects  map[int]suspect  // orphans without a marker, by pid
	ended     []string         // ids of the tasks that ended leaving something, since the last look at the orphans
	anyEnded  bool             // some task ended since the last look
}

// Spawn runs the spawner on the socket at descriptor fd until the worker
// closes its end and every task is gone; it returns the exit status.
func Spawn(fd int, leaseFile string, grace, poll time.Duration, stderr io.Writer) int {
	f := os.NewFile(uintptr(fd), "spawn-socket")
	if f == nil {
		fmt.Fprintf(stderr, "megaflow-init: --spawn-fd %d is not an open descriptor\n", fd)
		return ExitUsage
	}
	c, err := net.FileConn(f) // a close-on-exec duplicate: the tasks never hold it
	f.Close()
	uc, ok := c.(*net.UnixConn)
	if err != nil || !ok {
		fmt.Fprintf(stderr, "megaflow-init: --spawn-fd %d is not a unix socket (%v)\n", fd, err)
		return ExitUsage
	}
	defer uc.Close()
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		fmt.Fprintf(stderr, "megaflow-init: %v\n", err)
		return ExitNotExec
	}
	defer devNull.Close()
	closeOnExecAll()
	l := &spawnLoop{conn: uc, leaseFile: leaseFile, grace: grace, devNull: devNull,
		tasks: map[int]*spawned{}, suspects: map[int]suspect{}, subreaper: setChildSubreaper() == nil}

	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	reqs := make(chan spawnReq)
	eof := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	go l.read(reqs, eof, stop) // ends at the socket's end or with stop
	l.out = newOutbox()
	go l.out.run(uc, stop) // ends with stop, or when the socket fails
	l.send(SpawnReply{Hello: SpawnProtocol})

	tick := time.NewTicker(poll)
	defer tick.Stop()
	var exitBy time.Time // closing: give up on reaping by then
	for {
		select {
		case r := <-reqs:
			l.spawn(r)
		case <-sigs:
			// SIGCHLD: reaped below. SIGTERM, SIGINT and SIGHUP are caught
			// and dropped: the spawner ends with the worker's socket, and a
			// stray signal (a task's `kill $PPID`, a service manager's stop
			// of the whole group, which reaches the tasks and the worker
			// itself) must not stop every task of the worker. Caught, not
			// ignored: an ignored signal would stay ignored in the tasks.
		case <-eof:
			eof = nil
			l.closeDown(&exitBy)
		case now := <-tick.C:
			l.checkLease(now)
		}
		l.reap()
		if l.closing {
			now := time.Now()
			if !l.killAt.IsZero() && !now.Before(l.killAt) {
				killBelow(syscall.SIGKILL, nil)
				l.killAt = time.Time{}
			}
			if (len(l.tasks) == 0 && !hasChildren()) || now.After(exitBy) {
				l.out.flush(time.Second) // the last ends, to a worker that may still read
				return 0
			}
		} else if len(l.ended) > 0 || (len(l.suspects) > 0 && l.anyEnded) {
			l.orphans()
		}
	}
}

// spawnReq is a request read from the socket with its output descriptor.
type spawnReq struct {
	req SpawnRequest
	out int   // -1: none was passed
	bad error // the message could not be read as a request
}

// read passes each request on the socket to reqs, and closes eof when the
// socket ends (the worker closed it or exited).
func (l *spawnLoop) read(reqs chan<- spawnReq, eof chan<- struct{}, stop <-chan struct{}) {
	defer close(eof)
	buf := make([]byte, MaxSpawnMessage+1)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	for {
		n, oobn, flags, _, err := l.conn.ReadMsgUnix(buf, oob)
		if err != nil || (n == 0 && oobn == 0) {
			return
		}
		r := spawnReq{out: -1}
		if fds := parseRights(oob[:oobn]); len(fds) > 0 {
			r.out = fds[0]
			for _, fd := range fds[1:] {
				syscall.Close(fd)
			}
		}
		switch {
		case flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0:
			r.bad = fmt.Errorf("a request over %d bytes", MaxSpawnMessage)
		default:
			if err := json.Unmarshal(buf[:n], &r.req); err != nil {
				r.bad = err
			} else if r.req.ID == "" || len(r.req.Path) == 0 || len(r.req.Argv) == 0 || r.out < 0 {
				r.bad = errors.New("a request needs an id, a path, argv and an output descriptor")
			}
		}
		select {
		case reqs <- r:
		case <-stop:
			if r.out >= 0 {
				syscall.Close(r.out)
			}
			return
		}
	}
}

// parseRights returns the descriptors passed in oob.
func parseRights(oob []byte) []int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := syscall.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// send queues r for the worker without blocking: a frozen worker reads
// nothing, and the loop must go on watching the lease.
func (l *spawnLoop) send(r SpawnReply) {
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	l.out.put(b)
}

// outbox holds the replies the worker has not read yet (at most one per
// task started, and one more per request refused) and writes them in
// order from its own goroutine.
type outbox struct {
	mu    sync.Mutex
	q     [][]byte
	busy  bool          // run holds messages taken from q and not yet written
	wake  chan struct{} // capacity 1: q grew
	drain chan struct{} // capacity 1: q emptied and nothing in flight
	gone  chan struct{} // closed when run returned: nothing more is written
}

func newOutbox() *outbox {
	return &outbox{wake: make(chan struct{}, 1), drain: make(chan struct{}, 1), gone: make(chan struct{})}
}

func (o *outbox) put(b []byte) {
	o.mu.Lock()
	o.q = append(o.q, b)
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// run writes the queued messages until stop, or until a write fails (the
// worker is gone: the rest would fail too).
func (o *outbox) run(conn *net.UnixConn, stop <-chan struct{}) {
	defer close(o.gone)
	for {
		o.mu.Lock()
		q := o.q
		o.q = nil
		o.busy = len(q) > 0
		o.mu.Unlock()
		if len(q) == 0 {
			select {
			case o.drain <- struct{}{}:
			default:
			}
			select {
			case <-o.wake:
				continue
			case <-stop:
				return
			}
		}
		for _, b := range q {
			if _, err := conn.Write(b); err != nil {
				return
			}
		}
	}
}

// flush waits until every queued message is written, at most d.
func (o *outbox) flush(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		o.mu.Lock()
		empty := len(o.q) == 0 && !o.busy
		o.mu.Unlock()
		if empty {
			return
		}
		select {
		case <-o.drain:
		case <-o.gone:
			return
		case <-t.C:
			return
		}
	}
}

// spawn starts one task, or says why not.
func (l *spawnLoop) spawn(r spawnReq) {
	if r.bad != nil {
		if r.out >= 0 {
			syscall.Close(r.out)
		}
		l.send(SpawnReply{ID: r.req.ID, Err: "megaflow-init: a bad spawn request: " + r.bad.Error()})
		return
	}
	if l.closing { // the worker is gone: nobody reads an answer
		syscall.Close(r.out)
		return
	}
	refuse := func(msg string) {
		say(r.out, msg)
		syscall.Close(r.out)
		l.send(SpawnReply{ID: r.req.ID, Exited: true, Code: ExitNoLease})
	}
	switch expiry, err := l.readLease(); {
	case err != nil && expiry.IsZero(): // unreadable for a moment: the last lease read holds
		refuse(fmt.Sprintf("megaflow-init: cannot read the worker's lease: %v; the task is not started", err))
		return
	case !time.Now().Before(expiry):
		refuse(fmt.Sprintf("megaflow-init: the worker's lease expired at %s; the task is not started", expiry.Format(time.RFC3339Nano)))
		return
	}
	fd := uintptr(r.out)
	pid, err := syscall.ForkExec(string(r.req.Path), strs(r.req.Argv), &syscall.ProcAttr{
		Dir:   string(r.req.Dir),
		Env:   strs(r.req.Env),
		Files: []uintptr{l.devNull.Fd(), fd, fd},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		syscall.Close(r.out)
		var errno syscall.Errno
		errors.As(err, &errno)
		msg := fmt.Sprintf("start %s: %v", r.req.Path, err)
		if len(r.req.Dir) > 0 {
			if _, serr := os.Stat(string(r.req.Dir)); serr != nil {
				msg = fmt.Sprintf("start %s: working directory: %v", r.req.Path, serr)
			}
		}
		l.send(SpawnReply{ID: r.req.ID, Err: msg, Errno: int(errno)})
		return
	}
	// Not reaped before this loop's next reap: the id is still the task's.
	st, _ := StartTime(pid)
	l.tasks[pid] = &spawned{id: r.req.ID, out: r.out, start: st}
	l.send(SpawnReply{ID: r.req.ID, Pid: pid, StartTime: st})
}

// reap collects every exited child; for each task's own process it kills
// the rest of its process group and reports its end.
func (l *spawnLoop) reap() {
	var ended []SpawnReply
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if pid <= 0 || err != nil {
			break
		}
		t := l.tasks[pid]
		if t == nil {
			continue // an orphan of some task, reparented here
		}
		delete(l.tasks, pid)
		// Reaped just now, by the one loop that forks: no task of this
		// spawner took the id since, so the group is still the task's.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		syscall.Close(t.out)
		rep := SpawnReply{ID: t.id, Exited: true, Reason: t.stopped}
		switch {
		case ws.Exited():
			rep.Code = ws.ExitStatus()
		case ws.Signaled():
			rep.Signal = int(ws.Signal())
		default:
			rep.Code = 1
		}
		ended = append(ended, rep)
	}
	if len(ended) == 0 {
		return
	}
	l.anyEnded = true
	clean := l.subreaper && l.onlyTasksLeft()
	for _, rep := range ended {
		rep.Clean = clean
		l.send(rep)
		if !clean { // what is left is looked at next (orphans)
			l.ended = append(l.ended, rep.ID)
		}
	}
}

// onlyTasksLeft reports whether the spawner's children are all live
// tasks' own processes: then no task that ended left anything (its
// descendants would have a chain of live parents up to a child of the
// spawner that is no task's own process). It reads the children of each
// of the spawner's threads (/proc/self/task/*/children); false when it
// cannot.
func (l *spawnLoop) onlyTasksLeft() bool {
	kids, ok := childrenOf()
	if !ok {
		return false
	}
	for _, pid := range kids {
		if l.tasks[pid] == nil {
			return false
		}
	}
	return true
}

// readLease reads the lease file, and returns the expiry read, or the
// last one read with the error when it cannot be read.
func (l *spawnLoop) readLease() (time.Time, error) {
	e, err := ReadExpiry(l.leaseFile)
	if err == nil {
		l.expiry = e
		return e, nil
	}
	return l.expiry, err
}

// checkLease stops every process below once the lease in the file has
// expired: SIGTERM now, SIGKILL grace later to those and to whatever else
// is below then, but the tasks started since (the lease was renewed).
func (l *spawnLoop) checkLease(now time.Time) {
	if !l.killAt.IsZero() {
		if !now.Before(l.killAt) {
			killBelow(syscall.SIGKILL, l.spared())
			l.killAt, l.doomed = time.Time{}, nil
		}
		return
	}
	if l.closing {
		return
	}
	expiry, _ := l.readLease() // unreadable for a moment: the last lease read holds
	if expiry.IsZero() || now.Before(expiry) {
		return
	}
	if kids, _ := childrenOf(); len(l.tasks) == 0 && len(kids) == 0 {
		return // nothing below to stop
	}
	l.stopAll(fmt.Sprintf("megaflow-init: the worker's lease expired at %s (the worker is gone or frozen and did not renew it); stopping the task (SIGTERM, SIGKILL in %v)",
		expiry.Format(time.RFC3339Nano), l.grace), "the worker's lease expired: megaflow-init stopped the task")
}

// closeDown stops every process below because the worker is gone (its
// end of the socket closed), once, and sets when the spawner gives up
// reaping and exits.
func (l *spawnLoop) closeDown(exitBy *time.Time) {
	if l.closing {
		return
	}
	l.closing = true
	*exitBy = time.Now().Add(l.grace + 5*time.Second)
	const reason = "the worker is gone: megaflow-init stopped the task"
	l.stopAll(fmt.Sprintf("megaflow-init: %s (SIGTERM, SIGKILL in %v)", reason, l.grace), reason)
}

// stopAll says msg in every task's log and sends SIGTERM to every process
// below the spawner, SIGKILL grace later (to the same tasks: doomed).
func (l *spawnLoop) stopAll(msg, reason string) {
	l.doomed = map[int]bool{}
	for pid, t := range l.tasks {
		say(t.out, msg)
		t.stopped = reason
		l.doomed[pid] = true
	}
	killBelow(syscall.SIGTERM, nil)
	if at := time.Now().Add(l.grace); l.killAt.IsZero() || at.Before(l.killAt) {
		l.killAt = at
	}
}

// owners returns the ids of the live tasks that could have left orphan
// pid, which started at st: the task its marker names (none when that
// task has ended), or, without a marker (an `env -i` stripped it), every
// task that started no later than it did (a later one cannot be its
// ancestor). marked reports a marker.
func (l *spawnLoop) owners(pid int, st uint64) (ids []string, marked bool) {
	if id, ok := markerOf(pid); ok {
		for _, t := range l.tasks {
			if t.id == id {
				return []string{id}, true
			}
		}
		return nil, true
	}
	for _, t := range l.tasks {
		if t.start <= st {
			ids = append(ids, t.id)
		}
	}
	return ids, false
}

// spared returns the spawner's children the lapse's SIGKILL spares: the
// tasks started since the lapse (not doomed), and the orphans one of them
// could have left (owners).
func (l *spawnLoop) spared() map[int]bool {
	spare := map[int]bool{}
	doomedIDs := map[string]bool{}
	for pid, t := range l.tasks {
		if l.doomed[pid] {
			doomedIDs[t.id] = true
		} else {
			spare[pid] = true
		}
	}
	if len(spare) == 0 {
		return spare
	}
	kids, _ := childrenOf()
	for _, pid := range kids {
		if l.tasks[pid] != nil {
			continue
		}
		st, err := StartTime(pid)
		if err != nil {
			continue // gone
		}
		ids, _ := l.owners(pid, st)
		for _, id := range ids {
			if !doomedIDs[id] {
				spare[pid] = true
				break
			}
		}
	}
	return spare
}

// orphans looks at the spawner's children that are no task's own
// process, once some task ended or some orphan without a marker waits:
// one with the marker of a task that ended is killed (with what is below
// it), one with a live task's marker is left to that task, and one with
// no marker is a suspect until every task that could have left it has
// ended, and is killed then.
func (l *spawnLoop) orphans() {
	ended := l.ended
	l.ended, l.anyEnded = nil, false
	kids, _ := childrenOf()
	seen := map[int]bool{}
	for _, pid := range kids {
		if l.tasks[pid] != nil {
			continue
		}
		seen[pid] = true
		st, err := StartTime(pid)
		if err != nil {
			continue // gone
		}
		ids, marked := l.owners(pid, st)
		switch {
		case marked && len(ids) > 0:
			continue // a live task's daemon
		case marked:
			killSubtree(pid, syscall.SIGKILL) // its task ended
			continue
		}
		sus, ok := l.suspects[pid]
		if !ok || sus.start != st {
			sus = suspect{start: st, tasks: map[string]bool{}}
			for _, id := range ids {
				sus.tasks[id] = true
			}
			for _, id := range ended {
				sus.tasks[id] = true
			}
		}
		live := map[string]bool{}
		for _, id := range ids {
			live[id] = true
		}
		for id := range sus.tasks {
			if !live[id] {
				delete(sus.tasks, id)
			}
		}
		if len(sus.tasks) == 0 {
			killSubtree(pid, syscall.SIGKILL)
			delete(l.suspects, pid)
			continue
		}
		l.suspects[pid] = sus
	}
	for pid := range l.suspects {
		if !seen[pid] {
			delete(l.suspects, pid) // ended, or killed
		}
	}
}

// markerOf returns the task id in process pid's TaskMarkerEnv, if it has
// one and its environment can be read.
func markerOf(pid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return "", false
	}
	prefix := TaskMarkerEnv + "="
	for _, kv := range strings.Split(string(b), "\x00") {
		if v, ok := strings.CutPrefix(kv, prefix); ok {
			return v, true
		}
	}
	return "", false
}

// childrenOf lists the spawner's children, from each of its threads'
// /proc children file; ok is false when /proc cannot tell.
func childrenOf() (pids []int, ok bool) {
	threads, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, false
	}
	var out []int
	for _, th := range threads {
		b, err := os.ReadFile("/proc/self/task/" + th.Name() + "/children")
		if err != nil {
			continue // a thread that just exited
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out, true
}

// killBelow sends sig to every process below the spawner but the
// subtrees of the children in spare.
func killBelow(sig syscall.Signal, spare map[int]bool) {
	tree := processTree()
	self := os.Getpid()
	for _, c := range tree[self] {
		if spare[c] {
			continue
		}
		_ = syscall.Kill(c, sig)
		for _, d := range below(tree, c) {
			_ = syscall.Kill(d, sig)
		}
	}
}

// killSubtree sends sig to pid and every process below it.
func killSubtree(pid int, sig syscall.Signal) {
	_ = syscall.Kill(pid, sig)
	for _, d := range below(processTree(), pid) {
		_ = syscall.Kill(d, sig)
	}
}

// say writes msg and a newline to the task's log at descriptor fd without
// blocking: through a new, non-blocking open file description of the same
// pipe (/proc/self/fd), so that the task's own descriptor stays blocking.
// A full pipe (a frozen worker reads none of it) loses the message rather
// than stalling every other task's lease.
func say(fd int, msg string) {
	w, err := syscall.Open("/proc/self/fd/"+strconv.Itoa(fd), syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	_, _ = syscall.Write(w, []byte(msg+"\n"))
	syscall.Close(w)
}

// closeOnExecAll marks every descriptor above stderr close-on-exec, so
// that the tasks get only their three: whatever the worker inherited
// without the flag (a shell's or a supervisor's descriptors) passed on to
// the spawner through its exec, and would pass on to every task.
func closeOnExecAll() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// StatFields returns the fields of /proc/<pid>/stat after the command
// name (which may hold spaces and parentheses): f[0] is the state (field
// 3), f[1] the parent (field 4), f[2] the process group (field 5), f[19]
// the start time (field 22). Errors: the process is gone, or the file is
// not as proc(5) says.
func StatFields(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	return strings.Fields(s[i+1:]), nil
}

// StartTime returns the start time of process pid in clock ticks since
// boot (proc(5): /proc/<pid>/stat field 22), which tells a process from a
// later one with its pid. Errors: as StatFields.
func StartTime(pid int) (uint64, error) {
	f, err := StatFields(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command", pid, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}
