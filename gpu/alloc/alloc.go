// Package alloc chooses which GPUs of one worker a multi-GPU task gets. It is
// pure (no NVML, no cgo, no I/O), so the head's scheduler may import it as
// well as the worker; package gpu discovers the devices and the NVLink
// topology it reads.
package alloc

import (
	"cmp"
	"math/bits"
	"slices"
	"strings"
)

// Device is one free GPU of a worker as the allocator sees it.
type Device struct {
	// UUID identifies the device ("GPU-..."); choices are made and returned
	// by UUID.
	UUID string
	// Model is the device name, e.g. "NVIDIA H100 80GB HBM3".
	Model string
	// MemoryBytes is the device's total memory, in bytes.
	MemoryBytes int64
	// NVLinkPeers are the UUIDs of the devices joined to this one by NVLink
	// (directly or through an NVSwitch). A link counts when either end lists
	// the other; UUIDs not among the devices passed to Choose are ignored.
	NVLinkPeers []string
}

// Request is what a task asks of the devices it gets.
type Request struct {
	// Count is the number of devices, at least 1 (typically 1, 2, 4 or 8).
	Count int
	// Model, if set, must be a case-insensitive substring of each chosen
	// device's Model ("A100", "H100").
	Model string
	// MinMemoryBytes, if positive, is the least total memory of each chosen
	// device, in bytes.
	MinMemoryBytes int64
}

// Choice is the allocator's answer.
type Choice struct {
	// UUIDs are the chosen devices, sorted.
	UUIDs []string
	// Links is the number of NVLink-connected pairs among the chosen
	// devices.
	Links int
	// FullyConnected is true when every pair of chosen devices is joined by
	// NVLink (always true for one device).
	FullyConnected bool
}

// MaxExact is the most free devices for which Choose searches exactly.
// Beyond it Choose grows a set greedily from each eligible device (most
// links to the set so far first) and keeps the best; more than 64 free
// devices are not supported (no choice).
const MaxExact = 16

// Choose picks req.Count of the free devices for one task. Only devices
// matching req.Model and req.MinMemoryBytes are eligible. Among the eligible
// sets of the right size it returns the one that
//
//  1. has the most NVLink-connected pairs (a fully connected set when one
//     exists), then
//  2. has the fewest NVLink pairs to the free devices it leaves behind, so
//     that a partly used NVLink island is filled before a whole one is
//     broken up (best fit), then
//  3. comes first when the sets' sorted UUID lists are compared in order.
//
// The answer is a function of the inputs only (order of free does not
// matter). ok is false when fewer than req.Count devices are eligible or
// req.Count < 1. The head's scheduler and the worker call it from any
// goroutine; it does not modify free.
func Choose(free []Device, req Request) (c Choice, ok bool) {
	if req.Count < 1 {
		return Choice{}, false
	}
	g := newGraph(free)
	model := strings.ToLower(req.Model)
	var elig []int // indexes into g.uuids, ascending (so sorted by UUID)
	for i, d := range g.devs {
		if model != "" && !strings.Contains(strings.ToLower(d.Model), model) {
			continue
		}
		if req.MinMemoryBytes > 0 && d.MemoryBytes < req.MinMemoryBytes {
			continue
		}
		elig = append(elig, i)
	}
	if len(elig) < req.Count || len(g.devs) > 64 {
		return Choice{}, false
	}
	if len(g.devs) > MaxExact {
		return g.choice(g.greedy(elig, req.Count)), true
	}
	s := search{g: g, elig: elig, k: req.Count, best: score{links: -1}}
	s.walk(0, 0, 0)
	return g.choice(s.bestSet), true
}

// graph is the free devices, sorted by UUID, with adjacency as bit sets.
type graph struct {
	devs []Device
	adj  []uint64 // adj[i] bit j: devices i and j are NVLinked
	all  uint64   // every free device
}

