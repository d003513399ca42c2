//go:build cgo && linux

package main

import (
	"github.com/megaflow/megaflow/gpu"
	"github.com/megaflow/megaflow/internal/wire"
)

// gpuCheck refuses to start an attempt on GPUs that are missing, unhealthy
// or running a foreign compute process (gpu.Check through NVML).
func gpuCheck(uuids []string) error { return gpu.Check(gpu.New(), uuids) }

// discoverGPUs finds the machine's healthy GPUs through NVML. On a machine
// without an NVIDIA driver it returns none and says why; it never fails.
func discoverGPUs() ([]*wire.GpuDevice, string) {
	inv, err := gpu.Discover(gpu.New())
	if err != nil {
		return nil, "NVML: " + err.Error()
	}
	var out []*wire.GpuDevice
	for _, d := range inv.Healthy() {
		out = append(out, &wire.GpuDevice{Uuid: d.UUID, Model: d.Name, MemoryBytes: d.MemoryTotalBytes, NvlinkPeers: d.NVLinkPeers})
	}
	return out, inv.Reason
}
