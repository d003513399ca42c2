package scheduler

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/race"
	"github.com/megaflow/megaflow/internal/resources"
)

// placeReference is the brute-force scheduler: the same round (order,
// admission, holds, reasons), but each task rates every worker, one by
// one, with no classes, no memo of failed shapes, no image index, and both
// passes whenever a task holds a worker.
func placeReference(in Input) Plan {
	return place(in, func(ws []*worker, _ []ptask) finder {
		return &bruteFinder{ws: ws, bonus: in.Policy.ImageLocalityBonus}
	}, options{twoPasses: true, noMemo: true})
}

type bruteFinder struct {
	ws    []*worker
	bonus int64
}

func (b *bruteFinder) best(t *ptask, _ []*worker) choice {
	var top choice
	for _, w := range b.ws {
		if !w.fitsNow(t) {
			continue
		}
		if c := rate(w, t, t.image != "" && w.images[t.image], b.bonus); better(c, top) {
			top = c
		}
	}
	return top
}

func (b *bruteFinder) changed(*worker) {}

const gi = int64(1) << 30

// randomInput draws a small cluster and queue meant to hit every rule:
// mixed GPU models, labels, images held by many or few, start caps,
// quotas, over-committed workers, holds.
func randomInput(rng *rand.Rand) Input {
	pick := func(xs ...int64) int64 { return xs[rng.IntN(len(xs))] }
	pickS := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	var in Input
	nw := rng.IntN(10)
	if rng.IntN(4) == 0 {
		nw = 16 + rng.IntN(20) // enough holders for an image to be popular
	}
	// Alike workers make big classes; different ones make many.
	alike := rng.IntN(2) == 0
	for i := range nw {
		w := Worker{ID: fmt.Sprintf("w%02d", i)}
		w.Capacity = resources.Resources{CPUMillis: pick(2000, 4000, 8000, 16000), MemoryBytes: pick(4*gi, 8*gi, 16*gi, 64*gi)}
		w.Allocated = resources.Resources{CPUMillis: pick(0, 0, 500, 1000, 3000), MemoryBytes: pick(0, 0, gi, 2*gi, 6*gi)}
		if alike {
			w.Capacity = resources.Resources{CPUMillis: 8000, MemoryBytes: 16 * gi}
			w.Allocated = resources.Resources{CPUMillis: pick(0, 0, 0, 4000), MemoryBytes: pick(0, 0, 0, 4*gi)}
		}
		if rng.IntN(3) == 0 {
			model, mem := pickS("NVIDIA A100-SXM4", "NVIDIA H100 80GB HBM3"), pick(40*gi, 80*gi)
			for g := range 1 + rng.IntN(4) {
				if rng.IntN(4) == 0 {
					model = pickS("NVIDIA A100-SXM4", "NVIDIA H100 80GB HBM3")
				}
				w.GPUs = append(w.GPUs, GPU{UUID: fmt.Sprintf("GPU-%s-%d", w.ID, g), Model: model, MemoryBytes: mem,
					InUse: rng.IntN(3) == 0})
			}
		}
		if rng.IntN(2) == 0 {
			w.Labels = map[string]string{"zone": pickS("a", "b")}
			if rng.IntN(2) == 0 {
				w.Labels["disk"] = "ssd"
			}
			w.Labels["host"] = w.ID // a label no selector names: must not split classes
		}
		for im := range 6 {
			if rng.IntN(3) == 0 || im == 0 && rng.IntN(4) > 0 {
				w.Images = append(w.Images, fmt.Sprintf("img%d", im))
			}
		}
		if rng.IntN(3) == 0 {
			w.MaxConcurrentStarts = 1 + rng.IntN(4)
			w.StartsInFlight = rng.IntN(w.MaxConcurrentStarts + 1)
		}
		in.Workers = append(in.Workers, w)
	}
	nt := rng.IntN(40)
	if rng.IntN(3) == 0 {
		nt = 40 + rng.IntN(80)
	}
	uniform := rng.IntN(4) == 0
	seqs := rng.Perm(nt + 5)
	for i := range nt {
		t := Task{ID: fmt.Sprintf("t%03d", i), Queue: pickS("", "train", "eval", "synth", "synth"),
			Priority: int32(pick(0, 0, 1, 5)), QueueSeq: uint64(seqs[i] + 1), QueuedSinceUnixNanos: pick(0, 100, 200, 300),
			Tenant: pickS("", "team-a", "team-b")}
		t.Resources = resources.Resources{CPUMillis: pick(0, 500, 1000, 1000, 2000, 4000, 20000),
			MemoryBytes: pick(0, gi, gi, 2*gi, 8*gi, 100*gi)}
		if rng.IntN(4) == 0 {
			t.Resources.GPUs = pick(1, 1, 2, 5)
			t.GPUModel = pickS("", "", "a100", "H100", "V100")
			t.GPUMemoryBytes = pick(0, 0, 80*gi)
		}
		if rng.IntN(4) == 0 {
			t.NodeSelector = map[string]string{"zone": pickS("a", "b", "c")}
			if rng.IntN(3) == 0 {
				t.NodeSelector["disk"] = "ssd"
			}
		}
		t.Image = pickS("", "img0", "img1", "img2", "img5")
		if uniform {
			// Few shapes: holds of equal size on alike workers share a class.
			t.Resources = resources.Resources{CPUMillis: pick(3000, 5000), MemoryBytes: 2 * gi}
			t.GPUModel, t.GPUMemoryBytes, t.NodeSelector = "", 0, nil
		}
		in.Tasks = append(in.Tasks, t)
	}
	if rng.IntN(3) == 0 && nt > 0 {
		// Gangs of 1 to 4 tasks in graphs ga and gb; the same name in both
		// graphs makes two gangs. Members are often alike, as the ranks of
		// a training job are.
		for range 1 + rng.IntN(3) {
			graph, name := pickS("ga", "gb"), pickS("train", "rl")
			alike := rng.IntN(2) == 0
			var first *Task
			for range 1 + rng.IntN(4) {
				t := &in.Tasks[rng.IntN(nt)]
				if t.Gang != "" {
					continue
				}
				t.ID, t.Gang = graph+"/"+t.ID, name
				if first == nil {
					first = t
				} else if alike {
					t.Resources, t.GPUModel, t.GPUMemoryBytes, t.NodeSelector = first.Resources, first.GPUModel,
						first.GPUMemoryBytes, maps(first.NodeSelector)
				}
			}
		}
	}
	in.Policy = Policy{ImageLocalityBonus: pick(0, 0, 100_000, 1_000_000), Reservations: int(pick(-1, 0, 0, 2, 4)),
		MaxPlacements: int(pick(0, 0, 0, 3)), Default: QueuePolicy{Weight: int(pick(0, 1, 2)), Strategy: Strategy(rng.IntN(2))}}
	if rng.IntN(2) == 0 {
		in.Policy.Queues = map[string]QueuePolicy{
			"train": {Weight: int(pick(1, 3)), Strategy: BinPack},
			"synth": {Weight: int(pick(1, 2)), Strategy: Spread},
		}
	}
	if rng.IntN(3) == 0 {
		in.Quotas = map[string]Quota{
			"team-a": {MaxRunning: int(pick(0, 2, 5)), Running: int(pick(0, 1, 2)),
				Max: resources.Resources{CPUMillis: pick(0, 8000), GPUs: pick(0, 2)}, Used: resources.Resources{CPUMillis: pick(0, 2000)}},
		}
	}
	if rng.IntN(4) == 0 {
		in.Cluster = Quota{MaxRunning: int(pick(3, 10)), Running: int(pick(0, 2)), Max: resources.Resources{MemoryBytes: pick(0, 50*gi)}}
	}
	if rng.IntN(5) == 0 {
		in.Admit = func(t Task) (bool, string) {
			if strings.HasSuffix(t.ID, "7") {
				return false, "refused by the test hook"
			}
			return true, ""
		}
	}
	if rng.IntN(2) == 0 {
		in.Running = map[string]int{"train": int(pick(0, 3)), "synth": int(pick(0, 10)), "eval": int(pick(0, 1))}
	}
	in.Seed = rng.Uint64()
	return in
}

