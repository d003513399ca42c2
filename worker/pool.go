package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/worker/attempt"
)

// Persistent mode (TaskSpec.mode EXECUTION_MODE_PERSISTENT).
//
// The worker keeps a pool of warm containers per pool key: (image, tenant)
// and the container's limits (CPU, memory, pids, network, capabilities,
// GPUs), which tasks of one image and tenant normally share. A warm
// container runs an idle keeper (Config.PoolKeeper; by default a shell loop
// that sleeps and exits on SIGTERM; empty: the image's own command), and a
// persistent task's command is exec'd inside it (contract.Execer) with the
// task's environment, working directory and log file; the task's timeout
// and stops kill the exec (at once: there is no SIGTERM grace for an exec).
// Its exit maps to the same events as an ephemeral container's exit.
//
// Once the exec ended by itself with a code below 128, the container goes
// back to the pool for the next task of its key, at once (before the head
// acks the final event). After a kill (timeout, stop), a signal exit (128
// and above: an OOM kill, a dead container), an OOM or an exec error it is
// removed, and the next task gets a new one. A warm container is created,
// within the worker's cap on concurrent starts, when a task finds none idle
// and the key has fewer than PoolMax containers; otherwise the task waits
// for one; its timeout starts only when its exec does
// (attempt.Config.TimeoutFromStart). Idle containers beyond PoolMin are
// removed after PoolIdle; the worker keeps PoolMin containers warm for
// every key it has seen.
//
// Sessions: tasks of one graph with the same TaskSpec.session run in one
// container, one after another. The first binds the container it gets to
// the session; later ones wait for that container and never take another,
// and get it in the order they were assigned (a ticket per attempt taken
// when its start begins: enqueue), so none waits behind tasks assigned
// after it.
// A bound container serves no other task, and counts against PoolMax. The
// binding ends, and the container is removed (it holds the session's
// state), PoolIdle after the session's last task ended, or when the
// container is discarded as above (the next task of the session then binds
// a new one). The head must place every task of a session on the same
// worker (scheduler.Task's PinnedWorker).
//
// Warm containers carry LabelCluster, LabelWorker, LabelClusterID, LabelPool (a hash of the
// key), LabelImage and LabelTenant, and no attempt labels. Reconciliation
// leaves the pool's own containers alone, removes any other container with
// LabelPool, and drops idle pool containers it finds no longer running
// (the health check). A restarted worker removes every warm container of
// its previous run that no sandbox claimed (warmbox.go); an exec that ran there dies with it, and the head
// retries its attempt as lost. Runtimes without Execer run persistent
// tasks as ephemeral ones.

// Pool labels.
const (
	// LabelPool marks a warm container; its value is a hash of its pool key.
	LabelPool = "megaflow.pool"
	// LabelImage is a warm container's image.
	LabelImage = "megaflow.image"
	// LabelTenant is a warm container's tenant, and the tenant of an
	// attempt's container.
	LabelTenant = "megaflow.tenant"
)

// DefaultPoolKeeper is the idle process of a warm container: it sleeps
// until SIGTERM and exits 0 on it. It needs a POSIX shell and sleep in the
// image.
var DefaultPoolKeeper = []string{"sh", "-c", `trap "exit 0" TERM; while :; do sleep 3600 & wait; done`}

// poolKey says which warm containers a persistent task may use.
type poolKey struct {
	image, tenant string
	shape         string // limits, canonical
	// confine is the admission policy's confinement (user, read-only
	// root, pids limit), also within shape: a session's later tasks run
	// in its container only under the confinement it was started with.
	confine string
}

func (k poolKey) hash() string {
	sum := sha256.Sum256([]byte(k.image + "\x00" + k.tenant + "\x00" + k.shape))
	return hex.EncodeToString(sum[:6])
}

