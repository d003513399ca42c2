package gpu

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The reasons Check refuses an assignment; a *CheckError wraps one of them.
var (
	// ErrDeviceNotFound: no device with the UUID (it disappeared, or the
	// plan names a device of another machine).
	ErrDeviceNotFound = errors.New("device not found")
	// ErrDeviceUnhealthy: the device is there but NVML cannot use it.
	ErrDeviceUnhealthy = errors.New("device unhealthy")
	// ErrForeignProcess: a compute process already runs on the device.
	ErrForeignProcess = errors.New("foreign compute process on device")
)

// CheckError is why Check refused one device of an assignment. errors.Is
// matches it against ErrDeviceNotFound, ErrDeviceUnhealthy or
// ErrForeignProcess (and ErrNoNVML).
type CheckError struct {
	// UUID is the refused device.
	UUID string
	// PID is the foreign process, when Err is ErrForeignProcess.
	PID uint32
	// UsedMemoryBytes is the memory the foreign process holds, in bytes.
	UsedMemoryBytes uint64
	// Detail is NVML's answer or other context.
	Detail string
	// Err is the reason class.
	Err error
}

// Error names the device and the reason (and the PID for a foreign
// process).
func (e *CheckError) Error() string {
	if errors.Is(e.Err, ErrForeignProcess) {
		return fmt.Sprintf("gpu %s: %v: pid %d holds %d bytes", e.UUID, e.Err, e.PID, e.UsedMemoryBytes)
	}
	if e.Detail != "" {
		return fmt.Sprintf("gpu %s: %v: %s", e.UUID, e.Err, e.Detail)
	}
	return fmt.Sprintf("gpu %s: %v", e.UUID, e.Err)
}

// Unwrap returns the reason class.
func (e *CheckError) Unwrap() error { return e.Err }

// Check verifies, just before the worker starts an attempt, that every
// assigned device (by UUID) exists, answers NVML (healthy), and runs no
// compute process: the previous holder has really exited and nothing
// outside MegaFlow uses it. It returns nil, or a *CheckError for the first
// refused device (in the order given), or an error wrapping ErrNoNVML when
// NVML does not start. The worker calls it from the attempt's goroutine
// before Start; it makes no NVML call but Init when Init fails.
func Check(lib nvml.Interface, uuids []string) error {
	if len(uuids) == 0 {
		return nil
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("check gpus: %w: %s", ErrNoNVML, initReason(ret))
	}
	defer lib.Shutdown()
	for _, u := range uuids {
		h, ret := lib.DeviceGetHandleByUUID(u)
		switch {
		case ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT:
			return &CheckError{UUID: u, Err: ErrDeviceNotFound, Detail: ret.Error()}
		case ret != nvml.SUCCESS:
			return &CheckError{UUID: u, Err: ErrDeviceUnhealthy, Detail: "get handle: " + ret.Error()}
		}
		if _, ret := h.GetMemoryInfo(); ret != nvml.SUCCESS {
			return &CheckError{UUID: u, Err: ErrDeviceUnhealthy, Detail: "get memory: " + ret.Error()}
		}
		procs, ret := h.GetComputeRunningProcesses()
		if ret != nvml.SUCCESS {
			return &CheckError{UUID: u, Err: ErrDeviceUnhealthy, Detail: "list compute processes: " + ret.Error()}
		}
		if len(procs) > 0 {
			p := procs[0]
			return &CheckError{UUID: u, Err: ErrForeignProcess, PID: p.Pid, UsedMemoryBytes: p.UsedGpuMemory}
		}
	}
	return nil
}
