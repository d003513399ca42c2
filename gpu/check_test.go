package gpu

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
)

func TestCheck(t *testing.T) {
	s := newServer(t, gpus.Multiple(8, gpus.A100_SXM4_40GB)...)
	devs := mockDevices(s)
	devs[3].GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 1 << 30}}, nvml.SUCCESS
	}
	devs[5].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }

	if err := Check(s, []string{devs[0].UUID, devs[1].UUID}); err != nil {
		t.Fatalf("Check(free devices) = %v", err)
	}

	err := Check(s, []string{devs[0].UUID, devs[3].UUID})
	var ce *CheckError
	if !errors.Is(err, ErrForeignProcess) || !errors.As(err, &ce) || ce.UUID != devs[3].UUID || ce.PID != 4242 {
		t.Fatalf("Check(busy device) = %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, devs[3].UUID) || !strings.Contains(msg, "pid 4242") {
		t.Errorf("message %q does not name the device and the pid", msg)
	}

	if err := Check(s, []string{"GPU-not-here"}); !errors.Is(err, ErrDeviceNotFound) || !strings.Contains(err.Error(), "GPU-not-here") {
		t.Fatalf("Check(unknown) = %v", err)
	}
	if err := Check(s, []string{devs[5].UUID}); !errors.Is(err, ErrDeviceUnhealthy) || !strings.Contains(err.Error(), "ERROR_GPU_IS_LOST") {
		t.Fatalf("Check(lost device) = %v", err)
	}
	if n, m := len(s.InitCalls()), len(s.ShutdownCalls()); n != m || n != 4 {
		t.Errorf("Init %d, Shutdown %d: want balanced, 4 each", n, m)
	}
}