// keyOf returns the pool key of a task's container spec.
func keyOf(tenant string, s contract.Spec) poolKey {
	caps := slices.Clone(s.Capabilities)
	slices.Sort(caps)
	gpus := slices.Clone(s.GPUUUIDs)
	slices.Sort(gpus)
	shape := fmt.Sprintf("cpu=%d mem=%d pids=%d net=%s caps=%s gpus=%s", s.CPUMillis, s.MemoryBytes, s.PidsLimit,
		s.Network, strings.Join(caps, ","), strings.Join(gpus, ","))
	if s.User != "" || s.ReadOnlyRootfs {
		// An admission policy's confinement: a container started without
		// it (a pre-warmed one) must not serve a task that needs it.
		shape += fmt.Sprintf(" user=%s ro=%t", s.User, s.ReadOnlyRootfs)
	}
	confine := fmt.Sprintf("user=%q read-only-root=%t pids=%d", s.User, s.ReadOnlyRootfs, s.PidsLimit)
	return poolKey{image: s.Image, tenant: tenant, shape: shape, confine: confine}
}

// warm is one warm container.
type warm struct {
	id       string
	name     string
	key      poolKey
	session  string // the session bound to it; "" for none
	busy     bool   // leased to an attempt
	used     bool   // it was leased once: an exec ran in it (a sandbox takes only unused ones)
	lastUsed time.Time
}

// keyPool is the warm containers of one key.
type keyPool struct {
	all      map[string]*warm // by id
	idle     []*warm          // not busy, not bound; least recently used first
	creating int
	tmpl     contract.Spec // what its containers are created from
}

// pool is the worker's warm containers. Attempts' drivers call acquire and
// release from their op goroutines; the pool goroutine (run) removes idle
// containers and keeps PoolMin warm; reconciliation calls owns and
// unhealthy. It is safe for concurrent use.
type pool struct {
	w  *Worker
	ex contract.Execer

	mu       sync.Mutex
	keys     map[poolKey]*keyPool
	sessions map[string]*warm // session key -> bound container
	creating map[string]bool  // names of containers being created
	seq      uint64
	targets  map[poolKey]int // pre-warm targets from the head: warm containers kept per key
	changed  chan struct{}   // closed and replaced whenever a container frees up or goes
	// queues holds, per session key, the tickets of the attempts waiting
	// for the session's container, in assignment order (enqueue); only the
	// first may take it.
	queues  map[string][]uint64
	tickets uint64
	// wg counts the pool's background removals and creations; Run waits
	// for it after the drivers ended.
	wg sync.WaitGroup
}

func newPool(w *Worker, ex contract.Execer) *pool {
	return &pool{
		w: w, ex: ex,
		keys:     map[poolKey]*keyPool{},
		sessions: map[string]*warm{},
		creating: map[string]bool{},
		queues:   map[string][]uint64{},
		seq:      uint64(w.clock.Now().UnixNano()),
		changed:  make(chan struct{}),
	}
}

// broadcastLocked wakes every acquire waiting. p.mu is held.
func (p *pool) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// enqueue takes a ticket in session's queue (session not ""): the
// attempts of a session get its container in the order they took their
// tickets. The driver calls it when the attempt's start begins, which is
// in assignment order (the stream goroutine applies each assignment's
// first event); leave gives the ticket back.
func (p *pool) enqueue(session string) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tickets++
	p.queues[session] = append(p.queues[session], p.tickets)
	return p.tickets
}

// leave takes ticket out of session's queue, if it is still there, and
// wakes the waiters so that the next ticket may go.
func (p *pool) leave(session string, ticket uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.queues[session]
	i := slices.Index(q, ticket)
	if i < 0 {
		return
	}
	q = slices.Delete(q, i, i+1)
	if len(q) == 0 {
		delete(p.queues, session)
	} else {
		p.queues[session] = q
	}
	p.broadcastLocked()
}