// TestMatchesReference checks the fast path (classes, memo of failed
// shapes, popular images, special workers) against the brute force.
func TestMatchesReference(t *testing.T) {
	race.SkipPure(t)
	n := 3000
	if testing.Short() {
		n = 300
	}
	for i := range n {
		rng := rand.New(rand.NewPCG(uint64(i), 42))
		in := randomInput(rng)
		got, want := Place(in), placeReference(in)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: fast plan differs from the reference\nfast:\n%s\nreference:\n%s", i, dump(got), dump(want))
		}
		checkPlan(t, i, in, got)
	}
}

// TestSecondPassSkip checks that skipping the second pass when the first
// shows it would change nothing gives the plan the second pass would.
func TestSecondPassSkip(t *testing.T) {
	race.SkipPure(t)
	var skipped int
	for i := range 3000 {
		rng := rand.New(rand.NewPCG(uint64(i), 99))
		in := randomInput(rng)
		finder := func(ws []*worker, ts []ptask) finder { return newClassIndex(ws, ts, in.Policy.ImageLocalityBonus) }
		got, want := place(in, finder, options{}), place(in, finder, options{twoPasses: true})
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: skipping the second pass changed the plan\nskipped:\n%s\ntwo passes:\n%s", i, dump(got), dump(want))
		}
		if r := newRound(in, nil); true {
			r.run(finder(r.workers, r.tasks), options{})
			if len(r.active) > 0 && !r.holdsWouldMatter() {
				skipped++
			}
		}
	}
	if skipped == 0 {
		t.Fatal("no case skipped the second pass: the test proves nothing")
	}
}

