package process

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"sync"
	"syscall"

	"github.com/megaflow/megaflow/internal/leaseinit"
)

// Every process a task starts, and whatever it starts in turn, inherits
// TreeEnv=<the process id Start returned> in its environment. Ending a task
// (its leader exits, Stop, Remove, StopAll) signals its process group and
// then every process that carries its marker (the sweeper's scans): a
// descendant that left the group and the session (setsid, a daemon's
// double fork) and was reparented to init is found by its environment,
// which survives both. When the leader exits by itself, the rest of the
// tree is killed before the attempt's exit is reported (Wait returns
// only after), so a task's detached descendant never outlives the end the
// worker reports. This needs no privileges and no cgroup (which a worker
// without Docker usually cannot create), and only /proc. What it cannot
// reach: a process that clears or rewrites its environment before exec
// (env -i), and processes of another user (a setuid program) whose /proc
// environ this worker cannot read; under the spawner (Spec.Init) such a
// process still comes to the spawner as an orphan, which kills it once
// every task that could have left it has ended (leaseinit, spawn.go). A task run under megaflow-init
// (Spec.Init) also has the spawner as a child subreaper, which says when
// a task left nothing, so that its end needs no scan (spawn.go).
//
// The marker is read and the signal sent in two steps: a pid that ended
// and was reused in between by a new process of the same task tree is
// still ours; one reused by an unrelated process is not marked (it has its
// own environment), so it is never signalled.
//
// Cost: a scan reads the environ of every process on the machine, so one
// scan per task end made the scans the process runtime's largest cost at
// high task rates (issue 17: 44% of a worker's CPU running `true` tasks).
// The sweeper therefore batches them, as a group commit: the requests that
// arrive while a scan runs all wait for the next scan, which matches every
// environment against all of their markers at once. One request alone
// waits one scan, as before; many ending together share each scan.

// TreeEnv is the environment variable that marks a task's processes.
const TreeEnv = leaseinit.TaskMarkerEnv

// maxKillRounds bounds a tree kill's scans against a tree that forks while
// it is being killed: each scan signals every marked process found.
const maxKillRounds = 20

// treeReq is one request to the sweeper: signal the processes marked id
// with sig, scan after scan while a scan finds some, at most rounds scans.
type treeReq struct {
	id     string
	sig    syscall.Signal
	rounds int           // scans left, at least 1
	found  int           // processes the last scan signalled for it
	done   chan struct{} // closed once answered
}

// sweeper runs the scans for a Runtime's tree kills and signals. It owns
// at most one goroutine, which runs while requests are pending and exits
// once none are (so an idle Runtime has none, and nothing to stop): every
// request is answered before it exits.
type sweeper struct {
	mu      sync.Mutex
	pending []*treeReq // queued for the next scan
	running bool       // the goroutine runs
	scans   uint64     // scans run (tests read it)
	// sc is the goroutine's, kept between its runs (only the running
	// goroutine uses it).
	sc *scanner
}

// killTree SIGKILLs every marked process of id, scan after scan until a
// scan finds none (a process killed between a scan and its signal, or born
// from one not yet killed, is caught by the next), at most maxKillRounds
// scans, and returns once done.
func (s *sweeper) killTree(id string) { s.do(id, syscall.SIGKILL, maxKillRounds) }

// signal sends sig once to every marked process of id (one scan) and
// returns once sent.
func (s *sweeper) signal(id string, sig syscall.Signal) { s.do(id, sig, 1) }

func (s *sweeper) do(id string, sig syscall.Signal, rounds int) {
	if id == "" {
		return
	}
	r := &treeReq{id: id, sig: sig, rounds: rounds, done: make(chan struct{})}
	s.mu.Lock()
	s.pending = append(s.pending, r)
	start := !s.running
	s.running = true
	s.mu.Unlock()
	if start {
		go s.run()
	}
	<-r.done
}

// run scans while requests are pending: each scan serves every request
// queued before it began; a request whose scan found processes goes again
// (until its rounds are spent), the others are answered.
func (s *sweeper) run() {
	var batch []*treeReq
	s.mu.Lock()
	if s.sc == nil {
		s.sc = newScanner()
	}
	sc := s.sc
	s.mu.Unlock()
	for {
		s.mu.Lock()
		batch = append(batch, s.pending...)
		s.pending = s.pending[:0]
		if len(batch) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.scans++
		s.mu.Unlock()
		sc.scan(batch)
		if len(sc.buf) > maxKeptBuffer { // one process had a huge environment
			sc.buf = make([]byte, initialBuffer)
		}
		next := batch[:0]
		for _, r := range batch {
			r.rounds--
			if r.found == 0 || r.rounds == 0 {
				close(r.done)
				continue
			}
			next = append(next, r)
		}
		clear(batch[len(next):])
		batch = next
	}
}

// scanCount returns how many scans the sweeper ran.
func (s *sweeper) scanCount() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scans
}

// scanner reads /proc with buffers it keeps between scans.
type scanner struct {
	self  int
	buf   []byte
	byID  map[string][]*treeReq
	names []string
}

// The scanner's environ buffer: its first size, and the most it keeps
// between scans (Linux allows environments of several MiB).
const (
	initialBuffer = 16 << 10
	maxKeptBuffer = 1 << 20
)

func newScanner() *scanner {
	return &scanner{self: os.Getpid(), buf: make([]byte, initialBuffer), byID: map[string][]*treeReq{}}
}

// markerPrefix starts the environment entry that marks a task's processes.
var markerPrefix = []byte(TreeEnv + "=")

// scan reads the environment of every process (but this one and init)
// once, and sends each one marked with a request's id that request's
// signal, setting each request's found to how many it signalled.
// Processes it may not read or signal are skipped. Several requests for
// one id each send their signal.
func (sc *scanner) scan(reqs []*treeReq) {
	clear(sc.byID)
	for _, r := range reqs {
		r.found = 0
		sc.byID[r.id] = append(sc.byID[r.id], r)
	}
	d, err := os.Open("/proc")
	if err != nil {
		return
	}
	sc.names, err = d.Readdirnames(-1)
	d.Close()
	if err != nil && len(sc.names) == 0 {
		return
	}
	for _, name := range sc.names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 1 || pid == sc.self {
			continue
		}
		env, ok := sc.environ(name)
		if !ok {
			continue // gone, not ours to read, or a zombie (empty)
		}
		for len(env) > 0 {
			var e []byte
			e, env, _ = bytes.Cut(env, []byte{0})
			v, ok := bytes.CutPrefix(e, markerPrefix)
			if !ok {
				continue
			}
			for _, r := range sc.byID[string(v)] { // no allocation: the compiler's map lookup by []byte
				if err := syscall.Kill(pid, r.sig); err == nil || !errors.Is(err, syscall.ESRCH) {
					r.found++
				}
			}
		}
	}
}

// environ reads /proc/<name>/environ into the scanner's buffer, growing it
// as needed; false when it cannot be read. It uses the system calls
// directly: an os.File would add a stat and a poller registration to each
// of a scan's hundreds of reads.
func (sc *scanner) environ(name string) ([]byte, bool) {
	fd, err := syscall.Open("/proc/"+name+"/environ", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer syscall.Close(fd)
	n := 0
	for {
		if n == len(sc.buf) {
			sc.buf = append(sc.buf, make([]byte, len(sc.buf))...)
		}
		m, err := syscall.Read(fd, sc.buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, false
		}
		if m == 0 {
			return sc.buf[:n], n > 0
		}
		n += m
	}
}
