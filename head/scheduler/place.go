package scheduler

import "slices"

// Place runs one scheduling round over in and returns the plan: which
// queued tasks go to which workers (with which GPUs), which workers are
// held for waiting tasks, and why each other task waits. The head leader
// calls it from its scheduling loop; it is a pure function of in (see the
// package documentation for the algorithm) and safe to call from any
// goroutine.
func Place(in Input) Plan {
	return place(in, func(ws []*worker, ts []ptask) finder {
		return newClassIndex(ws, ts, in.Policy.ImageLocalityBonus)
	}, options{})
}

// finder finds the best worker for a task. Place uses the class index; the
// tests use a brute-force scan of every worker.
type finder interface {
	// best returns the best worker for t now, or a choice with a nil
	// worker if none fits. special lists the workers held by tasks t is
	// exempt from, which t may see with more room than their class shows.
	best(t *ptask, special []*worker) choice
	// changed says that w's allocation or held resources changed.
	changed(w *worker)
}

// maxHolds bounds the holds of one round (they are tracked in a bitmask).
const maxHolds = 64

// options turn off shortcuts, for the tests that check them.
type options struct {
	twoPasses bool // run the second pass even when it would change nothing
	noMemo    bool // search for every task, even of a shape that fitted nowhere
}

// place runs a round in two passes. The first finds the tasks that wait
// and the workers they hold. The second runs the round again with those
// holds in force from the start, so that tasks coming earlier in the
// interleaved order cannot take a held worker either (unless exempt: see
// exempt).
func place(in Input, newFinder func([]*worker, []ptask) finder, opt options) Plan {
	r := newRound(in, nil)
	r.run(newFinder(r.workers, r.tasks), opt)
	if len(r.active) == 0 || !opt.twoPasses && !r.holdsWouldMatter() {
		return r.finish()
	}
	r2 := newRound(in, r.active)
	r2.admitted = r.admitted
	r2.run(newFinder(r2.workers, r2.tasks), opt)
	return r2.finish()
}

// round is the state of one pass.
type round struct {
	in      Input
	workers []*worker
	// base is the workers at the start of the round with the round's holds
	// set aside and no placements: hold targets are chosen there, so a
	// held worker is the one closest to fitting before the round began.
	base  []*worker
	tasks []ptask
	order []int // task indices in round order

	quotas     map[string]*Quota
	cluster    Quota
	admitted   map[int]string // task index -> "" or Admit's reason, kept across passes
	refused    map[int]string // task index -> Admit's reason
	considered []bool
	placed     []bool
	stopped    bool // MaxPlacements reached

	gangs      []*gang // task index -> its gang; nil when no task is in one
	gangPlaced bool    // a gang was placed this pass

	pos       int              // round position of the task being considered
	placedOn  map[int][]placed // worker index -> the tasks placed on it
	holdsLeft map[string]int   // queue -> reservations left
	active    []hold           // holds in force, in the order they were made
	own       map[int]*worker  // task index -> the worker it holds
	plan      Plan

	workerIndex map[string]int     // worker id -> index in workers
	sessionOn   map[string]*worker // sessionKey -> the worker a task of it was placed on this round
	pinWait     map[int]*worker    // task index -> the pinned worker it found full
}

// hold is a worker held for a waiting task.
type hold struct {
	task   int // index in Input.Tasks
	worker int // index in Input.Workers
	pos    int // round position at which the first pass made it
}

// placed is a placement of the first pass, for holdsWouldMatter.
type placed struct {
	task int // index in Input.Tasks
	pos  int // round position
}

// holdsWouldMatter reports whether the second pass could differ from the
// first: whether, before some hold was made, a task not exempt from it was
// placed on the worker it holds. If not, each task of the second pass
// would see the same workers fit as in the first (a hold in force earlier
// only takes room that nobody it binds used), make the same choice, and
// the second pass would repeat the first. A gang placed in the pass counts
// as mattering: its members' matching (see matchGang) may move one member
// for another, and fewer fitting workers could change which moves it
// makes, so the second pass is not skipped.
func (r *round) holdsWouldMatter() bool {
	if r.gangPlaced {
		return true
	}
	for _, h := range r.active {
		x := &r.tasks[h.task]
		for _, p := range r.placedOn[h.worker] {
			if p.pos < h.pos && !exempt(&r.tasks[p.task], x) {
				return true
			}
		}
	}
	return false
}

