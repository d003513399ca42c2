package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/megaflow/megaflow/internal/resources"
)

// benchInput builds a cluster of nw workers and nt queued tasks.
//
// typical: 80% CPU workers (32 cores, 128 GiB) in three zones, 20% GPU
// workers (96 cores, 1 TiB, 8 H100), 30% allocated on average, every
// worker holding a base image and 20 of 2,000 SWE instance images, a cap
// of 8 container starts; tasks in synth, eval and train queues in a few
// shapes, each with its own instance image, 10% with a zone selector, 5%
// asking for GPUs.
//
// diverse: every worker and every task a different shape (the worst case
// for grouping workers into classes).
//
// full: the typical cluster already 95% allocated, so most tasks wait and
// need a reason.
func benchInput(nw, nt int, kind string) Input {
	rng := rand.New(rand.NewPCG(1, 2))
	in := Input{Policy: DefaultPolicy(), Seed: 1}
	in.Policy.Queues = map[string]QueuePolicy{"train": {Weight: 2, Strategy: BinPack}, "synth": {Weight: 1}, "eval": {Weight: 1}}
	for i := range nw {
		w := Worker{ID: fmt.Sprintf("worker-%04d", i), MaxConcurrentStarts: 8,
			Labels: map[string]string{"zone": []string{"a", "b", "c"}[i%3], "hostname": fmt.Sprintf("host-%04d", i)}}
		w.Images = []string{"python:3.11"}
		for range 20 {
			w.Images = append(w.Images, fmt.Sprintf("swe/inst-%d", rng.IntN(2000)))
		}
		if i%5 == 4 {
			w.Capacity = resources.Resources{CPUMillis: 96000, MemoryBytes: 1024 * gi}
			for g := range 8 {
				w.GPUs = append(w.GPUs, GPU{UUID: fmt.Sprintf("GPU-%04d-%d", i, g), Model: "NVIDIA H100 80GB HBM3",
					MemoryBytes: 80 * gi, InUse: rng.IntN(4) == 0})
			}
		} else {
			w.Capacity = resources.Resources{CPUMillis: 32000, MemoryBytes: 128 * gi}
		}
		frac := int64(rng.IntN(7)) // tenths allocated
		if kind == "full" {
			frac = 10
		}
		if kind == "diverse" {
			w.Capacity = resources.Resources{CPUMillis: 16000 + int64(rng.IntN(64))*1000, MemoryBytes: 64*gi + int64(rng.IntN(512))*gi}
		}
		w.Allocated = resources.Resources{CPUMillis: w.Capacity.CPUMillis * frac / 10, MemoryBytes: w.Capacity.MemoryBytes * frac / 10}
		if kind == "full" {
			w.Allocated.CPUMillis -= 2000
			w.Allocated.MemoryBytes -= 4 * gi
		}
		in.Workers = append(in.Workers, w)
	}
	for i := range nt {
		t := Task{ID: fmt.Sprintf("graph-%d/task-%05d", i/100, i), QueueSeq: uint64(i + 1), QueuedSinceUnixNanos: int64(i),
			Image: fmt.Sprintf("swe/inst-%d", rng.IntN(2000)), Tenant: "team-a"}
		switch p := rng.IntN(100); {
		case p < 60:
			t.Queue = "synth"
			t.Resources = resources.Resources{CPUMillis: 1000 * int64(1+rng.IntN(2)), MemoryBytes: 2 * gi * int64(1+rng.IntN(2))}
		case p < 85:
			t.Queue = "eval"
			t.Resources = resources.Resources{CPUMillis: 1000, MemoryBytes: 4 * gi}
		case p < 95:
			t.Queue = "train"
			t.Resources = resources.Resources{CPUMillis: 4000, MemoryBytes: 16 * gi}
		default:
			t.Queue = "train"
			t.Resources = resources.Resources{CPUMillis: 8000, MemoryBytes: 64 * gi, GPUs: int64(1 << rng.IntN(4))}
			t.GPUModel = "H100"
		}
		if kind == "diverse" {
			t.Resources.CPUMillis = 100 * int64(1+rng.IntN(40))
			t.Resources.MemoryBytes = int64(1+rng.IntN(64)) << 28
		}
		if rng.IntN(10) == 0 {
			t.NodeSelector = map[string]string{"zone": []string{"a", "b", "c"}[rng.IntN(3)]}
		}
		t.Priority = int32(rng.IntN(3))
		in.Tasks = append(in.Tasks, t)
	}
	return in
}

// BenchmarkPlace places 10,000 queued tasks on 1,000 workers.
func BenchmarkPlace(b *testing.B) {
	for _, kind := range []string{"typical", "diverse", "full"} {
		in := benchInput(1000, 10000, kind)
		b.Run(kind, func(b *testing.B) {
			var p Plan
			for b.Loop() {
				p = Place(in)
			}
			b.ReportMetric(float64(len(p.Placements)), "placed")
			b.ReportMetric(float64(len(p.Held)), "held")
		})
	}
}

// BenchmarkReference is the brute force on the same input, for scale.
func BenchmarkReference(b *testing.B) {
	in := benchInput(1000, 10000, "typical")
	for b.Loop() {
		placeReference(in)
	}
}