func newGraph(free []Device) *graph {
	devs := slices.Clone(free)
	slices.SortFunc(devs, func(a, b Device) int { return cmp.Compare(a.UUID, b.UUID) })
	devs = slices.CompactFunc(devs, func(a, b Device) bool { return a.UUID == b.UUID })
	g := &graph{devs: devs, adj: make([]uint64, len(devs))}
	if len(devs) > 64 {
		return g
	}
	idx := make(map[string]int, len(devs))
	for i, d := range devs {
		idx[d.UUID] = i
		g.all |= 1 << i
	}
	for i, d := range devs {
		for _, p := range d.NVLinkPeers {
			if j, ok := idx[p]; ok && j != i {
				g.adj[i] |= 1 << j
				g.adj[j] |= 1 << i
			}
		}
	}
	return g
}

// score is the objective of one set; see Choose.
type score struct{ links, cut int }

func (a score) better(b score) bool {
	if a.links != b.links {
		return a.links > b.links
	}
	return a.cut < b.cut
}

func (g *graph) score(set uint64) score {
	var s score
	for m := set; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		s.links += bits.OnesCount64(g.adj[i] & set)
		s.cut += bits.OnesCount64(g.adj[i] &^ set)
	}
	s.links /= 2
	return s
}

func (g *graph) choice(set uint64) Choice {
	c := Choice{}
	n := 0
	for m := set; m != 0; m &= m - 1 {
		c.UUIDs = append(c.UUIDs, g.devs[bits.TrailingZeros64(m)].UUID)
		n++
	}
	c.Links = g.score(set).links
	c.FullyConnected = c.Links == n*(n-1)/2
	return c
}

// search is a branch and bound over the eligible devices in UUID order.
// Sets are visited in lexicographic order of their sorted UUID lists and
// the best is replaced only by a strictly better one, so ties go to the
// first (criterion 3 of Choose).
type search struct {
	g       *graph
	elig    []int
	k       int
	best    score
	bestSet uint64
	gains   []int // scratch for the bound
}

// walk extends set (n devices, links pairs inside) with eligible devices
// from position pos on.
func (s *search) walk(pos int, set uint64, links int) {
	n := bits.OnesCount64(set)
	if n == s.k {
		if sc := s.g.score(set); sc.better(s.best) {
			s.best, s.bestSet = sc, set
		}
		return
	}
	r := s.k - n
	if len(s.elig)-pos < r {
		return
	}
	if s.bound(pos, set, links, r) < s.best.links {
		return // cannot reach the best set's links: prune
	}
	for p := pos; p <= len(s.elig)-r; p++ {
		i := s.elig[p]
		s.walk(p+1, set|1<<i, links+bits.OnesCount64(s.g.adj[i]&set))
	}
}

// bound is an upper bound on the links of any completion of set with r more
// devices from position pos on: the links so far, plus the r largest
// numbers of links a candidate has to set, plus every pair among the r new
// devices.
func (s *search) bound(pos int, set uint64, links, r int) int {
	s.gains = s.gains[:0]
	for _, i := range s.elig[pos:] {
		s.gains = append(s.gains, bits.OnesCount64(s.g.adj[i]&set))
	}
	slices.Sort(s.gains)
	b := links + r*(r-1)/2
	for _, v := range s.gains[len(s.gains)-r:] {
		b += v
	}
	return b
}

// greedy grows a set of k devices from each eligible device in turn, adding
// the eligible device with the most links into the set (the first in UUID
// order on ties), and returns the best set found by Choose's criteria.
func (g *graph) greedy(elig []int, k int) uint64 {
	var best uint64
	bestScore := score{links: -1}
	for _, start := range elig {
		set := uint64(1) << start
		for bits.OnesCount64(set) < k {
			pick, most := -1, -1
			for _, i := range elig {
				if set&(1<<i) == 0 {
					if n := bits.OnesCount64(g.adj[i] & set); n > most {
						pick, most = i, n
					}
				}
			}
			set |= 1 << pick
		}
		sc := g.score(set)
		if sc.better(bestScore) || (sc == bestScore && g.lexLess(set, best)) {
			best, bestScore = set, sc
		}
	}
	return best
}

// lexLess reports whether set a's sorted UUID list comes before b's.
func (g *graph) lexLess(a, b uint64) bool {
	for a != 0 && b != 0 {
		i, j := bits.TrailingZeros64(a), bits.TrailingZeros64(b)
		if i != j {
			return i < j
		}
		a &= a - 1
		b &= b - 1
	}
	return b != 0
}
