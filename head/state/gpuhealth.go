package state

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// GPU health: a worker reports the set of its GPUs that are unhealthy (an
// NVML XID critical error, a device that disappeared). The table records
// the reason on the device (wire.GpuDevice.unhealthy), the scheduler and
// the plan verifier give an unhealthy device no new work, and the attempts
// holding one are lost, to be retried on healthy devices.

// SetGPUHealth marks worker id's GPUs named in unhealthy (UUID -> reason)
// unhealthy and every other of its GPUs healthy, then loses, in task id
// order, the active attempts holding an unhealthy GPU with the reason "GPU
// <uuid> unhealthy: <reason>". UUIDs the worker does not have are ignored.
// The FSM calls it for an OpGpuHealth. It returns how many of the worker's
// GPUs are unhealthy and what losing did, or a NotFound error for an
// unknown worker.
func (t *Txn) SetGPUHealth(id string, unhealthy map[string]string, unixNanos int64) (int, Losses, error) {
	cur := t.Worker(id)
	if cur == nil {
		return 0, Losses{}, errs.New(errs.NotFound, "worker %q not found", id)
	}
	info := proto.CloneOf(cur.Info)
	n, changed := 0, false
	for _, d := range info.GetGpus() {
		r := unhealthy[d.GetUuid()]
		if d.GetUnhealthy() != r {
			d.Unhealthy, changed = r, true
		}
		if r != "" {
			n++
		}
	}
	if changed {
		w := t.writableWorker(id)
		w.Info = info
		w.UpdateUnixNanos, w.ModifyIndex = unixNanos, t.index
	}
	var l Losses
	if n == 0 {
		return 0, l, nil
	}
	held := collect[*Task](get(t.taskTxn(), tableTasks, indexWorker, id))
	slices.SortFunc(held, func(a, b *Task) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	for _, task := range held {
		a := task.ActiveAttempt()
		if a == nil || a.WorkerID != id {
			continue
		}
		for _, u := range a.GPUUUIDs {
			if r := unhealthy[u]; r != "" {
				why := fmt.Sprintf("GPU %s unhealthy: %s", u, r)
				l.Add(t.lose(task, attemptEnd{state: failed, code: wire.ReasonCode_REASON_CODE_GPU_UNHEALTHY, reason: why}, unixNanos))
				break
			}
		}
	}
	return n, l, nil
}

// UnhealthyGPUs returns the worker's unhealthy GPUs, UUID -> reason (nil
// when all are healthy).
func (w *Worker) UnhealthyGPUs() map[string]string {
	var out map[string]string
	for _, d := range w.Info.GetGpus() {
		if r := d.GetUnhealthy(); r != "" {
			if out == nil {
				out = map[string]string{}
			}
			out[d.GetUuid()] = r
		}
	}
	return out
}