// memoKey identifies tasks that fit the same workers at a point of a pass:
// same shape, exempt from the same holds.
type memoKey struct {
	fit    fitKey
	exempt uint64 // bits: indices in round.active
}

func newRound(in Input, pre []hold) *round {
	r := &round{
		in:         in,
		workers:    newWorkers(in.Workers, in.Seed),
		base:       newWorkers(in.Workers, in.Seed),
		tasks:      newTasks(in.Tasks, in.Policy),
		quotas:     map[string]*Quota{},
		cluster:    in.Cluster,
		admitted:   map[int]string{},
		refused:    map[int]string{},
		considered: make([]bool, len(in.Tasks)),
		placed:     make([]bool, len(in.Tasks)),
		holdsLeft:  map[string]int{},
		placedOn:   map[int][]placed{},
		own:        map[int]*worker{},
		plan:       Plan{Unplaced: map[string]Reason{}},

		workerIndex: make(map[string]int, len(in.Workers)),
		sessionOn:   map[string]*worker{},
		pinWait:     map[int]*worker{},
	}
	for i, w := range in.Workers {
		r.workerIndex[w.ID] = i
	}
	r.order = order(r.tasks, in.Policy, in.Running)
	r.gangs = newGangs(r.tasks)
	for _, name := range sortedKeys(in.Quotas) {
		q := in.Quotas[name]
		r.quotas[name] = &q
	}
	for _, h := range pre {
		t := &r.tasks[h.task]
		r.base[h.worker].hold(t)
		r.workers[h.worker].hold(t)
		r.own[h.task] = r.workers[h.worker]
		r.active = append(r.active, h)
		r.holdsLeft[t.t.Queue] = r.reservationsLeft(t.t.Queue) - 1
	}
	return r
}

// run considers every task in round order.
func (r *round) run(f finder, opt options) {
	// Within a pass, room only shrinks: holds are never given back except
	// to become the holder's placement. So tasks of one shape, exempt from
	// the same holds, that fitted nowhere still fit nowhere.
	failed := map[memoKey]bool{}
	for pos, i := range r.order {
		r.pos = pos
		t := &r.tasks[i]
		if g := r.gangOf(i); g != nil {
			// The first member in round order places the whole gang;
			// the others were placed with it or failed with it.
			if !g.tried && !r.placeGang(g, f) && r.stopped {
				return
			}
			continue
		}
		if !r.consider(t) {
			if r.stopped {
				return
			}
			continue
		}
		if w, ok := r.pin(t); ok {
			r.placePinned(t, w, f)
			continue
		}
		special, mask := r.exemptions(t)
		key := memoKey{t.fit, mask}
		if opt.noMemo || !failed[key] {
			if ch := f.best(t, special); ch.w != nil {
				r.place(t, ch.w)
				f.changed(ch.w)
				continue
			}
			failed[key] = true
		}
		if r.own[i] == nil {
			if w := r.maybeHold(t); w != nil {
				f.changed(w)
			}
		}
	}
}

// exemptions returns the workers held by tasks t is exempt from, and those
// holds as a bitmask over r.active.
func (r *round) exemptions(t *ptask) (special []*worker, mask uint64) {
	for i, h := range r.active {
		if exempt(t, &r.tasks[h.task]) {
			mask |= 1 << i
			if w := r.workers[h.worker]; !slices.Contains(special, w) {
				special = append(special, w)
			}
		}
	}
	return special, mask
}

// consider runs the admission checks for t, the next task in round order,
// and reports whether it may be fitted. It sets r.stopped when the round's
// placement cap is reached.
func (r *round) consider(t *ptask) bool {
	if limit := r.in.Policy.MaxPlacements; limit > 0 && len(r.plan.Placements) >= limit {
		r.stopped = true
		return false
	}
	r.considered[t.idx] = true
	if !r.admit(t) {
		return false
	}
	d := taskDemand(t)
	if quotaFull(&r.cluster, d) {
		return false
	}
	if q := r.quotas[t.t.Tenant]; q != nil && quotaFull(q, d) {
		return false
	}
	return true
}

// admit asks Input.Admit about t, once per task across both passes, and
// reports whether it admitted t; a refusal is recorded in r.refused.
func (r *round) admit(t *ptask) bool {
	if r.in.Admit == nil {
		return true
	}
	why, asked := r.admitted[t.idx]
	if !asked {
		var ok bool
		if ok, why = r.in.Admit(*t.t); ok {
			why = ""
		} else if why == "" {
			why = "refused by an admission limit"
		}
		r.admitted[t.idx] = why
	}
	if why != "" {
		r.refused[t.idx] = why
		return false
	}
	return true
}

