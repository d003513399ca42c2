package gpu

import (
	"fmt"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// The go-nvml mock panics on any method a test does not set. These helpers
// set the ones this package calls beyond what mock/server sets itself
// (PCI bus ids, NVLink, compute processes, events).

func pci(bus string) nvml.PciInfo {
	var p nvml.PciInfo
	for i, c := range bus {
		p.BusId[i] = int8(c)
	}
	return p
}

func mockDevices(s *server.Server) []*server.Device {
	out := make([]*server.Device, len(s.Devices))
	for i, d := range s.Devices {
		out[i] = d.(*server.Device)
	}
	return out
}

// newServer returns a mock machine with the given GPUs, real bus ids, no
// compute processes and no NVLink (every device answers NOT_SUPPORTED).
func newServer(t *testing.T, cfgs ...gpus.Config) *server.Server {
	t.Helper()
	s, err := server.New(server.WithGPUs(cfgs...), server.WithDriverVersion("550.54.15"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range mockDevices(s) {
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pci(d.PciBusID), nvml.SUCCESS }
		d.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	}
	return s
}

// setLinks gives device i a direct NVLink to each device in remotes[i], one
// link each, in order; link indexes past the last answer INVALID_ARGUMENT.
// A remote of -1-k is NVSwitch k.
func setLinks(s *server.Server, remotes map[int][]int) {
	devs := mockDevices(s)
	for i, d := range devs {
		var bus []string
		for _, j := range remotes[i] {
			if j < 0 {
				bus = append(bus, fmt.Sprintf("0000:%02x:00.0", 0xf0+(-1-j)))
			} else {
				bus = append(bus, devs[j].PciBusID)
			}
		}
		d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
			if l >= len(bus) {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		d.GetNvLinkRemotePciInfoFunc = func(l int) (nvml.PciInfo, nvml.Return) {
			if l >= len(bus) {
				return nvml.PciInfo{}, nvml.ERROR_INVALID_ARGUMENT
			}
			return pci(bus[l]), nvml.SUCCESS
		}
	}
}

// islands links every pair within each group directly.
func islands(groups ...[]int) map[int][]int {
	m := map[int][]int{}
	for _, g := range groups {
		for _, i := range g {
			for _, j := range g {
				if i != j {
					m[i] = append(m[i], j)
				}
			}
		}
	}
	return m
}
