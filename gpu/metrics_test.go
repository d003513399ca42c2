package gpu

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCollectorExportsUtilizationAndMemory scrapes the GPU collector on a
// mock two-GPU machine whose devices report different utilization, and a
// third device that fails its queries: it must read up 0 and nothing else.
func TestCollectorExportsUtilizationAndMemory(t *testing.T) {
	s := newServer(t, gpus.Multiple(2, gpus.H100_SXM5_80GB)...)
	inv, err := Discover(s)
	if err != nil {
		t.Fatal(err)
	}
	devs := mockDevices(s)
	for i, d := range devs {
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(40 + 50*i), Memory: uint32(10 * (i + 1))}, nvml.SUCCESS
		}
	}
	broken := Device{UUID: "GPU-broken", Name: "gone"}
	c := NewCollector(s, append(inv.Devices, broken, Device{Name: "no uuid"}))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)

	u0, u1 := inv.Devices[0].UUID, inv.Devices[1].UUID
	model := inv.Devices[0].Name
	want := `
# HELP megaflow_gpu_up 1 when NVML answered for the GPU at this scrape, else 0.
# TYPE megaflow_gpu_up gauge
megaflow_gpu_up{model="` + model + `",uuid="` + u0 + `"} 1
megaflow_gpu_up{model="` + model + `",uuid="` + u1 + `"} 1
megaflow_gpu_up{model="gone",uuid="GPU-broken"} 0
# HELP megaflow_gpu_utilization_ratio Share of NVML's last sample period during which a kernel ran on the GPU (0 to 1).
# TYPE megaflow_gpu_utilization_ratio gauge
megaflow_gpu_utilization_ratio{model="` + model + `",uuid="` + u0 + `"} 0.4
megaflow_gpu_utilization_ratio{model="` + model + `",uuid="` + u1 + `"} 0.9
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "megaflow_gpu_up", "megaflow_gpu_utilization_ratio"); err != nil {
		t.Fatal(err)
	}
	// Memory figures come from NVML's memory info, in bytes.
	if got := testutil.ToFloat64(onlyMetric(t, reg, "megaflow_gpu_memory_total_bytes", u0)); got != float64(inv.Devices[0].MemoryTotalBytes) {
		t.Fatalf("memory total of %s = %v, want %d", u0, got, inv.Devices[0].MemoryTotalBytes)
	}
}

// TestCollectorWithoutNVML exports nothing and makes no call but Init when
// the library is missing (go-nvml would kill the process otherwise).
func TestCollectorWithoutNVML(t *testing.T) {
	s := newServer(t, gpus.Multiple(1, gpus.H100_SXM5_80GB)...)
	s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	s.DeviceGetHandleByUUIDFunc = func(string) (nvml.Device, nvml.Return) {
		t.Fatal("NVML called without a successful Init")
		return nil, nvml.ERROR_UNINITIALIZED
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(s, []Device{{UUID: "GPU-1", Name: "x"}}))
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("got %d series (err %v), want none", n, err)
	}
}

// onlyMetric returns a collector yielding the one series of name for uuid.
func onlyMetric(t *testing.T, reg *prometheus.Registry, name, uuid string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "uuid" && l.GetValue() == uuid {
					return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "x", Help: "x"}, func() float64 { return m.GetGauge().GetValue() })
				}
			}
		}
	}
	t.Fatalf("no %s for %s", name, uuid)
	return nil
}
