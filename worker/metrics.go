package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/megaflow/megaflow/internal/obs"
)

// workerMetrics are the instruments a worker exports on /metrics. What the
// table knows about a worker (capacity, allocation, attempts by state) is
// exported by the heads; a worker exports what only it sees: how long its
// container starts take and why they fail, orphans it reaped, whether it is
// connected, the artifact upload backlog, and (on GPU machines) per-device
// utilization through Config.Collectors.
type workerMetrics struct {
	startSeconds  *prometheus.HistogramVec
	startSlotWait prometheus.Histogram
	startFailures *prometheus.CounterVec
	orphans       prometheus.Counter
	// snapshotImages counts the snapshot images reconciliation removed.
	snapshotImages prometheus.Counter
	leaseLapses    prometheus.Counter
	streamStalls   prometheus.Counter
	backlog        prometheus.Gauge
	backlogBytes   prometheus.Gauge
	// sandboxCreates counts sandbox containers by source: "warm" (a
	// warm container claimed, warmbox.go) or "fresh".
	sandboxCreates *prometheus.CounterVec
}

func newWorkerMetrics(reg *obs.Registry, w *Worker) *workerMetrics {
	runtime := w.rt.Name()
	m := &workerMetrics{
		startSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: obs.Namespace, Subsystem: "worker", Name: "container_start_duration_seconds",
			Help: "Time the container runtime took to create and start an attempt's container (image pull included when the runtime pulls), " +
				"by runtime and result (ok, error), in seconds.",
			Buckets:     prometheus.ExponentialBuckets(0.001, 2, 22),
			ConstLabels: prometheus.Labels{"runtime": runtime},
		}, []string{"result"}),
		startSlotWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: obs.Namespace, Subsystem: "worker", Name: "start_slot_wait_seconds",
			Help:    "Time an attempt waited for one of the --max-concurrent-starts start slots, in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 22),
		}),
		startFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: obs.Namespace, Subsystem: "worker", Name: "container_start_failures_total",
			Help:        "Attempts whose container could not be created or started, by reason class (image, gpu, admission, timeout, runtime, other).",
			ConstLabels: prometheus.Labels{"runtime": runtime},
		}, []string{"reason_class"}),
		orphans: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: obs.Namespace, Subsystem: "worker", Name: "orphans_reaped_total",
			Help: "Containers of this worker that no attempt held (leaked or left by a crash) and that reconciliation removed.",
		}),
		snapshotImages: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: obs.Namespace, Subsystem: "worker", Name: "snapshot_images_reaped_total",
			Help: "Sandbox snapshot images of this worker that no snapshot of the table named (a record that never committed, a removal that failed) and that reconciliation removed.",
		}),
		leaseLapses: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: obs.Namespace, Subsystem: "worker", Name: "lease_lapses_total",
			Help: "Times this worker's lease lapsed (no heartbeat acked by the leader within the lease) and it stopped every attempt it held.",
		}),
		streamStalls: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: obs.Namespace, Subsystem: "worker", Name: "stream_stalls_total",
			Help: "Times this worker left its stream to a leader that answered no heartbeat for two intervals because another head named a new leader (the old leader's host cut off or frozen).",
		}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: obs.Namespace, Name: "artifact_upload_backlog",
			Help: "Artifacts waiting to be uploaded to the blob store from this worker (set by the artifact uploader).",
		}),
		backlogBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: obs.Namespace, Name: "artifact_upload_backlog_bytes",
			Help: "Bytes of the artifacts waiting to be uploaded from this worker.",
		}),
	}
	m.sandboxCreates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: obs.Namespace, Name: "sandbox_creates_total",
		Help: "Sandbox containers this worker provided, by source: warm (an idle warm container of the sandbox's pool key claimed) or fresh (a container started for it; forks included).",
	}, []string{"source"})
	for _, src := range []string{"warm", "fresh"} {
		m.sandboxCreates.WithLabelValues(src)
	}
	connected := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: obs.Namespace, Subsystem: "worker", Name: "connected",
		Help: "1 while the worker has a stream to the leader (after its Welcome), else 0.",
	}, func() float64 {
		if w.Leader() != "" {
			return 1
		}
		return 0
	})
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: obs.Namespace, Subsystem: "worker", Name: "attempts_held",
		Help: "Attempts this worker holds now: starting, running or stopping.",
	}, func() float64 {
		w.mu.Lock()
		defer w.mu.Unlock()
		return float64(len(w.attempts))
	})
	reg.MustRegister(m.startSeconds, m.startSlotWait, m.startFailures, m.orphans, m.snapshotImages, m.leaseLapses, m.streamStalls, m.backlog, m.backlogBytes, m.sandboxCreates, connected, held)
	return m
}

// SetArtifactBacklog records how many artifacts (and how many bytes) wait
// to be uploaded from this worker, for megaflow_artifact_upload_backlog and
// megaflow_artifact_upload_backlog_bytes. The artifact uploader calls it
// from any goroutine whenever its queue changes; negative values count as 0.
func (w *Worker) SetArtifactBacklog(uploads int, bytes int64) {
	w.metrics.backlog.Set(float64(max(uploads, 0)))
	w.metrics.backlogBytes.Set(float64(max(bytes, 0)))
}

// Registry returns the worker's metrics registry, for tests and embedding
// programs that serve metrics themselves.
func (w *Worker) Registry() *obs.Registry { return w.registry }

// HTTPAddr returns the address of the worker's HTTP listener (/metrics,
// /healthz, /readyz), or "" when it serves no HTTP.
func (w *Worker) HTTPAddr() string {
	if w.http == nil {
		return ""
	}
	return w.http.Addr()
}

// ready is the worker's /readyz check: connected to a leader.
func (w *Worker) ready() error {
	if w.Leader() == "" {
		return fmt.Errorf("worker %s has no stream to a leader yet (heads: join %v)", w.cfg.NodeID, w.cfg.Join)
	}
	return nil
}

// startFailureClass sorts a start error into the reason_class label of
// megaflow_worker_container_start_failures_total.
func startFailureClass(err error) string {
	s := strings.ToLower(err.Error())
	switch {
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(s, "deadline") || strings.Contains(s, "timeout"):
		return "timeout"
	case strings.Contains(s, "image"):
		return "image"
	case strings.Contains(s, "gpu"):
		return "gpu"
	case strings.Contains(s, "docker") || strings.Contains(s, "runtime") || strings.Contains(s, "container"):
		return "runtime"
	}
	return "other"
}
