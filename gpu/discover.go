package gpu

import (
	"errors"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/megaflow/megaflow/gpu/alloc"
)

// ReasonNoLibrary is Inventory.Reason on a machine without the NVML library
// (no NVIDIA driver installed).
const ReasonNoLibrary = "no NVIDIA driver: NVML library not found"

// ErrNoNVML is returned (wrapped) by Check and NewWatcher when NVML cannot be
// initialized: no library, no driver loaded, or no permission.
var ErrNoNVML = errors.New("NVML unavailable")

// MIGMode is a device's current Multi-Instance GPU mode.
type MIGMode int

// The MIG modes.
const (
	// MIGUnsupported: the device has no MIG (or NVML would not say).
	MIGUnsupported MIGMode = iota
	// MIGDisabled: MIG is supported and off; the device is one whole GPU.
	MIGDisabled
	// MIGEnabled: MIG is on; the device is split into instances and is
	// not offered as a whole GPU.
	MIGEnabled
)

// String returns "unsupported", "disabled" or "enabled".
func (m MIGMode) String() string {
	switch m {
	case MIGDisabled:
		return "disabled"
	case MIGEnabled:
		return "enabled"
	}
	return "unsupported"
}

// Device is one GPU as discovered.
type Device struct {
	// Index is NVML's device index (as nvidia-smi numbers it).
	Index int
	// UUID is the device's stable id ("GPU-..."); "" if NVML could not read
	// it, in which case Healthy is false.
	UUID string
	// Name is the model name, e.g. "NVIDIA A100-SXM4-40GB".
	Name string
	// MemoryTotalBytes is the device's memory, in bytes.
	MemoryTotalBytes int64
	// MemoryFreeBytes is the memory free at discovery, in bytes.
	MemoryFreeBytes int64
	// MIG is the current MIG mode.
	MIG MIGMode
	// PCIBusID is the device's PCI address, "dddddddd:bb:dd.f".
	PCIBusID string
	// Healthy is false when a query of the device failed; Reason says which.
	Healthy bool
	// Reason says why the device is unhealthy; "" when healthy.
	Reason string
	// NVLinkPeers are the UUIDs of the other devices joined to this one by
	// at least one active NVLink, directly or through a shared NVSwitch;
	// sorted.
	NVLinkPeers []string
}

// Inventory is what Discover found on one machine.
type Inventory struct {
	// Devices are the GPUs by index; empty on a machine without NVML.
	Devices []Device
	// Reason says why Devices is empty when NVML is unusable (e.g.
	// ReasonNoLibrary); "" when NVML answered.
	Reason string
}

// Healthy returns the devices that may be offered to the scheduler: healthy,
// with a UUID, and not split by MIG.
func (inv Inventory) Healthy() []Device {
	var out []Device
	for _, d := range inv.Devices {
		if d.Healthy && d.UUID != "" && d.MIG != MIGEnabled {
			out = append(out, d)
		}
	}
	return out
}

// Connected reports whether devices a and b (by UUID) are NVLink-connected.
func (inv Inventory) Connected(a, b string) bool {
	for _, d := range inv.Devices {
		if d.UUID == a {
			return slices.Contains(d.NVLinkPeers, b)
		}
	}
	return false
}

// Matrix returns the NVLink topology as a matrix over Devices' order:
// m[i][j] is true when Devices[i] and Devices[j] are NVLink-connected.
func (inv Inventory) Matrix() [][]bool {
	m := make([][]bool, len(inv.Devices))
	for i, a := range inv.Devices {
		m[i] = make([]bool, len(inv.Devices))
		for j, b := range inv.Devices {
			m[i][j] = i != j && b.UUID != "" && slices.Contains(a.NVLinkPeers, b.UUID)
		}
	}
	return m
}

// AllocDevices converts the given devices (typically the free ones) to the
// allocator's input, for alloc.Choose.
func AllocDevices(devs []Device) []alloc.Device {
	out := make([]alloc.Device, 0, len(devs))
	for _, d := range devs {
		out = append(out, alloc.Device{UUID: d.UUID, Model: d.Name, MemoryBytes: d.MemoryTotalBytes,
			NVLinkPeers: slices.Clone(d.NVLinkPeers)})
	}
	return out
}

// New returns the real NVML library (libnvidia-ml, loaded on Init). Only the
// worker's composition root calls it; everything else takes an
// nvml.Interface.
func New() nvml.Interface { return nvml.New() }

// initReason turns a failed Init into a reason string.
func initReason(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return ReasonNoLibrary
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "no NVIDIA driver: NVIDIA kernel driver not loaded"
	case nvml.ERROR_NO_PERMISSION:
		return "NVML: no permission to talk to the NVIDIA driver"
	}
	return "NVML init failed: " + ret.Error()
}

// Discover lists the GPUs of this machine through lib. A machine where NVML
// cannot start (no library, no driver) gives an empty Inventory whose
// Reason says why, and a nil error; no NVML call but Init is made then. A
// failing device query marks that device unhealthy and does not fail the
// rest. The error is non-nil only when NVML started but could not count the
// devices. The worker calls it at start and may call it again (it is safe
// from any goroutine; NVML is reference-counted).
func Discover(lib nvml.Interface) (Inventory, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return Inventory{Reason: initReason(ret)}, nil
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		err := fmt.Errorf("nvml: count devices: %w", ret)
		return Inventory{Reason: err.Error()}, err
	}
	inv := Inventory{Devices: make([]Device, n)}
	handles := make([]nvml.Device, n)
	for i := range n {
		inv.Devices[i], handles[i] = describe(lib, i)
	}
	linkTopology(inv.Devices, handles)
	return inv, nil
}

// describe queries device i. The handle is nil when NVML gave none.
func describe(lib nvml.Interface, i int) (Device, nvml.Device) {
	d := Device{Index: i, Healthy: true}
	fail := func(what string, ret nvml.Return) {
		if d.Healthy {
			d.Healthy, d.Reason = false, fmt.Sprintf("%s: %v", what, ret)
		}
	}
	h, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		fail("get handle", ret)
		return d, nil
	}
	if d.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		fail("get UUID", ret)
	}
	if d.Name, ret = h.GetName(); ret != nvml.SUCCESS {
		fail("get name", ret)
	}
	if mem, ret := h.GetMemoryInfo(); ret != nvml.SUCCESS {
		fail("get memory", ret)
	} else {
		d.MemoryTotalBytes, d.MemoryFreeBytes = int64(mem.Total), int64(mem.Free)
	}
	switch cur, _, ret := h.GetMigMode(); {
	case ret == nvml.SUCCESS && cur == nvml.DEVICE_MIG_ENABLE:
		d.MIG = MIGEnabled
	case ret == nvml.SUCCESS:
		d.MIG = MIGDisabled
	case ret == nvml.ERROR_NOT_SUPPORTED:
		d.MIG = MIGUnsupported
	default:
		fail("get MIG mode", ret)
	}
	if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
		d.PCIBusID = busID(pci)
	} else if ret != nvml.ERROR_NOT_SUPPORTED {
		fail("get PCI info", ret)
	}
	return d, h
}
