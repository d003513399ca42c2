package scheduler

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// The class index groups a round's workers so that a task need not look
// at each of them.
//
// A group is a set of workers with the same static facts as far as the
// round's tasks can tell: capacity, the values of the labels that node
// selectors name, the popular images held, the kinds of GPU. A task checks
// its selector, capacity and GPU kinds once per group.
//
// A class is a set of workers of one group that are also in the same state:
// allocation, held resources, free GPU kinds, start slot. For any task they
// fit alike and score alike; only the tie-breaker tells them apart, so a
// task rates each class once, on its first member by tie order, from
// numbers the class keeps. A placement or a hold moves one worker to
// another class.
type classIndex struct {
	groups   []*group
	byStatic map[int32]*group
	byKey    map[classKey]*class
	interned map[string]int32
	kinds    []gpuKind            // GPU kinds by interned id
	holders  map[string][]*worker // rare images asked for by tasks -> workers holding them
	bonus    int64
	match    []bool            // scratch: which GPU kinds match the task being placed
	selects  map[string][]bool // node selector (fitKey.sel) -> which groups match it
}

type group struct {
	first   *worker // any member: the static facts
	dims    int64
	classes []*class
}

type class struct {
	key     classKey
	g       *group
	members []*worker // a heap by lessWorker
	pos     int       // index in g.classes

	// What the class's members have, all holds set aside.
	freeCPU, freeMem, freeGPU int64
	startOK                   bool
	allocPPM                  int64   // see worker.allocPPM
	freeKinds                 []int32 // kinds of the free GPUs
}

// classKey is what makes two workers the same for the round's tasks.
type classKey struct {
	static                    int32 // interned static facts: the group
	allocCPU, allocMem        int64
	busyGPU                   int64
	heldCPU, heldMem, heldGPU int64
	free                      int32 // interned kinds of the free GPUs
	startOK                   bool
}

type gpuKind struct {
	lower string // model in lower case
	mem   int64
}

// popularMax is how many images may be part of the static facts (a
// bitmask).
const popularMax = 64

// newClassIndex builds the classes of ws for the tasks ts and sets each
// task's popBit. Label keys that no node selector names, and images that no
// task asks for, are left out of the groups. An image held by many
// workers becomes part of the static facts (it is popular); a rarer one is
// looked up through its holders instead, so that distinct images per task
// (one per SWE instance) do not split every worker into its own group.
func newClassIndex(ws []*worker, ts []ptask, bonus int64) *classIndex {
	x := &classIndex{byStatic: map[int32]*group{}, byKey: map[classKey]*class{}, interned: map[string]int32{},
		holders: map[string][]*worker{}, bonus: bonus, selects: map[string][]bool{}}
	selKeys := map[string]bool{}
	asked := map[string]bool{}
	for i := range ts {
		for _, s := range ts[i].sel {
			selKeys[s.k] = true
		}
		if ts[i].image != "" {
			asked[ts[i].image] = true
		}
	}
	labelKeys := sortedKeys(selKeys)

	held := map[string][]*worker{}
	for _, w := range ws {
		for im := range w.images {
			if asked[im] {
				held[im] = append(held[im], w)
			}
		}
	}
	images := sortedKeys(held)
	slices.SortStableFunc(images, func(a, b string) int { return cmp.Compare(len(held[b]), len(held[a])) })
	threshold := max(8, len(ws)/16)
	popular := map[string]uint64{}
	for _, im := range images {
		if len(held[im]) >= threshold && len(popular) < popularMax {
			popular[im] = 1 << len(popular)
			continue
		}
		hs := held[im]
		slices.SortFunc(hs, func(a, b *worker) int { return cmp.Compare(a.id, b.id) })
		x.holders[im] = hs
	}
	for i := range ts {
		ts[i].popBit = popular[ts[i].image]
	}

	var b strings.Builder
	for _, w := range ws {
		b.Reset()
		num := func(v int64) { b.WriteString(strconv.FormatInt(v, 10)); b.WriteByte(0) }
		num(w.capCPU)
		num(w.capMem)
		for _, k := range labelKeys {
			if v, ok := w.labels[k]; ok {
				b.WriteByte(1)
				b.WriteString(v)
			}
			b.WriteByte(0)
		}
		for im := range w.images {
			w.popMask |= popular[im]
		}
		num(int64(w.popMask))
		for i := range w.devs {
			d := &w.devs[i]
			d.kind = x.kind(d)
			num(int64(d.kind))
		}
		w.static = x.intern(b.String())
		x.add(w)
	}
	x.match = make([]bool, len(x.kinds))
	return x
}

func (x *classIndex) intern(s string) int32 {
	if id, ok := x.interned[s]; ok {
		return id
	}
	id := int32(len(x.interned))
	x.interned[s] = id
	return id
}

func (x *classIndex) kind(d *device) int32 {
	k := gpuKind{lower: d.lower, mem: d.mem}
	if i := slices.Index(x.kinds, k); i >= 0 {
		return int32(i)
	}
	x.kinds = append(x.kinds, k)
	return int32(len(x.kinds) - 1)
}

