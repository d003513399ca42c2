package gpu

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports the utilization and memory of the worker's GPUs,
// queried through NVML at each scrape (item 4 of issue 7):
//
//	megaflow_gpu_up{uuid,model}                    1 when NVML answered for the device, else 0
//	megaflow_gpu_utilization_ratio{uuid,model}     share of the last sample period a kernel ran (NVML's gpu utilization / 100)
//	megaflow_gpu_memory_utilization_ratio{uuid,model} share of the period device memory was read or written
//	megaflow_gpu_memory_used_bytes{uuid,model}     device memory in use, in bytes
//	megaflow_gpu_memory_total_bytes{uuid,model}    device memory, in bytes
//
// The utilization figures are nvmlDeviceGetUtilizationRates' (percent over
// the driver's sample period, 1/6 s to 1 s). A device NVML cannot query
// reports up 0 and nothing else; when NVML itself does not start, no series
// at all. Collect makes no NVML call but Init when Init fails (go-nvml
// kills the process on calls without a successful Init).
type Collector struct {
	lib     nvml.Interface
	devices []Device
}

var (
	descGPUUp       = prometheus.NewDesc("megaflow_gpu_up", "1 when NVML answered for the GPU at this scrape, else 0.", []string{"uuid", "model"}, nil)
	descGPUUtil     = prometheus.NewDesc("megaflow_gpu_utilization_ratio", "Share of NVML's last sample period during which a kernel ran on the GPU (0 to 1).", []string{"uuid", "model"}, nil)
	descGPUMemUtil  = prometheus.NewDesc("megaflow_gpu_memory_utilization_ratio", "Share of NVML's last sample period during which GPU memory was read or written (0 to 1).", []string{"uuid", "model"}, nil)
	descGPUMemUsed  = prometheus.NewDesc("megaflow_gpu_memory_used_bytes", "GPU memory in use, in bytes.", []string{"uuid", "model"}, nil)
	descGPUMemTotal = prometheus.NewDesc("megaflow_gpu_memory_total_bytes", "GPU memory, in bytes.", []string{"uuid", "model"}, nil)
)

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector for devices (as Discover found them;
// only those with a UUID are exported), queried through lib. The worker's
// composition root registers it in the worker's registry
// (worker.Config.Collectors).
func NewCollector(lib nvml.Interface, devices []Device) *Collector {
	var ds []Device
	for _, d := range devices {
		if d.UUID != "" {
			ds = append(ds, d)
		}
	}
	return &Collector{lib: lib, devices: ds}
}

// Describe sends the descriptors of every series Collect may emit.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descGPUUp, descGPUUtil, descGPUMemUtil, descGPUMemUsed, descGPUMemTotal} {
		ch <- d
	}
}

// Collect queries each device through NVML. The registry calls it from the
// scraping goroutine; NVML is reference-counted, so Init and Shutdown here
// do not disturb other users.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if len(c.devices) == 0 {
		return
	}
	if ret := c.lib.Init(); ret != nvml.SUCCESS {
		return
	}
	defer c.lib.Shutdown()
	gauge := func(d *prometheus.Desc, v float64, dev Device) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, dev.UUID, dev.Name)
	}
	for _, dev := range c.devices {
		h, ret := c.lib.DeviceGetHandleByUUID(dev.UUID)
		if ret != nvml.SUCCESS {
			gauge(descGPUUp, 0, dev)
			continue
		}
		util, uret := h.GetUtilizationRates()
		mem, mret := h.GetMemoryInfo()
		if uret != nvml.SUCCESS && mret != nvml.SUCCESS {
			gauge(descGPUUp, 0, dev)
			continue
		}
		gauge(descGPUUp, 1, dev)
		if uret == nvml.SUCCESS {
			gauge(descGPUUtil, float64(util.Gpu)/100, dev)
			gauge(descGPUMemUtil, float64(util.Memory)/100, dev)
		}
		if mret == nvml.SUCCESS {
			gauge(descGPUMemUsed, float64(mem.Used), dev)
			gauge(descGPUMemTotal, float64(mem.Total), dev)
		}
	}
}
