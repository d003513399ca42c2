package head

import (
	"github.com/megaflow/megaflow/internal/resources"
)

// Fragmentation is the share of the cluster's free CPU and free memory that
// is stranded: it sits on workers whose free resources cannot hold one more
// reference task, so no task of the current workload can use it.
//
// The reference task is the smallest request (by CPU, then memory, then
// GPUs) among the QUEUED tasks, or, when none is queued, among the
// ASSIGNED and RUNNING ones: the workload the cluster must fit. This follows
// the workload-relative definition of "Beware of Fragmentation: Scheduling
// GPU-Sharing Workloads with Fragmentation Gradient Descent" (Weng et al.,
// USENIX ATC 2023), simplified to one reference task; the MegaFlow paper
// (arXiv 2601.07526, monitoring) targets a fragmentation below 10%.
//
// free holds the free resources (capacity minus allocation) of each ALIVE
// worker; negative amounts count as nothing free. CPU and Memory are ratios
// in [0, 1]; both are 0 when nothing is free or there is no reference task
// (ok is false then). Pure: the collector calls it at scrape time.
type Fragmentation struct {
	CPU, Memory float64
	// OK is false when there is no reference task.
	OK bool
}

// ComputeFragmentation computes the Fragmentation of free for reference
// request ref; hasRef says whether there is a reference task at all.
func ComputeFragmentation(free []resources.Resources, ref resources.Resources, hasRef bool) Fragmentation {
	if !hasRef {
		return Fragmentation{}
	}
	var totalCPU, totalMem, strandedCPU, strandedMem int64
	for _, f := range free {
		cpu, mem := max(f.CPUMillis, 0), max(f.MemoryBytes, 0)
		totalCPU += cpu
		totalMem += mem
		if !ref.Fits(f) {
			strandedCPU += cpu
			strandedMem += mem
		}
	}
	out := Fragmentation{OK: true}
	if totalCPU > 0 {
		out.CPU = float64(strandedCPU) / float64(totalCPU)
	}
	if totalMem > 0 {
		out.Memory = float64(strandedMem) / float64(totalMem)
	}
	return out
}

// smallerRequest orders requests for the reference task: CPU, then memory,
// then GPUs.
func smallerRequest(a, b resources.Resources) bool {
	if a.CPUMillis != b.CPUMillis {
		return a.CPUMillis < b.CPUMillis
	}
	if a.MemoryBytes != b.MemoryBytes {
		return a.MemoryBytes < b.MemoryBytes
	}
	return a.GPUs < b.GPUs
}
