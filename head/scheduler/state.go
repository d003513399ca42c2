package scheduler

import (
	"cmp"
	stdmaps "maps"
	"math/bits"
	"slices"
	"strings"

	"github.com/megaflow/megaflow/gpu/alloc"
)

// worker is a Worker's state during one round: static facts copied from
// the input, and what the round changes (allocation, held resources,
// starts, free GPUs).
type worker struct {
	i      int // index in Input.Workers
	id     string
	hash   uint64 // seeded hash of id: the tie-breaker
	capCPU int64
	capMem int64
	labels map[string]string
	images map[string]bool
	devs   []device // every GPU, by memory then UUID: the order pickGPUs takes them
	nGPU   int64
	maxSt  int

	allocCPU, allocMem int64
	busyGPU            int64
	holders            []*ptask // waiting tasks holding this worker, in the order they took it
	heldCPU, heldMem   int64    // the sum of their requests
	heldGPU            int64
	starts             int
	static             int32  // interned static class key
	popMask            uint64 // popular images held (see classIndex)
	cls                *class
	heapIdx            int
}

// device is one GPU of a worker.
type device struct {
	uuid  string
	model string
	lower string // model in lower case, for matching
	mem   int64
	free  bool
	kind  int32    // interned (model, memory)
	peers []string // NVLink peers (UUIDs)
}

// ptask is a Task prepared for the round.
type ptask struct {
	t        *Task
	idx      int
	cpu, mem int64
	gpus     int64
	model    string // lower case
	gpuMem   int64
	sel      []kv // node selector, by key
	image    string
	popBit   uint64 // the image's bit when it is popular (see classIndex)
	fit      fitKey
	strategy Strategy
}

type kv struct{ k, v string }

// fitKey is everything that decides whether a task fits a worker. Two tasks
// with equal keys fit the same workers.
type fitKey struct {
	cpu, mem, gpus, gpuMem int64
	model                  string
	sel                    string
}

func newWorkers(in []Worker, seed uint64) []*worker {
	ws := make([]*worker, len(in))
	for i := range in {
		w := &in[i]
		s := &worker{
			i: i, id: w.ID, hash: tieHash(seed, w.ID),
			capCPU: w.Capacity.CPUMillis, capMem: w.Capacity.MemoryBytes,
			allocCPU: w.Allocated.CPUMillis, allocMem: w.Allocated.MemoryBytes,
			labels: w.Labels, starts: w.StartsInFlight, maxSt: w.MaxConcurrentStarts,
			heapIdx: -1,
		}
		if w.Runtime != "" || w.ServesSandboxes {
			s.labels = stdmaps.Clone(w.Labels)
			if s.labels == nil {
				s.labels = map[string]string{}
			}
			if w.Runtime != "" {
				s.labels[RuntimeLabel] = w.Runtime
			}
			if w.ServesSandboxes {
				s.labels[SandboxLabel] = "true"
			}
		}
		if len(w.Images) > 0 {
			s.images = make(map[string]bool, len(w.Images))
			for _, im := range w.Images {
				s.images[im] = true
			}
		}
		for _, g := range w.GPUs {
			s.devs = append(s.devs, device{uuid: g.UUID, model: g.Model, lower: strings.ToLower(g.Model),
				mem: g.MemoryBytes, free: !g.InUse, peers: g.NVLinkPeers})
			if g.InUse {
				s.busyGPU++
			}
		}
		slices.SortFunc(s.devs, func(a, b device) int {
			return cmp.Or(cmp.Compare(a.mem, b.mem), cmp.Compare(a.uuid, b.uuid))
		})
		s.nGPU = int64(len(s.devs))
		ws[i] = s
	}
	return ws
}