// acquire leases a warm container of key for one exec: the session's own
// container if session is bound, else an idle one, else a new one (created
// from spec, within a start slot) while the key has fewer than PoolMax;
// else it waits for one to free up until ctx ends. A non-empty session
// binds the container leased; its attempts go in the order of their
// tickets (enqueue): one whose ticket is not first in the queue waits.
// acquire leaves the queue when it returns, leased or not.
func (p *pool) acquire(ctx context.Context, key poolKey, spec contract.Spec, session string, ticket uint64) (*warm, error) {
	if session != "" {
		defer p.leave(session, ticket)
	}
	for {
		p.mu.Lock()
		if session != "" {
			if q := p.queues[session]; len(q) > 0 && q[0] != ticket {
				ch, ahead := p.changed, slices.Index(q, ticket)
				p.mu.Unlock()
				if err := waitChange(ctx, ch, fmt.Sprintf("the session's container (%d tasks of the session ahead)", ahead)); err != nil {
					return nil, err
				}
				continue
			}
			if b := p.sessions[session]; b != nil {
				if b.key.confine != key.confine {
					p.mu.Unlock()
					return nil, fmt.Errorf("session container %s was started as %s, and the tenant's admission policy now asks for %s: "+
						"the session's later tasks cannot run in it (%w); submit them in a new session (another session name or graph)",
						b.name, b.key.confine, key.confine, attempt.ErrNotRetryable)
				}
				if !b.busy {
					b.busy = true
					p.mu.Unlock()
					return b, nil
				}
				ch := p.changed
				p.mu.Unlock()
				if err := waitChange(ctx, ch, "the session's container"); err != nil {
					return nil, err
				}
				continue
			}
		}
		kp := p.keys[key]
		if kp == nil {
			kp = &keyPool{all: map[string]*warm{}, tmpl: spec}
			p.keys[key] = kp
		}
		if n := len(kp.idle); n > 0 {
			c := kp.idle[n-1]
			kp.idle = kp.idle[:n-1]
			c.busy = true
			p.bindLocked(c, session)
			p.mu.Unlock()
			return c, nil
		}
		if len(kp.all)+kp.creating < p.maxLocked(key) {
			kp.creating++
			p.mu.Unlock()
			c, err := p.create(ctx, key, kp.tmpl, true)
			if err != nil {
				return nil, err
			}
			p.mu.Lock()
			p.bindLocked(c, session)
			p.mu.Unlock()
			return c, nil
		}
		ch := p.changed
		p.mu.Unlock()
		if err := waitChange(ctx, ch, fmt.Sprintf("a warm container (all %d busy)", p.maxOf(key))); err != nil {
			return nil, err
		}
	}
}

func waitChange(ctx context.Context, ch <-chan struct{}, what string) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
	}
}

func (p *pool) bindLocked(c *warm, session string) {
	if session != "" {
		c.session = session
		p.sessions[session] = c
	}
}