// TestPlaceIsPure checks that Place does not modify its input and that the
// order of workers and tasks in the input does not matter.
func TestPlaceIsPure(t *testing.T) {
	race.SkipPure(t)
	for i := range 500 {
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		in := randomInput(rng)
		in.Admit = nil
		before := deepCopy(in)
		got := Place(in)
		if !reflect.DeepEqual(in, before) {
			t.Fatalf("case %d: Place modified its input", i)
		}
		shuffled := deepCopy(in)
		rng.Shuffle(len(shuffled.Workers), func(a, b int) { shuffled.Workers[a], shuffled.Workers[b] = shuffled.Workers[b], shuffled.Workers[a] })
		rng.Shuffle(len(shuffled.Tasks), func(a, b int) { shuffled.Tasks[a], shuffled.Tasks[b] = shuffled.Tasks[b], shuffled.Tasks[a] })
		if again := Place(shuffled); !reflect.DeepEqual(got, again) {
			t.Fatalf("case %d: plan depends on input order\nfirst:\n%s\nshuffled:\n%s", i, dump(got), dump(again))
		}
	}
}

func deepCopy(in Input) Input {
	out := in
	out.Workers = nil
	for _, w := range in.Workers {
		w.Labels = maps(w.Labels)
		w.Images = slices.Clone(w.Images)
		w.GPUs = slices.Clone(w.GPUs)
		out.Workers = append(out.Workers, w)
	}
	out.Tasks = nil
	for _, t := range in.Tasks {
		t.NodeSelector = maps(t.NodeSelector)
		out.Tasks = append(out.Tasks, t)
	}
	if in.Quotas != nil {
		out.Quotas = map[string]Quota{}
		for k, v := range in.Quotas {
			out.Quotas[k] = v
		}
	}
	if in.Running != nil {
		out.Running = map[string]int{}
		for k, v := range in.Running {
			out.Running[k] = v
		}
	}
	if in.Policy.Queues != nil {
		out.Policy.Queues = map[string]QueuePolicy{}
		for k, v := range in.Policy.Queues {
			out.Policy.Queues[k] = v
		}
	}
	return out
}

