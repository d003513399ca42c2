package worker

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/megaflow/megaflow/internal/wire"
)

// GPUHealthEvent says that one of the worker's GPUs changed health; it
// mirrors gpu.HealthEvent, so that the worker does not link NVML.
type GPUHealthEvent struct {
	// UUID is the device.
	UUID string
	// Healthy is its new state.
	Healthy bool
	// Reason says why, e.g. "XID 79 critical error".
	Reason string
}

// gpuHealthLoop applies the GPU health changes from ch until ctx ends or
// ch is closed: it records them (the leader gets the full set of unhealthy
// GPUs in the next message of the stream, before any later event) and
// stops the attempts holding a GPU that became unhealthy. Run starts it
// when Config.GPUHealth is set.
func (w *Worker) gpuHealthLoop(ctx context.Context, ch <-chan GPUHealthEvent) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-ch:
			if !ok {
				return
			}
			w.applyGPUHealth(ev)
		}
	}
}

func (w *Worker) applyGPUHealth(ev GPUHealthEvent) {
	w.advMu.Lock()
	before := w.adv.unhealthy[ev.UUID]
	if ev.Healthy {
		delete(w.adv.unhealthy, ev.UUID)
	} else {
		if w.adv.unhealthy == nil {
			w.adv.unhealthy = map[string]string{}
		}
		reason := ev.Reason
		if reason == "" {
			reason = "unhealthy"
		}
		w.adv.unhealthy[ev.UUID] = reason
	}
	changed := before != w.adv.unhealthy[ev.UUID]
	if changed {
		w.adv.healthDirty = true
	}
	w.advMu.Unlock()
	if !changed {
		return
	}
	w.log.Warn("GPU health changed", "gpu", ev.UUID, "healthy", ev.Healthy, "reason", ev.Reason)
	select {
	case w.gpuPoke <- struct{}{}:
	default:
	}
	if ev.Healthy {
		return
	}
	// Stop the attempts on the device; the head loses them (the report goes
	// first) and retries them on healthy devices.
	w.mu.Lock()
	var stop []*handle
	for _, h := range w.attempts {
		if slices.Contains(h.gpus, ev.UUID) {
			stop = append(stop, h)
		}
	}
	w.mu.Unlock()
	for _, h := range stop {
		w.stopAttempt(&wire.StopAttempt{TaskId: h.key.TaskID, Attempt: h.key.Attempt,
			Reason: fmt.Sprintf("GPU %s unhealthy: %s", ev.UUID, ev.Reason)})
	}
}

// takeGPUHealth returns the report to send: the full set of unhealthy GPUs
// when it changed since the last call, or when all is set and some GPU is
// unhealthy (after a Welcome); else nil. The stream goroutine calls it.
func (w *Worker) takeGPUHealth(all bool) *wire.GpuHealthReport {
	w.advMu.Lock()
	defer w.advMu.Unlock()
	if !w.adv.healthDirty && !(all && len(w.adv.unhealthy) > 0) {
		return nil
	}
	w.adv.healthDirty = false
	return &wire.GpuHealthReport{Unhealthy: maps.Clone(w.adv.unhealthy)}
}