func newTasks(in []Task, pol Policy) []ptask {
	ts := make([]ptask, len(in))
	for i := range in {
		t := &in[i]
		p := ptask{
			t: t, idx: i,
			cpu: t.Resources.CPUMillis, mem: t.Resources.MemoryBytes, gpus: t.Resources.GPUs,
			model: strings.ToLower(t.GPUModel), gpuMem: t.GPUMemoryBytes,
			image: t.Image, strategy: pol.queue(t.Queue).Strategy,
		}
		if p.gpus <= 0 {
			// GPU model and memory mean nothing without GPUs.
			p.gpus, p.model, p.gpuMem = 0, "", 0
		}
		sel := t.NodeSelector
		if t.Runtime != "" || t.Sandbox {
			sel = stdmaps.Clone(sel)
			if sel == nil {
				sel = map[string]string{}
			}
			if t.Runtime != "" {
				sel[RuntimeLabel] = t.Runtime
			}
			if t.Sandbox {
				sel[SandboxLabel] = "true"
			}
		}
		var sk strings.Builder
		for _, k := range sortedKeys(sel) {
			p.sel = append(p.sel, kv{k, sel[k]})
			sk.WriteString(k)
			sk.WriteByte(0)
			sk.WriteString(sel[k])
			sk.WriteByte(0)
		}
		p.fit = fitKey{cpu: p.cpu, mem: p.mem, gpus: p.gpus, gpuMem: p.gpuMem, model: p.model, sel: sk.String()}
		ts[i] = p
	}
	return ts
}

// selects reports whether w's labels match t's node selector.
func (w *worker) selects(t *ptask) bool {
	for _, s := range t.sel {
		if v, ok := w.labels[s.k]; !ok || v != s.v {
			return false
		}
	}
	return true
}

func (d *device) matches(t *ptask) bool {
	return d.mem >= t.gpuMem && (t.model == "" || strings.Contains(d.lower, t.model))
}

// gpuCounts returns how many of w's GPUs match t, and how many of those are
// free.
func (w *worker) gpuCounts(t *ptask) (total, free int64) {
	for i := range w.devs {
		if d := &w.devs[i]; d.matches(t) {
			total++
			if d.free {
				free++
			}
		}
	}
	return total, free
}

// everFits reports whether t would fit w if w were idle.
func (w *worker) everFits(t *ptask) bool {
	if t.cpu > w.capCPU && t.cpu > 0 || t.mem > w.capMem && t.mem > 0 || !w.selects(t) {
		return false
	}
	if t.gpus > 0 {
		total, _ := w.gpuCounts(t)
		return total >= t.gpus
	}
	return true
}

// held returns what is held on w against t: the requests of the tasks
// holding w, except those t is exempt from (see exempt). A nil t is exempt
// from none.
func (w *worker) held(t *ptask) (cpu, mem, gpus int64) {
	cpu, mem, gpus = w.heldCPU, w.heldMem, w.heldGPU
	if t == nil {
		return
	}
	for _, h := range w.holders {
		if exempt(t, h) {
			cpu, mem, gpus = cpu-h.cpu, mem-h.mem, gpus-h.gpus
		}
	}
	return
}

// exempt reports whether a worker held for h is open to t all the same:
// t is h, or ranks ahead of h in h's own queue, or asks for at least as
// much as h in every dimension. Holds exist so that a task needing a larger
// piece of one worker than others can collect it while they run elsewhere;
// a task at least as large gains nothing from waiting behind it and the
// round order decides between them. A task asking for no GPU is never
// exempt from a GPU task's hold.
func exempt(t, h *ptask) bool {
	if t == h {
		return true
	}
	if t.t.Queue == h.t.Queue && ahead(t.t, h.t) {
		return true
	}
	return t.cpu >= h.cpu && t.mem >= h.mem && t.gpus >= h.gpus
}

// ahead reports whether a comes before b in their queue: higher priority,
// then lower QueueSeq, then id.
func ahead(a, b *Task) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if a.QueueSeq != b.QueueSeq {
		return a.QueueSeq < b.QueueSeq
	}
	return a.ID < b.ID
}

// roomFor reports whether w has the CPU, memory and GPUs for t now, with
// what is held against t set aside when withHeld is true. It ignores the
// node selector and the start cap.
func (w *worker) roomFor(t *ptask, withHeld bool) bool {
	var hc, hm, hg int64
	if withHeld {
		hc, hm, hg = w.held(t)
	}
	if t.cpu > 0 && t.cpu > w.capCPU-w.allocCPU-hc || t.mem > 0 && t.mem > w.capMem-w.allocMem-hm {
		return false
	}
	if t.gpus > 0 {
		if w.nGPU-w.busyGPU-hg < t.gpus {
			return false
		}
		_, free := w.gpuCounts(t)
		return free >= t.gpus
	}
	return true
}