func maps(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// checkPlan checks the invariants any plan must keep, whatever the
// algorithm: each task placed at most once and otherwise explained, no
// worker over capacity, GPUs free, distinct and matching, selectors
// matched, start caps and quotas kept.
func checkPlan(t *testing.T, c int, in Input, p Plan) {
	t.Helper()
	fail := func(format string, a ...any) { t.Fatalf("case %d: %s\n%s", c, fmt.Sprintf(format, a...), dump(p)) }
	tasks := map[string]*Task{}
	for i := range in.Tasks {
		tasks[in.Tasks[i].ID] = &in.Tasks[i]
	}
	workers := map[string]*Worker{}
	for i := range in.Workers {
		workers[in.Workers[i].ID] = &in.Workers[i]
	}
	// A gang's placements come together; it may start while the count is
	// under the cap, and overshoot it.
	gangOf := func(tk *Task) string {
		if tk == nil || tk.Gang == "" {
			return ""
		}
		return GraphOf(tk.ID) + "/" + tk.Gang
	}
	if limit := in.Policy.MaxPlacements; limit > 0 {
		for i, pl := range p.Placements {
			g := gangOf(tasks[pl.TaskID])
			if i >= limit && (g == "" || i == 0 || gangOf(tasks[p.Placements[i-1].TaskID]) != g) {
				fail("placement %d (%s) over the cap of %d", i+1, pl.TaskID, limit)
			}
		}
	}
	members := map[string]int{}
	for i := range in.Tasks {
		if g := gangOf(&in.Tasks[i]); g != "" {
			members[g]++
		}
	}
	gangWorkers := map[string][]string{}
	for _, pl := range p.Placements {
		if g := gangOf(tasks[pl.TaskID]); g != "" {
			if slices.Contains(gangWorkers[g], pl.WorkerID) {
				fail("gang %s has two tasks on %s", g, pl.WorkerID)
			}
			gangWorkers[g] = append(gangWorkers[g], pl.WorkerID)
		}
	}
	for g, ws := range gangWorkers {
		if len(ws) != members[g] {
			fail("gang %s: %d of its %d tasks placed", g, len(ws), members[g])
		}
	}
	seen := map[string]bool{}
	used := map[string]resources.Resources{}
	starts := map[string]int{}
	gpus := map[string]bool{}
	tenants := map[string]Quota{}
	for _, pl := range p.Placements {
		tk, w := tasks[pl.TaskID], workers[pl.WorkerID]
		if tk == nil || w == nil || seen[pl.TaskID] {
			fail("bad or repeated placement %+v", pl)
		}
		seen[pl.TaskID] = true
		if _, ok := p.Unplaced[pl.TaskID]; ok {
			fail("%s is both placed and unplaced", pl.TaskID)
		}
		for k, v := range tk.NodeSelector {
			if w.Labels[k] != v {
				fail("%s on %s: selector %s=%s not matched", tk.ID, w.ID, k, v)
			}
		}
		u := used[w.ID].Add(resources.Resources{CPUMillis: tk.Resources.CPUMillis, MemoryBytes: tk.Resources.MemoryBytes})
		used[w.ID] = u
		free := w.Capacity.Sub(w.Allocated)
		if tk.Resources.CPUMillis > 0 && u.CPUMillis > free.CPUMillis || tk.Resources.MemoryBytes > 0 && u.MemoryBytes > free.MemoryBytes {
			fail("%s overfills %s", tk.ID, w.ID)
		}
		starts[w.ID]++
		if w.MaxConcurrentStarts > 0 && w.StartsInFlight+starts[w.ID] > w.MaxConcurrentStarts {
			fail("%s: %s over its start cap", tk.ID, w.ID)
		}
		want := max(tk.Resources.GPUs, 0)
		if int64(len(pl.GPUUUIDs)) != want {
			fail("%s got %d GPUs, asked %d", tk.ID, len(pl.GPUUUIDs), want)
		}
		for _, u := range pl.GPUUUIDs {
			i := slices.IndexFunc(w.GPUs, func(g GPU) bool { return g.UUID == u })
			if i < 0 || w.GPUs[i].InUse || gpus[u] {
				fail("%s: GPU %s of %s is not free", tk.ID, u, w.ID)
			}
			g := w.GPUs[i]
			if !strings.Contains(strings.ToLower(g.Model), strings.ToLower(tk.GPUModel)) || g.MemoryBytes < tk.GPUMemoryBytes {
				fail("%s: GPU %s does not match", tk.ID, u)
			}
			gpus[u] = true
		}
		if q, ok := in.Quotas[tk.Tenant]; ok {
			if cur, ok := tenants[tk.Tenant]; ok {
				q = cur
			}
			q.Running++
			q.Used = q.Used.Add(tk.Resources)
			if q.MaxRunning > 0 && q.Running > q.MaxRunning || q.Max.CPUMillis > 0 && tk.Resources.CPUMillis > 0 && q.Used.CPUMillis > q.Max.CPUMillis ||
				q.Max.GPUs > 0 && tk.Resources.GPUs > 0 && q.Used.GPUs > q.Max.GPUs {
				fail("%s: tenant %s over quota", tk.ID, tk.Tenant)
			}
			tenants[tk.Tenant] = q
		}
	}
	if in.Cluster.MaxRunning > 0 && in.Cluster.Running+len(p.Placements) > max(in.Cluster.MaxRunning, in.Cluster.Running) {
		fail("cluster limit exceeded")
	}
	if len(p.Placements)+len(p.Unplaced) != len(in.Tasks) {
		fail("%d placed + %d unplaced != %d tasks", len(p.Placements), len(p.Unplaced), len(in.Tasks))
	}
	for id, r := range p.Unplaced {
		if r.Kind == 0 || r.Message == "" || strings.Contains(r.Message, "did not place") {
			fail("%s: bad reason %+v", id, r)
		}
	}
	for _, h := range p.Held {
		if seen[h.TaskID] {
			fail("hold for placed task %s", h.TaskID)
		}
	}
}

func dump(p Plan) string {
	var b strings.Builder
	for _, pl := range p.Placements {
		fmt.Fprintf(&b, "  %s -> %s %v\n", pl.TaskID, pl.WorkerID, pl.GPUUUIDs)
	}
	for _, h := range p.Held {
		fmt.Fprintf(&b, "  hold %s for %s\n", h.WorkerID, h.TaskID)
	}
	for _, id := range sortedKeys(p.Unplaced) {
		fmt.Fprintf(&b, "  %s: %s: %s\n", id, p.Unplaced[id].Kind, p.Unplaced[id].Message)
	}
	return b.String()
}