// create starts a warm container of key from tmpl, within a start slot,
// and adds it to the pool, leased (busy) or idle. p.mu is not held; the
// caller counted it in keyPool.creating, and create takes it out of that
// count in the same critical section that adds the container (or, on
// failure, alone), and wakes the waiting acquires. Before, the caller
// took it out later, without a wakeup: an acquire that looked in between
// saw it counted twice, the key full, and waited for a change that never
// came (TestPersistentIdleRemoval: a third task waiting forever beside a
// pool of two with room for three).
func (p *pool) create(ctx context.Context, key poolKey, tmpl contract.Spec, busy bool) (c *warm, err error) {
	w := p.w
	p.mu.Lock()
	p.seq++
	name := poolContainerName(w.nameScope(), p.seq)
	p.creating[name] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.creating, name)
		if err != nil {
			p.keys[key].creating--
			p.broadcastLocked()
		}
		p.mu.Unlock()
	}()

	spec := contract.Spec{
		Init:           w.initSpec(),
		Name:           name,
		Image:          tmpl.Image,
		Command:        slices.Clone(w.cfg.PoolKeeper),
		CPUMillis:      tmpl.CPUMillis,
		MemoryBytes:    tmpl.MemoryBytes,
		PidsLimit:      tmpl.PidsLimit,
		User:           tmpl.User,
		ReadOnlyRootfs: tmpl.ReadOnlyRootfs,
		Network:        tmpl.Network,
		Capabilities:   slices.Clone(tmpl.Capabilities),
		GPUUUIDs:       slices.Clone(tmpl.GPUUUIDs),
		Labels: w.clusterLabels(map[string]string{
			LabelPool:   key.hash(),
			LabelImage:  key.image,
			LabelTenant: key.tenant,
		}),
		LogPath: filepath.Join(w.cfg.DataDir, "logs", "_pool", name+".log"),
	}
	files := ""
	if w.artifactsOn() && contract.Isolated(w.rt) {
		// Its execs' output and input directories live below this one.
		files = poolFilesDir(w.cfg.DataDir, name)
		if err := os.MkdirAll(files, 0o755); err != nil {
			return nil, fmt.Errorf("warm container files directory: %w", err)
		}
		spec.Mounts = []contract.Mount{{Source: files, Target: ContainerAttemptsDir}}
	}
	// A start that fails leaves no files directory behind (a target the
	// engine refuses is retried on every tick).
	dropFiles := func() {
		if files != "" {
			_ = os.RemoveAll(files)
		}
	}
	if err := w.sem.acquire(ctx); err != nil {
		dropFiles()
		return nil, fmt.Errorf("waiting for a start slot: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, w.cfg.StartTimeout)
	id, err := w.rt.Start(cctx, spec)
	cancel()
	w.sem.release()
	if err != nil {
		dropFiles()
		return nil, fmt.Errorf("start warm container: %w", err)
	}
	c = &warm{id: id, name: name, key: key, busy: busy, lastUsed: w.clock.Now()}
	p.mu.Lock()
	kp := p.keys[key]
	kp.all[id] = c
	kp.creating--
	if !busy {
		kp.idle = append(kp.idle, c)
	}
	p.broadcastLocked()
	p.mu.Unlock()
	w.log.Info("warm container started", "container", id, "name", name, "image", key.image, "tenant", key.tenant)
	return c, nil
}

// poolContainerName is "mf-<worker>-p<seq in base 36>", the worker part
// cut so that the name stays within 63 characters.
func poolContainerName(workerID string, seq uint64) string {
	suffix := "-p" + strconv.FormatUint(seq, 36)
	return "mf-" + truncate(workerID, maxNameLen-3-len(suffix)) + suffix
}

// release gives leased container c back: to the pool (or its session)
// when healthy, else it is removed; why says why it is not healthy.
func (p *pool) release(c *warm, healthy bool, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.busy = false
	c.used = true
	c.lastUsed = p.w.clock.Now()
	if !healthy {
		p.w.log.Info("removing a warm container", "container", c.id, "why", why)
		p.dropLocked(c)
		return
	}
	if c.session == "" {
		p.keys[c.key].idle = append(p.keys[c.key].idle, c)
	}
	p.broadcastLocked()
}

// dropLocked takes c out of the pool and removes its container in the
// background. p.mu is held.
func (p *pool) dropLocked(c *warm) {
	kp := p.keys[c.key]
	if kp.all[c.id] != c {
		return
	}
	delete(kp.all, c.id)
	kp.idle = slices.DeleteFunc(kp.idle, func(x *warm) bool { return x == c })
	if c.session != "" && p.sessions[c.session] == c {
		delete(p.sessions, c.session)
	}
	p.broadcastLocked()
	p.removeAsync(c.id, c.name)
}

// live reports whether warm container c is still in the pool.
func (p *pool) live(c *warm) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	kp := p.keys[c.key]
	return kp != nil && kp.all[c.id] == c
}

// removeAsync removes container id in a goroutine the pool owns (Run waits
// for it); the removal has its own deadline, so it also ends after the
// worker stopped. Its files directory goes too once empty: the files of
// an exec still being collected keep it, and that exec's collection
// removes it (persistent.go).
func (p *pool) removeAsync(id, name string) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		rctx, cancel := context.WithTimeout(context.Background(), p.w.cfg.CallTimeout)
		defer cancel()
		if err := p.w.rt.Remove(rctx, id); err != nil {
			p.w.log.Warn("removing a warm container failed; reconciliation will retry", "container", id, "err", err)
			return
		}
		_ = os.Remove(poolFilesDir(p.w.cfg.DataDir, name))
	}()
}

// owns reports whether container c (listed with LabelPool) is one of the
// pool's, or one being created.
func (p *pool) owns(c contract.Container) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.creating[c.Name] {
		return true
	}
	for _, kp := range p.keys {
		if _, ok := kp.all[c.ID]; ok {
			return true
		}
	}
	return false
}

// unhealthy drops the pool's container id, found no longer running by
// reconciliation, unless it is leased (then its exec fails, and the
// release drops it).
func (p *pool) unhealthy(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, kp := range p.keys {
		if c, ok := kp.all[id]; ok && !c.busy {
			p.w.log.Warn("warm container no longer runs; replacing it", "container", id)
			p.dropLocked(c)
		}
	}
}