// startOK reports whether w may start one more container this round.
func (w *worker) startOK() bool { return w.maxSt <= 0 || w.starts < w.maxSt }

// fitsNow reports whether t may be placed on w now: selector, room with held
// resources set aside, and a start slot.
func (w *worker) fitsNow(t *ptask) bool {
	return w.startOK() && w.selects(t) && w.roomFor(t, true)
}

// ppm returns used/capacity in millionths, exactly (no floating point),
// clamped to [0, 2^40].
func ppm(used, capacity int64) int64 {
	if capacity <= 0 || used <= 0 {
		return 0
	}
	if used < 1<<43 { // used*1e6 fits in 63 bits
		return min(used*1_000_000/capacity, 1<<40)
	}
	hi, lo := bits.Mul64(uint64(used), 1_000_000)
	if hi >= uint64(capacity) {
		return 1 << 40
	}
	q, _ := bits.Div64(hi, lo, uint64(capacity))
	return int64(min(q, 1<<40))
}

// The utilization of a worker with a task placed on it is the mean, over
// the dimensions the worker has (CPU, memory, GPUs), of the fraction
// allocated, in millionths. Each dimension's fraction is split into what
// is allocated and what the task asks for, each rounded down, so that the
// class index can keep the first part per class and add the second per
// task: utilization = (allocPPM + reqPPM) / dims.

// dims returns the number of dimensions w's utilization averages over.
func (w *worker) dims() int64 {
	var n int64
	for _, c := range [...]int64{w.capCPU, w.capMem, w.nGPU} {
		if c > 0 {
			n++
		}
	}
	return n
}

// allocPPM sums w's allocated fractions, in millionths.
func (w *worker) allocPPM() int64 {
	return ppm(w.allocCPU, w.capCPU) + ppm(w.allocMem, w.capMem) + ppm(w.busyGPU, w.nGPU)
}

// reqPPM sums the fractions of w that t asks for, in millionths.
func (w *worker) reqPPM(t *ptask) int64 {
	return ppm(t.cpu, w.capCPU) + ppm(t.mem, w.capMem) + ppm(t.gpus, w.nGPU)
}

// utilization returns the mean allocated fraction of w after placing t,
// in millionths.
func (w *worker) utilization(t *ptask) int64 {
	n := w.dims()
	if n == 0 {
		return 0
	}
	return (w.allocPPM() + w.reqPPM(t)) / n
}

// choice is a candidate worker for a task with what ranks it.
type choice struct {
	w     *worker
	tier  int8  // 1: the kind of worker the task belongs on
	score int64 // strategy score plus image bonus; higher is better
	holds bool  // the worker holds the task's image
}

// rate ranks w for t. holds says whether w holds t's image.
func rate(w *worker, t *ptask, holds bool, bonus int64) choice {
	return choice{w: w, tier: tier(w, t), holds: holds, score: score(t, w.utilization(t), holds, bonus)}
}

// tier is 0 for a worker with GPUs and a task asking for none (GPU workers
// are kept for GPU tasks), 1 otherwise.
func tier(w *worker, t *ptask) int8 {
	if t.gpus == 0 && w.nGPU > 0 {
		return 0
	}
	return 1
}

// score turns a utilization into t's strategy score, higher is better,
// with the image bonus.
func score(t *ptask, util int64, holds bool, bonus int64) int64 {
	s := -util
	if t.strategy == BinPack {
		s = util
	}
	if holds {
		s += bonus
	}
	return s
}

// better reports whether a ranks strictly above b. A nil b.w ranks below
// everything.
func better(a, b choice) bool {
	if b.w == nil {
		return a.w != nil
	}
	if a.tier != b.tier {
		return a.tier > b.tier
	}
	if a.score != b.score {
		return a.score > b.score
	}
	if a.holds != b.holds {
		return a.holds
	}
	return lessWorker(a.w, b.w)
}

