//go:build !cgo || !linux

package main

import (
	"log/slog"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/worker"
	"github.com/prometheus/client_golang/prometheus"
)

// discoverGPUs reports that this binary was built without cgo, which
// go-nvml needs: a GPU worker is built with CGO_ENABLED=1 (make build does
// so for linux/amd64).
func discoverGPUs() ([]*wire.GpuDevice, string) {
	return nil, "built without cgo: no NVML support (build with CGO_ENABLED=1 for GPU workers)"
}

// gpuCheck is never called: without NVML the worker offers no GPUs.
func gpuCheck([]string) error { return nil }

// watchGPUs is never called: without NVML the worker offers no GPUs.
func watchGPUs([]*wire.GpuDevice, *slog.Logger) (<-chan worker.GPUHealthEvent, func()) {
	return nil, func() {}
}

// gpuCollector is never called: without NVML the worker offers no GPUs.
func gpuCollector([]*wire.GpuDevice) prometheus.Collector { return nil }
