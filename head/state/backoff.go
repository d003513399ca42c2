package state

// RetryBackoff says how long a task sent back to QUEUED by a failed
// attempt waits before it may be placed again (Task.NotBeforeUnixNanos),
// and a service task before it restarts. The FSM builds one per event of a
// TaskEventsCommand:
//
//   - under rules 0, Fixed: the wait the leader computed and carried in the
//     command (retry_backoff_nanos), used as is;
//   - from rules 1, Base, Max and Draw: the FSM computes the wait itself from
//     the task's own count at apply time (Wait), so the leader no longer
//     guesses which events will become retries.
//
// All in integer nanoseconds: every head, whatever its CPU, computes the
// same wait (floating point could differ where a compiler fuses
// multiply-adds).
type RetryBackoff struct {
	// Fixed is the wait in nanoseconds when Base is 0; <= 0: none.
	Fixed int64
	// Base is the first retry's nominal wait in nanoseconds, doubled for
	// each retry already used; <= 0: no wait at all.
	Base int64
	// Max caps the nominal wait, in nanoseconds (<= 0: Base).
	Max int64
	// Draw picks the jitter: the wait is spread uniformly over
	// [nominal-20%, nominal+20%) by Draw modulo the spread.
	Draw uint64
}

// retryJitterDivisor sets the jitter: ±nominal/5, i.e. ±20%.
const retryJitterDivisor = 5

// Wait returns the wait in nanoseconds before retry number n+1 (n retries
// or restarts already used): Fixed when Base is 0, else Base·2^n capped at
// Max, then jittered by ±20% with Draw. Never negative.
func (b RetryBackoff) Wait(n uint32) int64 {
	if b.Base <= 0 {
		return max(b.Fixed, 0)
	}
	maxWait := b.Max
	if maxWait <= 0 {
		maxWait = b.Base
	}
	nominal := b.Base
	for range min(n, 62) {
		if nominal > maxWait/2 { // doubling reaches the cap (and never overflows)
			nominal = maxWait
			break
		}
		nominal *= 2
	}
	nominal = min(nominal, maxWait)
	spread := 2 * (nominal / retryJitterDivisor)
	if spread <= 0 {
		return nominal
	}
	return nominal - nominal/retryJitterDivisor + int64(b.Draw%uint64(spread))
}
