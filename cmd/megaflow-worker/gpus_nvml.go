//go:build cgo && linux

package main

import (
	"github.com/prometheus/client_golang/prometheus"

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

// gpuCollector exports the offered GPUs' utilization and memory, queried
// through NVML at each scrape (gpu.Collector).
func gpuCollector(devs []*wire.GpuDevice) prometheus.Collector {
	ds := make([]gpu.Device, 0, len(devs))
	for _, d := range devs {
		ds = append(ds, gpu.Device{UUID: d.GetUuid(), Name: d.GetModel()})
	}
	return gpu.NewCollector(gpu.New(), ds)
}
