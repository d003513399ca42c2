// Package lease holds the pure decisions of worker leases: when the head
// may re-queue a worker's attempts, when a worker must stop its own, what
// expiry it writes for its tasks' init (megaflow-init), and how it tells a
// freeze (SIGSTOP, a stalled VM) from a slow tick. Nothing here reads a
// clock: every function takes now. The head (head/liveness.go), the worker
// (worker/lease.go) and the init (internal/leaseinit) import it.
//
// The rule the lease makes true: a task has at most one running attempt,
// except while a worker process is frozen. Its parts, for a lease L and a
// margin M (Config):
//
//   - the worker renews its lease with every heartbeat; the head answers
//     each one (LeaseAck). The worker counts a renewal from when it SENT
//     the heartbeat that was acked, the head from when it RECEIVED any
//     message: the worker's view therefore always expires first;
//   - the worker stops its attempts once L has passed since its last acked
//     renewal (WorkerHolder.Expired), and writes sent+L+InitSlack(M) to its
//     lease file, so that a task's init kills the task tree when the worker
//     process is gone or frozen;
//   - the head re-queues the worker's attempts only once L+M has passed
//     since it last heard from the worker (HeadExpired).
package lease

import (
	"fmt"
	"time"
)

// Config is the lease of every worker of a cluster; the head owns it and
// tells each worker its Duration in the Welcome and every LeaseAck.
type Config struct {
	// Duration is how long a renewal keeps a worker's lease: the worker
	// stops its attempts when it has had no renewal acked for this long.
	// Default 10 s.
	Duration time.Duration
	// Margin is how much longer the head waits after Duration before it
	// re-queues the attempts of a worker it has not heard from: the time the
	// worker and its tasks' inits have to stop them. Default 5 s.
	Margin time.Duration
}

// DefaultConfig returns the default lease: 10 s, margin 5 s.
func DefaultConfig() Config { return Config{Duration: 10 * time.Second, Margin: 5 * time.Second} }

// Validate checks that Duration is at least 1 s and Margin at least 200 ms
// and at most Duration (the flags --worker-lease and --worker-lease-margin).
func (c Config) Validate() error {
	if c.Duration < time.Second {
		return fmt.Errorf("--worker-lease %v is below 1s", c.Duration)
	}
	if c.Margin < 200*time.Millisecond || c.Margin > c.Duration {
		return fmt.Errorf("--worker-lease-margin %v is outside [200ms, --worker-lease %v]", c.Margin, c.Duration)
	}
	return nil
}

// HeadExpired reports whether the head may declare a worker down and
// re-queue its attempts: Duration+Margin have passed since renewed, the
// last time the head heard from the worker (any message on its stream or a
// lease renewal through gossip), or since this head became leader when
// that is later (a new leader does not know its predecessor's renewals and
// gives every worker a full lease).
func HeadExpired(c Config, renewed, leaderSince, now time.Time) bool {
	if leaderSince.After(renewed) {
		renewed = leaderSince
	}
	return now.Sub(renewed) >= c.Duration+c.Margin
}

// HeadExpiresIn returns how long until HeadExpired turns true (0 or less:
// it is true), for status pages and the CLI.
func HeadExpiresIn(c Config, renewed, leaderSince, now time.Time) time.Duration {
	if leaderSince.After(renewed) {
		renewed = leaderSince
	}
	return renewed.Add(c.Duration + c.Margin).Sub(now)
}

// InitSlack is how long after the worker's own expiry its tasks' inits
// kill them: half the margin, so that a worker that stops its attempts at
// its expiry does so first (its attempts end STOPPED, not killed), and
// the inits are done, SIGKILL included (InitGrace), before the head
// re-queues at Duration+Margin.
func InitSlack(margin time.Duration) time.Duration { return margin / 2 }

// InitGrace is how long an init waits between SIGTERM and SIGKILL when
// its lease lapsed: a quarter of the margin.
func InitGrace(margin time.Duration) time.Duration { return margin / 4 }

// Frozen reports whether the gap between two ticks of a loop that ticks
// every interval means the process was frozen (SIGSTOP, a paused VM): a
// gap over interval plus a second. The monotonic clock keeps running
// while a process is stopped, so a frozen worker sees the jump first
// thing when it resumes.
func Frozen(prevTick, now time.Time, interval time.Duration) bool {
	return now.Sub(prevTick) > interval+time.Second
}