// tick ends session bindings unused for PoolIdle (removing their
// containers), removes idle containers unused for PoolIdle beyond PoolMin
// per key, and starts containers for keys below PoolMin. The pool
// goroutine calls it.
func (p *pool) tick(ctx context.Context) {
	now := p.w.clock.Now()
	idle := p.w.cfg.PoolIdle
	p.mu.Lock()
	for _, s := range slices.Sorted(maps.Keys(p.sessions)) {
		if c := p.sessions[s]; !c.busy && now.Sub(c.lastUsed) >= idle {
			p.w.log.Info("session idle: removing its container", "session", strings.ReplaceAll(s, "\x00", "/"), "container", c.id)
			p.dropLocked(c)
		}
	}
	type want struct {
		key  poolKey
		tmpl contract.Spec
		n    int
	}
	var wants []want
	for key, kp := range p.keys {
		for len(kp.all) > p.minLocked(key) && len(kp.idle) > 0 && now.Sub(kp.idle[0].lastUsed) >= idle {
			p.w.log.Info("removing an idle warm container", "container", kp.idle[0].id, "idle_for", now.Sub(kp.idle[0].lastUsed))
			p.dropLocked(kp.idle[0])
		}
		if n := p.minLocked(key) - len(kp.all) - kp.creating; n > 0 {
			kp.creating += n
			wants = append(wants, want{key, kp.tmpl, n})
		}
	}
	p.mu.Unlock()
	for _, wt := range wants {
		for range wt.n {
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				_, err := p.create(ctx, wt.key, wt.tmpl, false)
				if err != nil && ctx.Err() == nil {
					p.w.log.Warn("pre-warming a container failed", "image", wt.key.image, "err", err)
				}
			}()
		}
	}
}

// removeAll removes every container still in the pool, idle or busy (a
// sandbox's claimed container is no longer the pool's), and their files
// directories, within ctx; a restarted worker would remove them anyway (an
// exec still running in one dies with it, as at a restart). Shutdown
// calls it once Run has returned, so no tick refills the pool meanwhile.
// It returns the removals that failed.
func (p *pool) removeAll(ctx context.Context) error {
	p.mu.Lock()
	var all []*warm
	for _, kp := range p.keys {
		for _, c := range kp.all {
			all = append(all, c)
		}
		kp.all, kp.idle = map[string]*warm{}, nil
	}
	p.broadcastLocked()
	p.mu.Unlock()
	var err error
	for _, c := range all {
		if rerr := p.w.rt.Remove(ctx, c.id); rerr != nil && !errors.Is(rerr, contract.ErrNotFound) {
			err = errors.Join(err, fmt.Errorf("removing warm container %s: %w", c.id, rerr))
			continue
		}
		_ = os.RemoveAll(poolFilesDir(p.w.cfg.DataDir, c.name))
	}
	if len(all) > 0 {
		p.w.log.Info("removed the warm containers at shutdown", "containers", len(all), "err", err)
	}
	return err
}

// run is the pool goroutine: a tick every PoolIdle/4 (at least 10 ms)
// until ctx ends.
func (p *pool) run(ctx context.Context) {
	every := max(p.w.cfg.PoolIdle/4, 10*time.Millisecond)
	for clock.Sleep(p.w.clock, every, ctx.Done()) {
		p.tick(ctx)
	}
}

// PoolStatus is one warm container, as Pool reports it.
type PoolStatus struct {
	// ContainerID is the container's id.
	ContainerID string
	// Image and Tenant are its pool's.
	Image, Tenant string
	// Busy is true while an attempt's exec runs in it.
	Busy bool
	// Session is the session bound to it ("<graph id>/<session>"), if any.
	Session string
}

// Pool returns the worker's warm containers, sorted by container id. Any
// goroutine may call it (tests, status pages).
func (w *Worker) Pool() []PoolStatus {
	if w.pool == nil {
		return nil
	}
	p := w.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []PoolStatus
	for _, kp := range p.keys {
		for _, c := range kp.all {
			out = append(out, PoolStatus{ContainerID: c.id, Image: c.key.image, Tenant: c.key.tenant, Busy: c.busy,
				Session: strings.ReplaceAll(c.session, "\x00", "/")})
		}
	}
	slices.SortFunc(out, func(a, b PoolStatus) int { return strings.Compare(a.ContainerID, b.ContainerID) })
	return out
}

// errNoCommand refuses a persistent task without a command: there is
// nothing to exec in the warm container.
var errNoCommand = errors.New("a persistent task needs a command to exec in its warm container")
