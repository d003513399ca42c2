package gpu

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"go.uber.org/goleak"
)

// watchable sets what the watcher calls: event registration on every
// device, an event set, and a wait that delivers next's events in turn and
// then times out after the requested wait.
func watchable(s *server.Server, next chan nvml.EventData) *mock.EventSet {
	set := &mock.EventSet{FreeFunc: func() nvml.Return { return nvml.SUCCESS }}
	for _, d := range mockDevices(s) {
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
			return nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
		}
		d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	s.EventSetWaitFunc = func(_ nvml.EventSet, ms uint32) (nvml.EventData, nvml.Return) {
		select {
		case e := <-next:
			return e, nvml.SUCCESS
		case <-time.After(time.Duration(ms) * time.Millisecond):
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
	return set
}

func recv(t *testing.T, ch <-chan HealthEvent) HealthEvent {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no health event within 10s")
		return HealthEvent{}
	}
}

func TestWatcherXID(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := newServer(t, gpus.Multiple(8, gpus.H100_SXM5_80GB)...)
	devs := mockDevices(s)
	next := make(chan nvml.EventData, 4)
	set := watchable(s, next)

	w, err := NewWatcher(s, WatcherConfig{WaitTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(devs[0].RegisterEventsCalls()); n != 1 || devs[0].RegisterEventsCalls()[0].V != nvml.EventTypeXidCriticalError {
		t.Fatalf("device 0 registered %d times: %+v", n, devs[0].RegisterEventsCalls())
	}
	next <- nvml.EventData{Device: devs[2], EventType: nvml.EventTypeXidCriticalError, EventData: 13} // application XID: ignored
	next <- nvml.EventData{Device: devs[2], EventType: nvml.EventTypeSingleBitEccError}               // not an XID: ignored
	next <- nvml.EventData{Device: devs[2], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	next <- nvml.EventData{Device: devs[2], EventType: nvml.EventTypeXidCriticalError, EventData: 48} // already unhealthy: no second event
	ev := recv(t, w.Events())
	if ev.UUID != devs[2].UUID || ev.Healthy || ev.Reason != "XID 79 critical error" {
		t.Fatalf("event %+v, want device 2 unhealthy by XID 79", ev)
	}
	w.Stop()
	w.Stop()
	for e := range w.Events() {
		t.Errorf("unexpected event %+v", e)
	}
	if len(set.FreeCalls()) != 1 || len(s.InitCalls()) != len(s.ShutdownCalls()) {
		t.Errorf("free %d, init %d, shutdown %d", len(set.FreeCalls()), len(s.InitCalls()), len(s.ShutdownCalls()))
	}
}

func TestWatcherDeviceDisappears(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := newServer(t, gpus.Multiple(4, gpus.A100_SXM4_80GB)...)
	devs := mockDevices(s)
	watchable(s, make(chan nvml.EventData))
	var gone atomic.Bool
	byUUID := s.DeviceGetHandleByUUIDFunc
	s.DeviceGetHandleByUUIDFunc = func(u string) (nvml.Device, nvml.Return) {
		if u == devs[1].UUID && gone.Load() {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return byUUID(u)
	}
	w, err := NewWatcher(s, WatcherConfig{UUIDs: []string{devs[0].UUID, devs[1].UUID}, WaitTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	gone.Store(true)
	if ev := recv(t, w.Events()); ev.UUID != devs[1].UUID || ev.Healthy || ev.Reason != "device disappeared: ERROR_GPU_IS_LOST" {
		t.Fatalf("event %+v, want device 1 disappeared", ev)
	}
	gone.Store(false)
	if ev := recv(t, w.Events()); ev.UUID != devs[1].UUID || !ev.Healthy {
		t.Fatalf("event %+v, want device 1 back", ev)
	}
}

func TestWatcherEventWithoutDevice(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := newServer(t, gpus.Multiple(2, gpus.H100_SXM5_80GB)...)
	next := make(chan nvml.EventData, 1)
	watchable(s, next)
	w, err := NewWatcher(s, WatcherConfig{WaitTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	next <- nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	seen := map[string]bool{}
	for range 2 {
		ev := recv(t, w.Events())
		if ev.Healthy {
			t.Fatalf("event %+v", ev)
		}
		seen[ev.UUID] = true
	}
	if len(seen) != 2 {
		t.Fatalf("unhealthy %v, want both devices", seen)
	}
}