// lessWorker orders workers for ties: by seeded hash, then id.
func lessWorker(a, b *worker) bool {
	if a.hash != b.hash {
		return a.hash < b.hash
	}
	return a.id < b.id
}

// place puts t on w: allocation, GPUs, start slot. It returns the GPU UUIDs.
func (w *worker) place(t *ptask) []string {
	w.allocCPU += t.cpu
	w.allocMem += t.mem
	w.starts++
	return w.pickGPUs(t)
}

// pickGPUs takes t.gpus free matching GPUs of w. A multi-GPU task gets the
// set with the most NVLink connections among them (gpu/alloc.Choose:
// tensor-parallel inference and FSDP need their devices linked), ties going
// to the set that leaves the best-linked devices free; a single GPU is the
// smallest-memory match, so large GPUs stay free for tasks that need them,
// then by UUID.
func (w *worker) pickGPUs(t *ptask) []string {
	if t.gpus <= 0 {
		return nil
	}
	var free []alloc.Device
	idx := map[string]int{}
	for i := range w.devs {
		if d := &w.devs[i]; d.free && d.matches(t) {
			free = append(free, alloc.Device{UUID: d.uuid, Model: d.model, MemoryBytes: d.mem, NVLinkPeers: d.peers})
			idx[d.uuid] = i
		}
	}
	var out []string
	if t.gpus > 1 {
		if c, ok := alloc.Choose(free, alloc.Request{Count: int(t.gpus)}); ok {
			out = c.UUIDs
		}
	}
	if out == nil {
		for _, f := range free[:min(int64(len(free)), t.gpus)] {
			out = append(out, f.UUID)
		}
	}
	for _, u := range out {
		w.devs[idx[u]].free = false
		w.busyGPU++
	}
	return out
}

// hold sets t's request aside on w for the rest of the round.
func (w *worker) hold(t *ptask) {
	w.holders = append(w.holders, t)
	w.heldCPU += t.cpu
	w.heldMem += t.mem
	w.heldGPU += t.gpus
}

// release gives back t's hold on w, if it has one, and reports whether it
// had: t is being placed on w, so what was held becomes its allocation.
func (w *worker) release(t *ptask) bool {
	i := slices.Index(w.holders, t)
	if i < 0 {
		return false
	}
	w.holders = slices.Delete(w.holders, i, i+1)
	w.heldCPU -= t.cpu
	w.heldMem -= t.mem
	w.heldGPU -= t.gpus
	return true
}

// shortfall is how much of t's request w lacks now, with what is held
// against t set aside, as a sum of millionths of w's capacity per
// dimension.
func (w *worker) shortfall(t *ptask) int64 {
	hc, hm, hg := w.held(t)
	short := func(need, have int64) int64 { return max(0, need-max(have, 0)) }
	s := ppm(short(t.cpu, w.capCPU-w.allocCPU-hc), w.capCPU) +
		ppm(short(t.mem, w.capMem-w.allocMem-hm), w.capMem)
	if t.gpus > 0 {
		_, free := w.gpuCounts(t)
		s += ppm(short(t.gpus, min(free, w.nGPU-w.busyGPU-hg)), w.nGPU)
	}
	return s
}

// holdTarget returns the worker t should hold: among those it could ever
// fit, the one lacking the least of it at the start of the round (ws is
// that state), workers without GPUs first for a task asking for none; nil
// if no worker could ever run t.
func holdTarget(ws []*worker, t *ptask) *worker {
	var best *worker
	var bestTier int8
	var bestShort int64
	for _, w := range ws {
		if !w.everFits(t) {
			continue
		}
		tr := tier(w, t)
		s := w.shortfall(t)
		if best == nil || tr > bestTier || tr == bestTier && (s < bestShort || s == bestShort && lessWorker(w, best)) {
			best, bestTier, bestShort = w, tr, s
		}
	}
	return best
}

// tieHash mixes the seed and a worker id (FNV-1a, then splitmix64).
func tieHash(seed uint64, id string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	z := (h ^ seed) + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
