package head

import (
	"fmt"
	"testing"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/wire"
)

// BenchmarkRound times one scheduling round on a queue of n tasks of 100
// millicores and one worker with room for 8: the loop's round, which reads
// the queue whole, and a carried plan's (the first carriedPlanPerQueue
// tasks of each queue), which costs the same however long the queue.
func BenchmarkRound(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		s := newLeaderSim(&testing.T{})
		info := &wire.WorkerInfo{Id: "w1", Capacity: &wire.Resources{CpuMillis: 800, MemoryBytes: 1 << 34}, Addr: "w1:7400"}
		if err := s.apply(fsm.OpWorkerUpsert, workerUpsert(info, s.epoch)); err != nil {
			b.Fatal(err)
		}
		for g := range n / 100 {
			cmd := &wire.SubmitGraphCommand{Header: &wire.GraphSpec{Id: fmt.Sprint("g", g)}, Chunks: 1, SpecDigest: []byte("d"),
				UnixNanos: s.epoch.UnixNano(), TaskCount: 100}
			for i := range 100 {
				cmd.Tasks = append(cmd.Tasks, &wire.TaskSpec{Name: fmt.Sprint("t", i), Image: "img", Command: []string{"true"},
					Resources: &wire.Resources{CpuMillis: 100}})
			}
			if err := s.apply(fsm.OpSubmitGraph, cmd); err != nil {
				b.Fatal(err)
			}
		}
		for _, perQueue := range []int{0, carriedPlanPerQueue} {
			name := "loop"
			if perQueue > 0 {
				name = "carried"
			}
			b.Run(fmt.Sprintf("queued=%d/%s", n, name), func(b *testing.B) {
				in := roundInput{View: s.f.View(), Connected: func(string) bool { return true }, Term: 1, Now: s.epoch,
					Policy: s.cfg.Scheduler, PerQueue: perQueue}
				for b.Loop() {
					if r := planRound(in); len(r.Plan.GetAttempts()) != 8 {
						b.Fatalf("placed %d; want 8", len(r.Plan.GetAttempts()))
					}
				}
			})
		}
	}
}
