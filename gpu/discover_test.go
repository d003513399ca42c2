package gpu

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"github.com/megaflow/megaflow/gpu/alloc"
)

func uuidsOf(devs []Device, idx ...int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, devs[i].UUID)
	}
	slices.Sort(out)
	return out
}

func TestDiscoverTwoIslands(t *testing.T) {
	s := newServer(t, gpus.Multiple(8, gpus.H100_SXM5_80GB)...)
	setLinks(s, islands([]int{0, 1, 2, 3}, []int{4, 5, 6, 7}))
	mockDevices(s)[0].MemoryInfo.Free = 70 << 30
	inv, err := Discover(s)
	if err != nil || inv.Reason != "" {
		t.Fatalf("Discover: %v, reason %q", err, inv.Reason)
	}
	if len(inv.Devices) != 8 {
		t.Fatalf("found %d devices, want 8", len(inv.Devices))
	}
	for i, d := range inv.Devices {
		if d.Index != i || !strings.HasPrefix(d.UUID, "GPU-") || d.Name != "NVIDIA H100 80GB HBM3" ||
			d.MemoryTotalBytes != 80<<30 || d.MIG != MIGDisabled || !d.Healthy {
			t.Errorf("device %d = %+v", i, d)
		}
		island := []int{0, 1, 2, 3}
		if i >= 4 {
			island = []int{4, 5, 6, 7}
		}
		want := uuidsOf(inv.Devices, slices.DeleteFunc(island, func(j int) bool { return j == i })...)
		if !slices.Equal(d.NVLinkPeers, want) {
			t.Errorf("device %d peers = %v, want %v", i, d.NVLinkPeers, want)
		}
	}
	if got := inv.Devices[0].MemoryFreeBytes; got != 70<<30 {
		t.Errorf("device 0 free memory = %d bytes, want %d", got, int64(70<<30))
	}
	m := inv.Matrix()
	if !m[0][3] || m[0][4] || m[0][0] || !m[5][7] || !inv.Connected(inv.Devices[1].UUID, inv.Devices[2].UUID) {
		t.Errorf("matrix = %v", m)
	}

	// The allocator on this topology: a 4-GPU task gets one island; with
	// one GPU of the first island taken, it gets the other.
	free := AllocDevices(inv.Healthy())
	c, ok := alloc.Choose(free, alloc.Request{Count: 4, Model: "H100"})
	if !ok || !c.FullyConnected || !slices.Equal(c.UUIDs, uuidsOf(inv.Devices, 0, 1, 2, 3)) &&
		!slices.Equal(c.UUIDs, uuidsOf(inv.Devices, 4, 5, 6, 7)) {
		t.Fatalf("4 GPUs: %+v", c)
	}
	rest := slices.DeleteFunc(slices.Clone(free), func(d alloc.Device) bool { return d.UUID == c.UUIDs[0] })
	c2, ok := alloc.Choose(rest, alloc.Request{Count: 4})
	if !ok || !c2.FullyConnected || slices.ContainsFunc(c2.UUIDs, func(u string) bool { return slices.Contains(c.UUIDs, u) }) {
		t.Fatalf("second 4 GPUs: %+v (first %v)", c2, c.UUIDs)
	}
	c8, ok := alloc.Choose(free, alloc.Request{Count: 8})
	if !ok || c8.FullyConnected || c8.Links != 12 {
		t.Fatalf("8 GPUs: %+v", c8)
	}
}

func TestDiscoverNVSwitch(t *testing.T) {
	s := dgxa100.New()
	for _, d := range mockDevices(s) {
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pci(d.PciBusID), nvml.SUCCESS }
	}
	// DGX A100: each GPU has 12 links, two to each of 6 NVSwitches.
	sw := map[int][]int{}
	for i := range 8 {
		for k := range 12 {
			sw[i] = append(sw[i], -1-k/2)
		}
	}
	setLinks(s, sw)
	inv, err := Discover(s)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range inv.Devices {
		if len(d.NVLinkPeers) != 7 || slices.Contains(d.NVLinkPeers, d.UUID) {
			t.Errorf("device %d peers = %v, want the 7 others", i, d.NVLinkPeers)
		}
	}
	c, ok := alloc.Choose(AllocDevices(inv.Devices), alloc.Request{Count: 8})
	if !ok || !c.FullyConnected {
		t.Fatalf("8 GPUs behind NVSwitch: %+v", c)
	}
}