// place records t on w. If w was held for t, the hold becomes the
// placement; a hold elsewhere stays in force to the end of the pass.
func (r *round) place(t *ptask, w *worker) {
	w.release(t)
	gpus := w.place(t)
	r.placed[t.idx] = true
	r.placedOn[w.i] = append(r.placedOn[w.i], placed{task: t.idx, pos: r.pos})
	r.plan.Placements = append(r.plan.Placements, Placement{TaskID: t.t.ID, WorkerID: w.id, GPUUUIDs: gpus})
	charge(&r.cluster, t)
	if q := r.quotas[t.t.Tenant]; q != nil {
		charge(q, t)
	}
	if t.t.Session != "" && t.t.Gang == "" {
		if k := sessionKey(GraphOf(t.t.ID), t.t.Session); r.sessionOn[k] == nil {
			r.sessionOn[k] = w
		}
	}
}

func (r *round) reservationsLeft(queue string) int {
	if left, ok := r.holdsLeft[queue]; ok {
		return left
	}
	return r.in.Policy.reservations()
}

// maybeHold holds a worker for t, which fits nowhere now, if its queue has
// reservations left and some worker could ever run it. It returns the
// worker held, or nil.
func (r *round) maybeHold(t *ptask) *worker {
	q := t.t.Queue
	left := r.reservationsLeft(q)
	if left <= 0 || len(r.active) >= maxHolds {
		return nil
	}
	b := holdTarget(r.base, t)
	if b == nil {
		return nil
	}
	r.holdsLeft[q] = left - 1
	b.hold(t)
	w := r.workers[b.i]
	w.hold(t)
	r.own[t.idx] = w
	r.active = append(r.active, hold{task: t.idx, worker: b.i, pos: r.pos})
	return w
}

// finish lists the holds of waiting tasks and gives every unplaced task
// its reason.
func (r *round) finish() Plan {
	for _, h := range r.active {
		if !r.placed[h.task] {
			r.plan.Held = append(r.plan.Held, Hold{TaskID: r.tasks[h.task].t.ID, WorkerID: r.workers[h.worker].id})
		}
	}
	memo := map[memoKey]Reason{}
	gangWhy := map[*gang]Reason{}
	for i := range r.tasks {
		if r.placed[i] {
			continue
		}
		if g := r.gangOf(i); g != nil {
			why, ok := gangWhy[g]
			if !ok {
				why = r.gangReason(g)
				gangWhy[g] = why
			}
			r.plan.Unplaced[r.tasks[i].t.ID] = why
			continue
		}
		r.plan.Unplaced[r.tasks[i].t.ID] = r.reason(&r.tasks[i], memo)
	}
	return r.plan
}

// demand is what a task, or a whole gang, asks of a quota.
type demand struct {
	subject        string // who asks, for reasons: "the task", or `gang "train"`
	n              int    // tasks
	cpu, mem, gpus int64  // the sum of their requests
}

// taskDemand returns what t alone asks of a quota.
func taskDemand(t *ptask) demand {
	return demand{subject: "the task", n: 1, cpu: t.cpu, mem: t.mem, gpus: t.gpus}
}

// add counts t in d.
func (d *demand) add(t *ptask) {
	d.n++
	d.cpu += t.cpu
	d.mem += t.mem
	d.gpus += t.gpus
}

// quotaFull reports whether q has no room for d now.
func quotaFull(q *Quota, d demand) bool {
	if q.MaxRunning > 0 && q.Running+d.n > q.MaxRunning {
		return true
	}
	return over(q.Used.CPUMillis+d.cpu, q.Max.CPUMillis, d.cpu) ||
		over(q.Used.MemoryBytes+d.mem, q.Max.MemoryBytes, d.mem) ||
		over(q.Used.GPUs+d.gpus, q.Max.GPUs, d.gpus)
}

// over reports whether a sum exceeds a limit (0: none) because of a request.
func over(sum, limit, req int64) bool { return limit > 0 && req > 0 && sum > limit }

func charge(q *Quota, t *ptask) {
	q.Running++
	q.Used.CPUMillis += t.cpu
	q.Used.MemoryBytes += t.mem
	q.Used.GPUs += t.gpus
}
