package scheduler

import (
	"fmt"
	"slices"
	"testing"

	"github.com/megaflow/megaflow/internal/resources"
)

// Multi-GPU tasks get NVLink-connected devices: on a worker with two
// 4-GPU NVLink islands, one device of the first in use, a 4-GPU task gets
// the whole second island and a 2-GPU task a linked pair of the first.
func TestMultiGPUTasksGetLinkedDevices(t *testing.T) {
	var gpus []GPU
	island := func(i int) []string {
		var out []string
		for j := range 4 {
			if k := (i/4)*4 + j; k != i {
				out = append(out, fmt.Sprintf("GPU-%d", k))
			}
		}
		return out
	}
	for i := range 8 {
		gpus = append(gpus, GPU{UUID: fmt.Sprintf("GPU-%d", i), Model: "H100", MemoryBytes: 80 * gi,
			InUse: i == 0, NVLinkPeers: island(i)})
	}
	w := Worker{ID: "w1", Capacity: resources.Resources{CPUMillis: 64000, MemoryBytes: 512 * gi}, GPUs: gpus}
	in := Input{Workers: []Worker{w}, Tasks: []Task{
		{ID: "g/train", Resources: resources.Resources{GPUs: 4}, QueueSeq: 1},
		{ID: "g/serve", Resources: resources.Resources{GPUs: 2}, QueueSeq: 2},
	}}
	got := map[string][]string{}
	for _, p := range Place(in).Placements {
		got[p.TaskID] = p.GPUUUIDs
	}
	if want := []string{"GPU-4", "GPU-5", "GPU-6", "GPU-7"}; !slices.Equal(got["g/train"], want) {
		t.Errorf("4-GPU task got %v, want the free island %v", got["g/train"], want)
	}
	pair := got["g/serve"]
	first := []string{"GPU-1", "GPU-2", "GPU-3"}
	if len(pair) != 2 || !slices.Contains(first, pair[0]) || !slices.Contains(first, pair[1]) {
		t.Errorf("2-GPU task got %v, want two linked devices of the first island (GPU-1..3)", pair)
	}
}
