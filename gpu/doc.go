// Package gpu is the worker's edge to the NVIDIA driver, through NVML
// (github.com/NVIDIA/go-nvml): it owns device discovery (index, UUID, model,
// memory, MIG mode, health and the NVLink topology), the pre-start check of
// an assignment (the devices exist, are healthy and run no foreign compute
// process), and the health watcher (XID critical errors, devices that
// disappear).
//
// The worker imports it (cmd/megaflow-worker builds the real library with
// New); the head must not, since NVML needs cgo: the head reads what the
// worker advertises. The pure parts that both sides need, choosing devices
// by NVLink topology and the pinning environment, live in gpu/alloc, which
// links no NVML.
//
// Every function takes an nvml.Interface, so tests pass go-nvml's mock
// (pkg/nvml/mock, e.g. dgxa100.New()). Each call brackets its work with
// Init and Shutdown (NVML counts them) and makes no other NVML call when
// Init fails: without the library any other call would kill the process.
package gpu
