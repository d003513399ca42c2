package head

import (
	"crypto/rand"
	"encoding/binary"
	"math"
	"time"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/wire"
)

// retryJitter is the spread of a retry backoff around its nominal value:
// ±20%.
const retryJitter = 0.2

// retryBackoff is the wait before retry number retriesUsed+1 of a task:
// base doubled retriesUsed times, at most maxWait, scaled by 1 + jitter
// with u (uniform in [0, 1)) choosing the jitter in [-20%, +20%). It is
// pure; the leader draws u.
func retryBackoff(base, maxWait time.Duration, retriesUsed uint32, u float64) time.Duration {
	if base <= 0 {
		return 0
	}
	d := float64(base) * math.Pow(2, float64(min(retriesUsed, 62)))
	d = min(d, float64(maxWait))
	return time.Duration(d * (1 + retryJitter*(2*u-1)))
}

// uniform returns a number uniform in [0, 1) from crypto/rand.
func uniform() float64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return float64(binary.LittleEndian.Uint64(b[:])>>11) / (1 << 53)
}

// rules0Backoffs is the leader's guess of each event's retry backoff, for a
// cluster still at rules 0 (a rolling upgrade from a build before rules
// versions, or a cluster whose voters have not all advertised rules 1 yet):
// its heads apply the waits carried in the command
// (TaskEventsCommand.retry_backoff_nanos) and ignore the seed. From rules 1
// the FSM computes each wait itself (head/state.RetryBackoff) and this is
// not called. It chooses, for each event of a worker's batch, the backoff
// its task waits should the event fail its attempt with retries left
// (TaskEventsCommand.retry_backoff_nanos), or the wait before a service
// task restarts (grown by its restarts, head/state/service.go); 0 for
// events that cannot; nil when no event can. base and maxWait are
// head.Config.RetryBackoff and RetryBackoffMax; draw returns a number
// uniform in [0, 1) for each backoff's jitter (uniform on the leader, a
// fixed sequence in tests).
func rules0Backoffs(view *state.View, events []*wire.AttemptEvent, base, maxWait time.Duration, draw func() float64) []int64 {
	out := make([]int64, len(events))
	some := false
	for i, ev := range events {
		var t *state.Task
		switch ev.GetKind() {
		case wire.AttemptEventKind_ATTEMPT_EVENT_KIND_FAILED, wire.AttemptEventKind_ATTEMPT_EVENT_KIND_TIMED_OUT:
		case wire.AttemptEventKind_ATTEMPT_EVENT_KIND_EXITED:
			// A service task may restart after exiting 0 (restart policy
			// "always").
			if ev.GetExitCode() == 0 {
				if t = view.Task(ev.GetTaskId()); t == nil || t.ServiceName() == "" {
					continue
				}
			}
		default:
			continue
		}
		if t == nil {
			t = view.Task(ev.GetTaskId())
		}
		if t == nil {
			continue
		}
		n := t.RetriesUsed
		if t.ServiceName() != "" && t.Spec.GetService().GetRestartPolicy() != "never" {
			n = t.Restarts // service restarts back off by their own count
		}
		out[i] = int64(retryBackoff(base, maxWait, n, draw()))
		some = some || out[i] > 0
	}
	if !some {
		return nil
	}
	return out
}
