package scheduler

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/race"
	"github.com/megaflow/megaflow/internal/resources"
)

func TestOrderFairShare(t *testing.T) {
	var ts []Task
	for i := range 40 {
		ts = append(ts, Task{ID: fmt.Sprintf("s%02d", i), Queue: "synth", QueueSeq: uint64(i)})
	}
	for i := range 10 {
		ts = append(ts, Task{ID: fmt.Sprintf("e%02d", i), Queue: "eval", QueueSeq: uint64(100 + i)})
	}
	count := func(order []int, n int) map[string]int {
		c := map[string]int{}
		for _, i := range order[:n] {
			c[ts[i].Queue]++
		}
		return c
	}
	pol := Policy{Queues: map[string]QueuePolicy{"synth": {Weight: 3}}}
	pts := newTasks(ts, pol)
	if c := count(order(pts, pol, nil), 20); c["synth"] != 15 || c["eval"] != 5 {
		t.Errorf("weights 3:1, first 20 turns: %v, want 15 synth, 5 eval", c)
	}
	// With 12 synth tasks running (4 per weight unit), eval goes first until
	// it runs as many per weight unit.
	o := order(pts, pol, map[string]int{"synth": 12})
	if c := count(o, 4); c["eval"] != 4 {
		t.Errorf("synth already served: first 4 turns %v, want all eval", c)
	}
	// Within a queue: priority, then QueueSeq, then id.
	ts = []Task{{ID: "c", QueueSeq: 3}, {ID: "a", QueueSeq: 5, Priority: 1}, {ID: "b", QueueSeq: 3}, {ID: "d", QueueSeq: 1}}
	pts = newTasks(ts, Policy{})
	var ids []string
	for _, i := range order(pts, Policy{}, nil) {
		ids = append(ids, ts[i].ID)
	}
	if got := strings.Join(ids, " "); got != "a d b c" {
		t.Errorf("queue order %q, want \"a d b c\"", got)
	}
}

func TestExempt(t *testing.T) {
	mk := func(id, queue string, prio int32, seq uint64, cpu, mem, gpus int64) *ptask {
		ts := newTasks([]Task{{ID: id, Queue: queue, Priority: prio, QueueSeq: seq,
			Resources: resources.Resources{CPUMillis: cpu, MemoryBytes: mem, GPUs: gpus}}}, Policy{})
		return &ts[0]
	}
	holder := mk("h", "train", 0, 10, 4000, 8*gi, 1)
	cases := []struct {
		t    *ptask
		want bool
		why  string
	}{
		{holder, true, "a task is exempt from its own hold"},
		{mk("a", "train", 0, 5, 100, gi, 0), true, "ahead in the holder's queue"},
		{mk("p", "train", 3, 50, 100, gi, 0), true, "higher priority in the holder's queue"},
		{mk("b", "train", 0, 50, 100, gi, 0), false, "behind in the holder's queue"},
		{mk("o", "synth", 0, 1, 100, gi, 0), false, "another queue, smaller"},
		{mk("c", "synth", 0, 1, 8000, 16*gi, 0), false, "CPU-only task against a GPU holder"},
		{mk("g", "synth", 0, 99, 4000, 8*gi, 1), true, "as large in every dimension"},
		{mk("m", "synth", 0, 99, 8000, 4*gi, 2), false, "larger in some dimensions only"},
	}
	for _, tc := range cases {
		if got := exempt(tc.t, holder); got != tc.want {
			t.Errorf("%s: exempt = %v, want %v", tc.why, got, tc.want)
		}
	}
}

func TestPPM(t *testing.T) {
	cases := []struct{ used, capacity, want int64 }{
		{0, 100, 0}, {-5, 100, 0}, {50, 0, 0}, {1, 3, 333333}, {3, 3, 1_000_000}, {6, 3, 2_000_000},
		{1 << 45, 1 << 46, 500_000}, {1 << 62, 1, 1 << 40},
	}
	for _, tc := range cases {
		if got := ppm(tc.used, tc.capacity); got != tc.want {
			t.Errorf("ppm(%d, %d) = %d, want %d", tc.used, tc.capacity, got, tc.want)
		}
	}
}

func TestAdmitAskedOncePerTask(t *testing.T) {
	for i := range 200 {
		in := randomInput(rand.New(rand.NewPCG(uint64(i), 5)))
		asked := map[string]int{}
		in.Admit = func(t Task) (bool, string) {
			asked[t.ID]++
			return !strings.HasSuffix(t.ID, "3"), ""
		}
		p := Place(in)
		for id, n := range asked {
			if n != 1 {
				t.Fatalf("case %d: Admit asked %d times about %s", i, n, id)
			}
			if strings.HasSuffix(id, "3") && p.Unplaced[id].Kind != ReasonLimit {
				t.Fatalf("case %d: %s refused by Admit but %+v", i, id, p.Unplaced[id])
			}
		}
	}
}

// TestNoStarvation runs many rounds of a busy cluster: a flood of small
// CPU tasks in two queues, a large CPU task and a GPU task that need a
// whole worker each, tasks finishing at random. The large tasks must be
// placed within a bounded number of rounds; without reservations they
// starve.
func TestNoStarvation(t *testing.T) {
	race.SkipPure(t)
	run := func(seed uint64, reservations int) (bigRound, gpuRound int) {
		rng := rand.New(rand.NewPCG(seed, 1))
		s := newSim()
		s.policy.Reservations = reservations
		must := func(cmd string) {
			if _, err := s.do(cmd); err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
		}
		must("add-worker c1..c3 cpu=4000 mem=8Gi")
		must("add-worker g1 cpu=8000 mem=32Gi gpus=2 model=H100")
		must("submit warm queue=train cpu=2000 mem=4Gi gpus=1")
		n := 0
		bigRound, gpuRound = -1, -1
		for round := range 200 {
			if round == 10 { // the cluster is saturated by now
				must("submit big queue=eval cpu=4000 mem=4Gi")
				must("submit gpu queue=train cpu=8000 mem=16Gi gpus=2")
			}
			for range 8 { // the flood never stops, and outgrows the cluster
				n++
				must(fmt.Sprintf("submit s%d queue=%s cpu=1000 mem=1Gi", n, []string{"synth", "eval"}[n%2]))
			}
			must(fmt.Sprintf("place seed=%d", round))
			must("allocate")
			if st := s.tasks["big"]; bigRound < 0 && st != nil && st.worker != "" {
				bigRound = round
			}
			if st := s.tasks["gpu"]; gpuRound < 0 && st != nil && st.worker != "" {
				gpuRound = round
			}
			for _, st := range s.sortedTasks() {
				if st.worker == "" {
					continue
				}
				if st.starting {
					must("started " + st.t.ID)
				}
				if rng.IntN(3) == 0 && st.t.ID != "big" && st.t.ID != "gpu" {
					must("finish " + st.t.ID)
				}
			}
		}
		return bigRound, gpuRound
	}
	starved := 0
	for seed := range uint64(10) {
		big, gpu := run(seed, 0)
		if big < 0 || big > 40 || gpu < 0 || gpu > 40 {
			t.Errorf("seed %d: large CPU task placed at round %d, GPU task at round %d (submitted at 10, want both by 40)", seed, big, gpu)
		}
		b, g := run(seed, -1)
		t.Logf("seed %d: placed at rounds big %d, gpu %d; without reservations %d, %d (-1: never)", seed, big, gpu, b, g)
		if b < 0 || g < 0 {
			starved++
		}
	}
	if starved == 0 {
		t.Error("without reservations nothing starved: the scenario does not test starvation")
	}
}