// add puts w in the class of its current state.
func (x *classIndex) add(w *worker) {
	k := classKey{static: w.static, allocCPU: w.allocCPU, allocMem: w.allocMem, busyGPU: w.busyGPU,
		heldCPU: w.heldCPU, heldMem: w.heldMem, heldGPU: w.heldGPU, startOK: w.startOK(), free: -1}
	var kinds []int32
	if len(w.devs) > 0 {
		for i := range w.devs {
			if w.devs[i].free {
				kinds = append(kinds, w.devs[i].kind)
			}
		}
		slices.Sort(kinds)
		var b strings.Builder
		for _, k := range kinds {
			b.WriteString(strconv.Itoa(int(k)))
			b.WriteByte(',')
		}
		k.free = x.intern("free:" + b.String())
	}
	c := x.byKey[k]
	if c == nil {
		g := x.byStatic[w.static]
		if g == nil {
			g = &group{first: w, dims: w.dims()}
			x.byStatic[w.static] = g
			x.groups = append(x.groups, g)
		}
		c = &class{key: k, g: g, pos: len(g.classes), startOK: k.startOK, freeKinds: kinds,
			freeCPU: w.capCPU - w.allocCPU - w.heldCPU, freeMem: w.capMem - w.allocMem - w.heldMem,
			freeGPU: w.nGPU - w.busyGPU - w.heldGPU, allocPPM: w.allocPPM()}
		x.byKey[k] = c
		g.classes = append(g.classes, c)
	}
	w.cls = c
	c.push(w)
}

// changed moves w to the class of its new state after a placement or hold.
func (x *classIndex) changed(w *worker) {
	c := w.cls
	c.remove(w)
	if len(c.members) == 0 {
		g := c.g
		last := g.classes[len(g.classes)-1]
		g.classes[c.pos] = last
		last.pos = c.pos
		g.classes = g.classes[:len(g.classes)-1]
		delete(x.byKey, c.key)
	}
	x.add(w)
}

// best returns the best worker for t now, or a choice with a nil worker if
// none fits. See better for the ranking.
//
// A class is rated on its first member with all holds set aside. That is
// exact for the class except for members held by tasks t is exempt from,
// which may have more room for t: those are the special workers, rated one
// by one, as are the holders of t's image when it is rare (a class rates
// its members as not holding it).
func (x *classIndex) best(t *ptask, special []*worker) choice {
	if t.gpus > 0 {
		for i, k := range x.kinds {
			x.match[i] = k.mem >= t.gpuMem && (t.model == "" || strings.Contains(k.lower, t.model))
		}
	}
	// Groups are all made with the index, so which match a selector is
	// known once per selector.
	var sel []bool
	if len(t.sel) > 0 {
		if sel = x.selects[t.fit.sel]; sel == nil {
			sel = make([]bool, len(x.groups))
			for i, g := range x.groups {
				sel[i] = g.first.selects(t)
			}
			x.selects[t.fit.sel] = sel
		}
	}
	var top choice
	for gi, g := range x.groups {
		w := g.first
		if len(g.classes) == 0 || t.cpu > 0 && t.cpu > w.capCPU || t.mem > 0 && t.mem > w.capMem ||
			t.gpus > w.nGPU || sel != nil && !sel[gi] {
			continue
		}
		tr := tier(w, t)
		if tr < top.tier && top.w != nil {
			continue
		}
		holds := t.popBit != 0 && w.popMask&t.popBit != 0
		req := w.reqPPM(t)
		for _, c := range g.classes {
			if !c.startOK || t.cpu > 0 && t.cpu > c.freeCPU || t.mem > 0 && t.mem > c.freeMem {
				continue
			}
			if t.gpus > 0 {
				if c.freeGPU < t.gpus {
					continue
				}
				var n int64
				for _, k := range c.freeKinds {
					if x.match[k] {
						n++
					}
				}
				if n < t.gpus {
					continue
				}
			}
			var util int64
			if g.dims > 0 {
				util = (c.allocPPM + req) / g.dims
			}
			ch := choice{w: c.members[0], tier: tr, score: score(t, util, holds, x.bonus), holds: holds}
			if better(ch, top) {
				top = ch
			}
		}
	}
	if t.popBit == 0 && t.image != "" {
		for _, w := range x.holders[t.image] {
			if w.fitsNow(t) {
				if ch := rate(w, t, true, x.bonus); better(ch, top) {
					top = ch
				}
			}
		}
	}
	for _, w := range special {
		if w.fitsNow(t) {
			if ch := rate(w, t, t.image != "" && w.images[t.image], x.bonus); better(ch, top) {
				top = ch
			}
		}
	}
	return top
}

func (c *class) push(w *worker) {
	w.heapIdx = len(c.members)
	c.members = append(c.members, w)
	c.up(w.heapIdx)
}

func (c *class) remove(w *worker) {
	i := w.heapIdx
	n := len(c.members) - 1
	if i != n {
		c.swap(i, n)
	}
	c.members = c.members[:n]
	w.heapIdx = -1
	if i != n {
		if !c.down(i) {
			c.up(i)
		}
	}
}

func (c *class) swap(i, j int) {
	c.members[i], c.members[j] = c.members[j], c.members[i]
	c.members[i].heapIdx = i
	c.members[j].heapIdx = j
}

func (c *class) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !lessWorker(c.members[i], c.members[p]) {
			return
		}
		c.swap(i, p)
		i = p
	}
}

func (c *class) down(i int) bool {
	start := i
	n := len(c.members)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && lessWorker(c.members[r], c.members[l]) {
			j = r
		}
		if !lessWorker(c.members[j], c.members[i]) {
			break
		}
		c.swap(i, j)
		i = j
	}
	return i > start
}
