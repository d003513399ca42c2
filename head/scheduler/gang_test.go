package scheduler

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/megaflow/megaflow/internal/resources"
)

// gangWorker is a CPU worker with cores cores (8 GiB each) and used of
// them allocated.
func gangWorker(id string, cores, used int64) Worker {
	return Worker{ID: id,
		Capacity:  resources.Resources{CPUMillis: cores * 1000, MemoryBytes: cores * 8 * gi},
		Allocated: resources.Resources{CPUMillis: used * 1000, MemoryBytes: used * 8 * gi}}
}

// gpuWorker is a worker with 8 H100s, all linked by NVLink, the first
// busy of them in use.
func gpuWorker(id string, busy int) Worker {
	var gpus []GPU
	for i := range 8 {
		var peers []string
		for j := range 8 {
			if j != i {
				peers = append(peers, fmt.Sprintf("%s-gpu%d", id, j))
			}
		}
		gpus = append(gpus, GPU{UUID: fmt.Sprintf("%s-gpu%d", id, i), Model: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 * gi,
			InUse: i < busy, NVLinkPeers: peers})
	}
	return Worker{ID: id, Capacity: resources.Resources{CPUMillis: 96000, MemoryBytes: 1024 * gi}, GPUs: gpus}
}

// member is a task of gang gang (or of none, for gang "") asking for
// cores cores, 1 GiB each, and gpus GPUs.
func member(id, gang string, seq uint64, cores, gpus int64) Task {
	return Task{ID: id, Gang: gang, Tenant: "team-a", QueueSeq: seq,
		Resources: resources.Resources{CPUMillis: cores * 1000, MemoryBytes: cores * gi, GPUs: gpus}}
}

