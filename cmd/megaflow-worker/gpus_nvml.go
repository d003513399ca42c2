//go:build cgo && linux

package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/megaflow/megaflow/gpu"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/worker"
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

// watchGPUs starts an NVML health watcher (XID critical errors, devices
// that disappear) on devs and returns its events in the worker's form, and
// the function that stops it (the caller calls it once, after the worker
// ended). When the watcher cannot start, the GPUs are assumed healthy and
// the reason is logged.
func watchGPUs(devs []*wire.GpuDevice, logger *slog.Logger) (<-chan worker.GPUHealthEvent, func()) {
	uuids := make([]string, len(devs))
	for i, d := range devs {
		uuids[i] = d.GetUuid()
	}
	wt, err := gpu.NewWatcher(gpu.New(), gpu.WatcherConfig{UUIDs: uuids})
	if err != nil {
		logger.Warn("GPU health is not watched", "err", err)
		return nil, func() {}
	}
	out := make(chan worker.GPUHealthEvent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		for ev := range wt.Events() {
			out <- worker.GPUHealthEvent(ev)
		}
	}()
	return out, func() {
		wt.Stop() // closes Events: the adapter ends once the worker took the last one or stopped reading
		go func() {
			for range out { // drain, so that the adapter never blocks after the worker stopped
			}
		}()
		<-done
	}
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
