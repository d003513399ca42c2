package gpu

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// HealthEvent says that a device's health changed.
type HealthEvent struct {
	// UUID is the device.
	UUID string
	// Healthy is the device's new state.
	Healthy bool
	// Reason says why, e.g. "XID 79 critical error" or "device disappeared:
	// ERROR_NOT_FOUND".
	Reason string
}

// DefaultIgnoredXIDs are the XIDs caused by the application rather than the
// device (13 graphics engine exception, 31 MMU fault, 43 channel stopped,
// 45 preemptive cleanup, 68 video decoder error, 109 context switch
// timeout): the attempt that caused them fails on its own, the device stays
// usable.
var DefaultIgnoredXIDs = []uint64{13, 31, 43, 45, 68, 109}

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	// UUIDs are the devices to watch; nil: every device present when the
	// watcher starts.
	UUIDs []string
	// WaitTimeout is how long one NVML event wait blocks. It is the period
	// of the check for devices that disappeared and the most Stop waits.
	// Zero: 5 s.
	WaitTimeout time.Duration
	// IgnoredXIDs are XIDs that do not make a device unhealthy. Nil:
	// DefaultIgnoredXIDs.
	IgnoredXIDs []uint64
	// Buffer is the capacity of the Events channel. Zero: 16.
	Buffer int
}

// Watcher reports GPU health changes: an XID critical error marks a device
// unhealthy until the watcher is restarted (a device that raised one needs a
// reset); a device that disappears is unhealthy until it answers again. It
// owns one goroutine, started by NewWatcher and ended by Stop.
type Watcher struct {
	lib     nvml.Interface
	cfg     WatcherConfig
	set     nvml.EventSet
	uuids   []string
	events  chan HealthEvent
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	xid     map[string]string // device -> XID reason (sticky)
	gone    map[string]string // device -> why it is missing
	healthy map[string]bool   // last state reported (or assumed healthy)
}

// NewWatcher initializes NVML, registers every watched device that supports
// it for XID critical error events, and starts the watching goroutine. It
// fails, wrapping ErrNoNVML, when NVML does not start (then no other NVML
// call is made). The worker calls it once at start, reads Events from one
// goroutine and calls Stop at shutdown.
func NewWatcher(lib nvml.Interface, cfg WatcherConfig) (*Watcher, error) {
	if cfg.WaitTimeout <= 0 {
		cfg.WaitTimeout = 5 * time.Second
	}
	if cfg.IgnoredXIDs == nil {
		cfg.IgnoredXIDs = DefaultIgnoredXIDs
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = 16
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu health watcher: %w: %s", ErrNoNVML, initReason(ret))
	}
	w := &Watcher{lib: lib, cfg: cfg, events: make(chan HealthEvent, cfg.Buffer),
		stop: make(chan struct{}), done: make(chan struct{}),
		xid: map[string]string{}, gone: map[string]string{}, healthy: map[string]bool{}}
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		lib.Shutdown()
		return nil, fmt.Errorf("gpu health watcher: create event set: %w", ret)
	}
	w.set = set
	w.uuids = slices.Clone(cfg.UUIDs)
	if w.uuids == nil {
		n, ret := lib.DeviceGetCount()
		if ret != nvml.SUCCESS {
			set.Free()
			lib.Shutdown()
			return nil, fmt.Errorf("gpu health watcher: count devices: %w", ret)
		}
		for i := range n {
			if h, ret := lib.DeviceGetHandleByIndex(i); ret == nvml.SUCCESS {
				if u, ret := h.GetUUID(); ret == nvml.SUCCESS {
					w.uuids = append(w.uuids, u)
				}
			}
		}
	}
	for _, u := range w.uuids {
		w.healthy[u] = true
		h, ret := lib.DeviceGetHandleByUUID(u)
		if ret != nvml.SUCCESS {
			continue // the first check reports it missing
		}
		types, ret := h.GetSupportedEventTypes()
		if ret != nvml.SUCCESS || types&nvml.EventTypeXidCriticalError == 0 {
			continue // no XID events on this device; watched for disappearance only
		}
		h.RegisterEvents(nvml.EventTypeXidCriticalError, set)
	}
	go w.run()
	return w, nil
}

// Events returns the channel of health changes. It is closed after Stop.
// A reader that falls behind by more than WatcherConfig.Buffer events
// delays the watcher, never loses an event.
func (w *Watcher) Events() <-chan HealthEvent { return w.events }

// Stop ends the goroutine (within WaitTimeout), frees the event set, shuts
// NVML down and closes Events. It may be called more than once, from any
// goroutine.
func (w *Watcher) Stop() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *Watcher) run() {
	defer close(w.done)
	defer close(w.events)
	defer w.lib.Shutdown()
	defer w.set.Free()
	ms := uint32(w.cfg.WaitTimeout.Milliseconds())
	for {
		if !w.probe() {
			return
		}
		select {
		case <-w.stop:
			return
		default:
		}
		e, ret := w.lib.EventSetWait(w.set, ms)
		switch ret {
		case nvml.SUCCESS:
			if !w.onEvent(e) {
				return
			}
		case nvml.ERROR_TIMEOUT:
		default:
			// An error that may repeat at once: wait out the period.
			select {
			case <-w.stop:
				return
			case <-time.After(w.cfg.WaitTimeout):
			}
		}
	}
}

// onEvent handles one NVML event; false when stopped.
func (w *Watcher) onEvent(e nvml.EventData) bool {
	if e.EventType != nvml.EventTypeXidCriticalError || slices.Contains(w.cfg.IgnoredXIDs, e.EventData) {
		return true
	}
	reason := fmt.Sprintf("XID %d critical error", e.EventData)
	targets := w.uuids // an event without a device concerns all of them
	if e.Device != nil {
		if u, ret := e.Device.GetUUID(); ret == nvml.SUCCESS && u != "" {
			targets = []string{u}
		}
	}
	for _, u := range targets {
		if _, watched := w.healthy[u]; !watched {
			continue
		}
		if _, seen := w.xid[u]; !seen {
			w.xid[u] = reason
		}
		if !w.report(u) {
			return false
		}
	}
	return true
}

// probe looks up every watched device and reports those that disappeared or
// came back; false when stopped.
func (w *Watcher) probe() bool {
	for _, u := range w.uuids {
		if _, ret := w.lib.DeviceGetHandleByUUID(u); ret != nvml.SUCCESS {
			w.gone[u] = "device disappeared: " + ret.Error()
		} else {
			delete(w.gone, u)
		}
		if !w.report(u) {
			return false
		}
	}
	return true
}

// report sends u's state if it changed; false when stopped.
func (w *Watcher) report(u string) bool {
	ev := HealthEvent{UUID: u, Healthy: true, Reason: "device answers again"}
	if r, ok := w.xid[u]; ok {
		ev = HealthEvent{UUID: u, Reason: r}
	} else if r, ok := w.gone[u]; ok {
		ev = HealthEvent{UUID: u, Reason: r}
	}
	if w.healthy[u] == ev.Healthy {
		return true
	}
	w.healthy[u] = ev.Healthy
	select {
	case w.events <- ev:
		return true
	case <-w.stop:
		return false
	}
}
