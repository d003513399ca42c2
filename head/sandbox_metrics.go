package head

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/obs"
	"github.com/megaflow/megaflow/internal/wire"
)

// sandboxMetrics are the sandbox series a head exports on /metrics
// (docs/observability.md, docs/sandboxes.md): sandboxes by state, computed
// at scrape time from the table (sandboxCollector), and what this head
// relays on the data path (exec latency, exec failures, file bytes),
// counted where it happens. The relay's instruments are safe for
// concurrent use by the gRPC handlers that update them.
type sandboxMetrics struct {
	// execSeconds: an exec's round trip as the relaying head sees it, from
	// the request to the exit sent back, execs that ended with an exit only.
	execSeconds prometheus.Histogram
	// execFailures counts execs that ended without an exit, or timed out,
	// by reason (failureReason).
	execFailures *prometheus.CounterVec
	// fileBytes counts file bytes relayed, by direction (write, read).
	fileBytes *prometheus.CounterVec
}

// execLatencyBuckets are the exec round trip's buckets, in seconds: 250 µs
// to about 4 minutes, doubling; an exec of `true` takes milliseconds.
var execLatencyBuckets = prometheus.ExponentialBuckets(0.00025, 2, 21)

// newSandboxMetrics registers the sandbox series of head h in reg. The
// head's constructor calls it once.
func newSandboxMetrics(reg *obs.Registry, h *Head) *sandboxMetrics {
	m := &sandboxMetrics{
		execSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: obs.Namespace, Subsystem: "sandbox", Name: "exec_duration_seconds",
			Help: "Round trip of the sandbox execs this head relayed, from the request to the exit it sent back " +
				"(the command's own run time included), in seconds; execs that failed are counted by sandbox_exec_failures_total instead.",
			Buckets: execLatencyBuckets,
		}),
		execFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: obs.Namespace, Subsystem: "sandbox", Name: "exec_failures_total",
			Help: "Sandbox execs this head relayed that ended without an exit, or were killed at their timeout, by reason: " +
				"exec_timeout, the errs reason in lower case (sandbox_not_found, sandbox_not_ready, sandbox_closed, sandbox_expired, " +
				"sandbox_lost, sandbox_failed, worker_unreachable, runtime_unavailable), else the error class (invalid_argument, " +
				"resource_exhausted, cancelled, unavailable, ...).",
		}, []string{"reason"}),
		fileBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: obs.Namespace, Subsystem: "sandbox", Name: "file_bytes_total",
			Help: "File bytes this head relayed to (write) or from (read) sandboxes: WriteFile, ReadFile and directory copies.",
		}, []string{"direction"}),
	}
	reg.MustRegister(m.execSeconds, m.execFailures, m.fileBytes, &sandboxCollector{h: h})
	// Every reason a dashboard would plot exists from the start at 0.
	for _, r := range []string{"exec_timeout", "worker_unreachable", "sandbox_not_ready", "sandbox_lost"} {
		m.execFailures.WithLabelValues(r)
	}
	m.fileBytes.WithLabelValues("write")
	m.fileBytes.WithLabelValues("read")
	return m
}

// execDone records one exec relayed in took: its latency when it ended
// with exit x, else a failure by err's reason; a timed-out exit counts both.
func (m *sandboxMetrics) execDone(took time.Duration, x *wire.SandboxExecExit, err error) {
	if m == nil {
		return
	}
	if err != nil || x == nil {
		m.execFailures.WithLabelValues(failureReason(err)).Inc()
		return
	}
	m.execSeconds.Observe(took.Seconds())
	if x.GetTimedOut() {
		m.execFailures.WithLabelValues("exec_timeout").Inc()
	}
}

// addFileBytes counts n file bytes relayed in direction ("write", "read").
func (m *sandboxMetrics) addFileBytes(direction string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.fileBytes.WithLabelValues(direction).Add(float64(n))
}

// failureReason is the reason label of an exec's failure: the errs reason
// in lower case when it has one, else its class ("cancelled" for a caller
// gone, "stream_ended" for a stream with no exit and no error). The label's
// values are a small fixed set: reasons and classes are constants.
func failureReason(err error) string {
	if err == nil {
		return "stream_ended"
	}
	err = errs.FromStatus(err)
	if r := errs.ReasonOf(err); r != "" {
		return strings.ToLower(r)
	}
	switch {
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	}
	return strings.ReplaceAll(errs.ClassOf(err).String(), " ", "_")
}

// descSandboxes is the gauge of sandboxes by state.
var descSandboxes = prometheus.NewDesc("megaflow_sandboxes",
	"Sandboxes in this head's table by state (pending, starting, ready: live; closed, expired, lost, failed: ended and not yet removed by retention).",
	[]string{"state"}, nil)

// sandboxCollector computes megaflow_sandboxes at scrape time from one
// immutable View, in one pass over the tasks (a sandbox is a task whose
// spec has a sandbox). Every state is exported, 0 included.
type sandboxCollector struct{ h *Head }

// Describe sends the collector's one descriptor.
func (c *sandboxCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descSandboxes }

// Collect counts the sandboxes of the head's current view by state.
func (c *sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[wire.SandboxState]int{}
	for t := range c.h.fsm.View().Tasks() {
		if t.Spec.GetSandbox() != nil {
			counts[sandboxStateOf(t)]++
		}
	}
	for v := range wire.SandboxState_name {
		s := wire.SandboxState(v)
		if s == wire.SandboxState_SANDBOX_STATE_UNSPECIFIED {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descSandboxes, prometheus.GaugeValue, float64(counts[s]), lowerSuffix(s.String(), "SANDBOX_STATE_"))
	}
}