func TestDiscoverMixedPool(t *testing.T) {
	s := newServer(t, gpus.A100_SXM4_40GB, gpus.A100_SXM4_40GB, gpus.H100_SXM5_80GB, gpus.H100_SXM5_80GB)
	setLinks(s, islands([]int{0, 1}, []int{2, 3}))
	mockDevices(s)[1].MigMode = nvml.DEVICE_MIG_ENABLE
	inv, err := Discover(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := inv.Devices[1].MIG; got != MIGEnabled {
		t.Errorf("device 1 MIG = %v, want enabled", got)
	}
	healthy := inv.Healthy()
	if len(healthy) != 3 {
		t.Fatalf("Healthy() = %d devices, want 3 (MIG device left out)", len(healthy))
	}
	free := AllocDevices(healthy)
	if _, ok := alloc.Choose(free, alloc.Request{Count: 2, Model: "A100"}); ok {
		t.Error("2 A100s chosen, but one is split by MIG")
	}
	c, ok := alloc.Choose(free, alloc.Request{Count: 2, MinMemoryBytes: 60 << 30})
	if !ok || !slices.Equal(c.UUIDs, uuidsOf(inv.Devices, 2, 3)) || !c.FullyConnected {
		t.Errorf("2 GPUs with 60 GiB: %+v", c)
	}
	c, ok = alloc.Choose(free, alloc.Request{Count: 1, Model: "a100"})
	if !ok || c.UUIDs[0] != inv.Devices[0].UUID {
		t.Errorf("1 A100: %+v", c)
	}
}

func TestDiscoverUnhealthyDevice(t *testing.T) {
	s := newServer(t, gpus.Multiple(2, gpus.H100_SXM5_80GB)...)
	mockDevices(s)[1].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	inv, err := Discover(s)
	if err != nil {
		t.Fatal(err)
	}
	if d := inv.Devices[1]; d.Healthy || !strings.Contains(d.Reason, "ERROR_GPU_IS_LOST") {
		t.Errorf("device 1 = %+v, want unhealthy with the reason", d)
	}
	if len(inv.Healthy()) != 1 {
		t.Errorf("Healthy() = %v", inv.Healthy())
	}
}

// noNVML is a machine without the library: Init fails, and the mock panics
// on any other call, which is exactly what the real library would do (kill
// the process).
func noNVML(ret nvml.Return) *mock.Interface {
	return &mock.Interface{InitFunc: func() nvml.Return { return ret }}
}

func TestNoNVML(t *testing.T) {
	lib := noNVML(nvml.ERROR_LIBRARY_NOT_FOUND)
	inv, err := Discover(lib)
	if err != nil || len(inv.Devices) != 0 || inv.Reason != "no NVIDIA driver: NVML library not found" {
		t.Fatalf("Discover = %+v, %v", inv, err)
	}
	if err := Check(lib, []string{"GPU-x"}); !errors.Is(err, ErrNoNVML) || !strings.Contains(err.Error(), "library not found") {
		t.Fatalf("Check = %v, want ErrNoNVML", err)
	}
	if err := Check(lib, nil); err != nil {
		t.Fatalf("Check(nil) = %v: no GPUs needs no NVML", err)
	}
	if _, err := NewWatcher(lib, WatcherConfig{}); !errors.Is(err, ErrNoNVML) {
		t.Fatalf("NewWatcher = %v, want ErrNoNVML", err)
	}
	if n := len(lib.InitCalls()); n != 3 {
		t.Fatalf("Init called %d times, want 3", n)
	}

	inv, _ = Discover(noNVML(nvml.ERROR_DRIVER_NOT_LOADED))
	if !strings.Contains(inv.Reason, "driver not loaded") {
		t.Fatalf("reason %q", inv.Reason)
	}
}