func TestGangPlacement(t *testing.T) {
	const rule = "a gang starts all at once, one task per worker, or not at all"
	refuse := func(id string) func(Task) (bool, string) {
		return func(t Task) (bool, string) {
			if t.ID == id {
				return false, "refused by the test hook"
			}
			return true, ""
		}
	}
	cases := []struct {
		name string
		in   Input
		// placed maps each task expected placed to its worker, or to ""
		// when any worker will do; every other task must be unplaced.
		placed map[string]string
		// why is the reason expected of every unplaced member of a gang.
		why Reason
		// check, if set, looks at the plan further.
		check func(t *testing.T, p Plan)
	}{{
		// Spread would put both on the large worker; a gang takes one
		// worker per task.
		name: "pair on distinct workers",
		in: Input{Workers: []Worker{gangWorker("big", 64, 0), gangWorker("small", 8, 0)}, Tasks: []Task{
			member("g/train-0", "train", 1, 1, 0), member("g/train-1", "train", 2, 1, 0),
		}},
		placed: map[string]string{"g/train-0": "big", "g/train-1": "small"},
	}, {
		name: "three tasks, two workers",
		in: Input{Workers: []Worker{gangWorker("w1", 64, 0), gangWorker("w2", 64, 0)}, Tasks: []Task{
			member("g/train-0", "train", 1, 1, 0), member("g/train-1", "train", 2, 1, 0), member("g/train-2", "train", 3, 1, 0),
			member("g/other", "", 4, 1, 0),
		}},
		placed: map[string]string{"g/other": ""},
		why:    Reason{ReasonInfeasible, `gang "train" needs 3 workers that can run its tasks, one each; 2 can`},
	}, {
		name: "a member no worker can run",
		in: Input{Workers: []Worker{gangWorker("w1", 8, 0), gangWorker("w2", 8, 0)}, Tasks: []Task{
			member("g/train-0", "train", 1, 1, 0), member("g/train-1", "train", 2, 16, 0),
		}},
		why: Reason{ReasonInfeasible, `gang "train": task "g/train-1": no worker has 16 cores (the largest has 8 cores)`},
	}, {
		// w2 is full: the gang waits, and the ordinary task behind it
		// is placed on w1 all the same (a gang holds no worker).
		name: "only one worker has room",
		in: Input{Workers: []Worker{gangWorker("w1", 8, 0), gangWorker("w2", 8, 6)}, Tasks: []Task{
			member("g/train-0", "train", 1, 4, 0), member("g/train-1", "train", 2, 4, 0),
			member("g/eval", "", 3, 1, 0),
		}},
		placed: map[string]string{"g/eval": "w1"},
		why:    Reason{ReasonCapacity, `gang "train": 1 of its 2 tasks has a worker with room now; ` + rule},
		check: func(t *testing.T, p Plan) {
			if len(p.Held) != 0 {
				t.Errorf("held %v, want no hold for a gang", p.Held)
			}
		},
	}, {
		// Greedy would give the small task the large worker (spread)
		// and leave nothing for the large one; the gang moves it.
		name: "members of different sizes",
		in: Input{Workers: []Worker{gangWorker("big", 16, 0), gangWorker("small", 4, 0)}, Tasks: []Task{
			member("g/train-0", "train", 1, 1, 0), member("g/train-1", "train", 2, 8, 0),
		}},
		placed: map[string]string{"g/train-0": "small", "g/train-1": "big"},
	}, {
		name: "8-GPU tasks take whole NVLink workers",
		in: Input{Workers: []Worker{gpuWorker("a", 0), gpuWorker("b", 1), gpuWorker("c", 0)}, Tasks: []Task{
			member("g/train-0", "train", 1, 8, 8), member("g/train-1", "train", 2, 8, 8),
		}},
		placed: map[string]string{"g/train-0": "", "g/train-1": ""},
		check: func(t *testing.T, p Plan) {
			for _, pl := range p.Placements {
				if pl.WorkerID == "b" {
					t.Errorf("%s placed on b, which has a GPU in use", pl.TaskID)
				}
				var want []string
				for i := range 8 {
					want = append(want, fmt.Sprintf("%s-gpu%d", pl.WorkerID, i))
				}
				if got := slices.Sorted(slices.Values(pl.GPUUUIDs)); !slices.Equal(got, want) {
					t.Errorf("%s on %s got GPUs %v, want all 8: %v", pl.TaskID, pl.WorkerID, got, want)
				}
			}
		},
	}, {
		name: "GPU quota full now",
		in: Input{Workers: []Worker{gpuWorker("a", 0), gpuWorker("c", 0)}, Tasks: []Task{
			member("g/train-0", "train", 1, 8, 8), member("g/train-1", "train", 2, 8, 8), member("g/eval", "", 3, 1, 0),
		}, Quotas: map[string]Quota{"team-a": {Max: resources.Resources{GPUs: 16}, Used: resources.Resources{GPUs: 8}}}},
		placed: map[string]string{"g/eval": ""},
		why:    Reason{ReasonQuota, `tenant team-a is at its GPU quota (8 GPUs of 16 GPUs in use; gang "train" asks for 16 GPUs)`},
	}, {
		name: "GPU quota too small ever",
		in: Input{Workers: []Worker{gpuWorker("a", 0), gpuWorker("c", 0)}, Tasks: []Task{
			member("g/train-0", "train", 1, 8, 8), member("g/train-1", "train", 2, 8, 8),
		}, Quotas: map[string]Quota{"team-a": {Max: resources.Resources{GPUs: 8}}}},
		why: Reason{ReasonInfeasible, `gang "train" asks for 16 GPUs, more than tenant team-a's GPU quota of 8 GPUs`},
	}, {
		name: "running quota full now",
		in: Input{Workers: []Worker{gangWorker("w1", 8, 0), gangWorker("w2", 8, 0)}, Tasks: []Task{
			member("g/train-0", "train", 1, 1, 0), member("g/train-1", "train", 2, 1, 0),
		}, Quotas: map[string]Quota{"team-a": {MaxRunning: 3, Running: 2}}},
		why: Reason{ReasonQuota, `tenant team-a is at its quota of 3 running tasks (2 running; gang "train" has 2 tasks)`},
	}, {
		name: "cluster limit too small ever",
		in: Input{Workers: []Worker{gangWorker("w1", 8, 0), gangWorker("w2", 8, 0)}, Tasks: []Task{
			member("g/train-0", "train", 1, 1, 0), member("g/train-1", "train", 2, 1, 0),
		}, Cluster: Quota{MaxRunning: 1}},
		why: Reason{ReasonInfeasible, `gang "train" has 2 tasks, more than the cluster's limit of 1 running task`},
	}, {
		name: "the admission hook refuses a member",
		in: Input{Workers: []Worker{gangWorker("w1", 8, 0), gangWorker("w2", 8, 0)}, Tasks: []Task{
			member("g/train-0", "train", 1, 1, 0), member("g/train-1", "train", 2, 1, 0), member("g/eval", "", 3, 1, 0),
		}, Admit: refuse("g/train-1")},
		placed: map[string]string{"g/eval": ""},
		why:    Reason{ReasonLimit, `gang "train": task "g/train-1": refused by the test hook`},
	}, {
		// Merged, the two would be a gang of 4 on 3 workers.
		name: "same name in two graphs",
		in: Input{Workers: []Worker{gangWorker("w1", 8, 0), gangWorker("w2", 8, 0), gangWorker("w3", 8, 0)}, Tasks: []Task{
			member("g/train-0", "train", 1, 1, 0), member("g/train-1", "train", 2, 1, 0),
			member("h/train-0", "train", 3, 1, 0), member("h/train-1", "train", 4, 1, 0),
		}},
		placed: map[string]string{"g/train-0": "", "g/train-1": "", "h/train-0": "", "h/train-1": ""},
	}, {
		name: "start cap",
		in: Input{Workers: []Worker{
			func() Worker { w := gangWorker("w1", 8, 0); w.MaxConcurrentStarts = 1; return w }(),
			func() Worker { w := gangWorker("w2", 64, 0); w.MaxConcurrentStarts, w.StartsInFlight = 2, 2; return w }(),
			gangWorker("w3", 8, 0),
		}, Tasks: []Task{
			member("g/train-0", "train", 1, 1, 0), member("g/train-1", "train", 2, 1, 0), member("g/eval", "", 3, 1, 0),
		}},
		// w1's only start slot goes to the gang; g/eval takes w3's.
		placed: map[string]string{"g/train-0": "", "g/train-1": "", "g/eval": "w3"},
		check: func(t *testing.T, p Plan) {
			for _, pl := range p.Placements {
				if pl.WorkerID == "w2" {
					t.Errorf("%s placed on w2, which is at its start cap", pl.TaskID)
				}
			}
		},
	}, {
		name: "start cap full",
		in: Input{Workers: []Worker{
			func() Worker { w := gangWorker("w1", 8, 0); w.MaxConcurrentStarts, w.StartsInFlight = 1, 1; return w }(),
			gangWorker("w2", 8, 0),
		}, Tasks: []Task{
			member("g/train-0", "train", 1, 1, 0), member("g/train-1", "train", 2, 1, 0),
		}},
		why: Reason{ReasonStartLimit, `gang "train": start rate limit: 1 of its 2 tasks has a worker with room and a container start slot now; ` + rule},
	}, {
		// The cap is checked before a gang, not within it.
		name: "placement cap overshot by a gang",
		in: Input{Workers: []Worker{gangWorker("w1", 8, 0), gangWorker("w2", 8, 0), gangWorker("w3", 8, 0)}, Tasks: []Task{
			member("g/train-0", "train", 1, 1, 0), member("g/train-1", "train", 2, 1, 0), member("g/train-2", "train", 3, 1, 0),
			member("g/eval", "", 4, 1, 0),
		}, Policy: Policy{MaxPlacements: 2}},
		placed: map[string]string{"g/train-0": "", "g/train-1": "", "g/train-2": ""},
		check: func(t *testing.T, p Plan) {
			if r := p.Unplaced["g/eval"]; r.Kind != ReasonDeferred {
				t.Errorf("g/eval: %v %q, want deferred", r.Kind, r.Message)
			}
		},
	}, {
		name: "placement cap reached before a gang",
		in: Input{Workers: []Worker{gangWorker("w1", 8, 0), gangWorker("w2", 8, 0)}, Tasks: []Task{
			member("g/eval", "", 1, 1, 0), member("g/train-0", "train", 2, 1, 0), member("g/train-1", "train", 3, 1, 0),
		}, Policy: Policy{MaxPlacements: 1}},
		placed: map[string]string{"g/eval": ""},
		why:    Reason{ReasonDeferred, "not considered: the round stopped at its cap of 1 placements"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Place(tc.in)
			if ref := placeReference(tc.in); !reflect.DeepEqual(p, ref) {
				t.Fatalf("plan differs from the reference\nfast:\n%s\nreference:\n%s", dump(p), dump(ref))
			}
			checkPlan(t, 0, tc.in, p)
			got := map[string]string{}
			for _, pl := range p.Placements {
				got[pl.TaskID] = pl.WorkerID
			}
			for _, tk := range tc.in.Tasks {
				want, ok := tc.placed[tk.ID]
				switch w, placed := got[tk.ID]; {
				case ok && !placed:
					t.Errorf("%s not placed (%v), want it placed\n%s", tk.ID, p.Unplaced[tk.ID], dump(p))
				case !ok && placed:
					t.Errorf("%s placed on %s, want it unplaced\n%s", tk.ID, w, dump(p))
				case ok && want != "" && w != want:
					t.Errorf("%s placed on %s, want %s\n%s", tk.ID, w, want, dump(p))
				case !ok && tk.Gang != "" && p.Unplaced[tk.ID] != tc.why:
					t.Errorf("%s: %v %q, want %v %q", tk.ID, p.Unplaced[tk.ID].Kind, p.Unplaced[tk.ID].Message, tc.why.Kind, tc.why.Message)
				}
			}
			if tc.check != nil {
				tc.check(t, p)
			}
		})
	}
}

