package gpu

import (
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// busID formats a PCI address as "dddddddd:bb:dd.f" from its string (NVML
// writes the domain with 4 or 8 digits) or, when that is empty, its fields.
func busID(p nvml.PciInfo) string {
	var b []byte
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	var dom, bus, dev, fn uint32
	if n, _ := fmt.Sscanf(string(b), "%x:%x:%x.%x", &dom, &bus, &dev, &fn); n == 4 {
		return fmt.Sprintf("%08x:%02x:%02x.%x", dom, bus, dev, fn)
	}
	return fmt.Sprintf("%08x:%02x:%02x.0", p.Domain, p.Bus, p.Device)
}

// linkTopology fills each device's NVLinkPeers. For every active link it
// reads the PCI address at the other end: another GPU's address joins the
// two directly; any other address is an NVSwitch, and all GPUs with a link
// to the same switch are joined. A device without NVLink answers
// ERROR_NOT_SUPPORTED on its first link; the links end at the first
// ERROR_INVALID_ARGUMENT.
func linkTopology(devs []Device, handles []nvml.Device) {
	byBus := map[string]int{}
	for i, d := range devs {
		if d.PCIBusID != "" && handles[i] != nil {
			byBus[d.PCIBusID] = i
		}
	}
	peers := make([]map[int]bool, len(devs))
	for i := range peers {
		peers[i] = map[int]bool{}
	}
	switches := map[string][]int{}
	for i, h := range handles {
		if h == nil || !devs[i].Healthy {
			continue
		}
	links:
		for l := range nvml.NVLINK_MAX_LINKS {
			st, ret := h.GetNvLinkState(l)
			switch {
			case ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT:
				break links
			case ret != nvml.SUCCESS || st != nvml.FEATURE_ENABLED:
				continue
			}
			pci, ret := h.GetNvLinkRemotePciInfo(l)
			if ret != nvml.SUCCESS {
				continue
			}
			remote := busID(pci)
			if j, ok := byBus[remote]; ok {
				if j != i {
					peers[i][j], peers[j][i] = true, true
				}
				continue
			}
			if !slices.Contains(switches[remote], i) {
				switches[remote] = append(switches[remote], i)
			}
		}
	}
	for _, members := range switches {
		for _, i := range members {
			for _, j := range members {
				if i != j {
					peers[i][j] = true
				}
			}
		}
	}
	for i := range devs {
		devs[i].NVLinkPeers = nil
		for j := range peers[i] {
			if devs[j].UUID != "" {
				devs[i].NVLinkPeers = append(devs[i].NVLinkPeers, devs[j].UUID)
			}
		}
		slices.Sort(devs[i].NVLinkPeers)
	}
}
