package alloc

import "strings"

// Environment variables that pin a process to its GPUs.
const (
	// EnvCUDAVisibleDevices is read by the CUDA runtime inside the process.
	EnvCUDAVisibleDevices = "CUDA_VISIBLE_DEVICES"
	// EnvNVIDIAVisibleDevices is read by the NVIDIA container runtime.
	EnvNVIDIAVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
)

// VisibleDevicesEnv returns the environment that pins a process to exactly
// the assigned devices: CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES, both
// the UUIDs comma-joined in the order given (CUDA numbers the devices the
// process sees in this order). For an empty assignment CUDA_VISIBLE_DEVICES
// is "" (CUDA then sees no device) and NVIDIA_VISIBLE_DEVICES is "void"
// (the NVIDIA container runtime's "no GPU"; an empty value would mean its
// default), so a task without GPUs never inherits the worker's devices. The
// runtime applies the result after the task's own environment, so inherited
// or user-set values are overridden. Pure; any goroutine.
func VisibleDevicesEnv(uuids []string) map[string]string {
	v := strings.Join(uuids, ",")
	nv := v
	if len(uuids) == 0 {
		nv = "void"
	}
	return map[string]string{EnvCUDAVisibleDevices: v, EnvNVIDIAVisibleDevices: nv}
}