// TestGangDeterministic checks that a round with gangs gives the same plan
// every time, whatever the order of its input.
func TestGangDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	in := Input{Seed: 9}
	for i := range 12 {
		in.Workers = append(in.Workers, gangWorker(fmt.Sprintf("w%02d", i), 16, int64(rng.IntN(12))))
	}
	for i := range 30 {
		gang, graph := "", fmt.Sprintf("g%d", i)
		if i%3 != 0 {
			gang, graph = []string{"train", "rl"}[i%2], []string{"a", "b"}[i%4/2]
		}
		in.Tasks = append(in.Tasks, member(fmt.Sprintf("%s/t%02d", graph, i), gang, uint64(i+1), int64(1+rng.IntN(6)), 0))
	}
	first := Place(in)
	if len(first.Placements) == 0 {
		t.Fatal("nothing placed: the test proves nothing")
	}
	for i := range 20 {
		shuffled := deepCopy(in)
		rng.Shuffle(len(shuffled.Workers), func(a, b int) { shuffled.Workers[a], shuffled.Workers[b] = shuffled.Workers[b], shuffled.Workers[a] })
		rng.Shuffle(len(shuffled.Tasks), func(a, b int) { shuffled.Tasks[a], shuffled.Tasks[b] = shuffled.Tasks[b], shuffled.Tasks[a] })
		if again := Place(shuffled); !reflect.DeepEqual(first, again) {
			t.Fatalf("try %d: plan differs\nfirst:\n%s\nagain:\n%s", i, dump(first), dump(again))
		}
	}
	checkPlan(t, 0, in, first)
}
