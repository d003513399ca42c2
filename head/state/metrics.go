package state

import (
	"encoding/json"
	"math"

	"github.com/megaflow/megaflow/internal/wire"
)

// MetricLabel is the graph label naming the top-level numeric field of the
// tasks' JSON results that a graph's metrics aggregate; without it,
// DefaultMetric.
const MetricLabel = "megaflow.io/metric"

// DefaultMetric is the result field aggregated when a graph names none.
const DefaultMetric = "reward"

// HistogramBuckets is the number of fixed histogram buckets: below 0, the
// ten tenths of [0, 1), and 1 and above.
const HistogramBuckets = 12

// GraphMetrics aggregates a graph's task results. The FSM keeps it
// incrementally (Txn.move calls observe for every task move), so it costs
// nothing to read and is the same on every head: values are parsed with
// encoding/json into float64 and summed in commit order.
type GraphMetrics struct {
	// Finished counts tasks that ended SUCCEEDED, FAILED or TIMED_OUT;
	// Succeeded those that SUCCEEDED.
	Finished, Succeeded uint32
	// Count, Sum, Min and Max summarize the numeric values of the metric
	// field in the succeeded tasks' results.
	Count         uint32
	Sum, Min, Max float64
	// Histogram counts the values by bucket (BucketOf).
	Histogram [HistogramBuckets]uint32
	// FirstStartUnixNanos is the earliest attempt start, LastFinishUnixNanos
	// the latest time a task ended; 0 until one did.
	FirstStartUnixNanos, LastFinishUnixNanos int64
}

// BucketOf returns the histogram bucket of v: 0 below 0, 1 + the tenth of
// [0, 1) it falls in, 11 at 1 and above.
func BucketOf(v float64) int {
	switch {
	case v < 0:
		return 0
	case v >= 1:
		return HistogramBuckets - 1
	}
	return 1 + min(int(v*10), 9)
}

// MetricValue returns the top-level field of a JSON object result as a
// number, and false if the result is not an object, lacks the field, or
// the field is not a finite number.
func MetricValue(result []byte, field string) (float64, bool) {
	if len(result) == 0 {
		return 0, false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(result, &obj) != nil {
		return 0, false
	}
	raw, ok := obj[field]
	if !ok || len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, false // absent, or not a number (null decodes into nothing)
	}
	var v float64
	if json.Unmarshal(raw, &v) != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, false
	}
	return v, true
}

// metricField is the result field g aggregates.
func (g *Graph) metricField() string {
	if f := g.Labels[MetricLabel]; f != "" {
		return f
	}
	return DefaultMetric
}

// observe updates the metrics of g, a private copy in a Txn, for task n
// having moved from state from to n.State at nanos.
func (m *GraphMetrics) observe(g *Graph, from wire.TaskState, n *Task, nanos int64) {
	if n.State == running && from != running {
		if a := n.CurrentAttempt(); a != nil && a.StartUnixNanos != 0 &&
			(m.FirstStartUnixNanos == 0 || a.StartUnixNanos < m.FirstStartUnixNanos) {
			m.FirstStartUnixNanos = a.StartUnixNanos
		}
	}
	if !IsTerminal(n.State) || IsTerminal(from) {
		return
	}
	m.LastFinishUnixNanos = max(m.LastFinishUnixNanos, nanos)
	switch n.State {
	case succeeded:
		m.Finished++
		m.Succeeded++
		if v, ok := MetricValue(n.Result, g.metricField()); ok {
			if m.Count == 0 || v < m.Min {
				m.Min = v
			}
			if m.Count == 0 || v > m.Max {
				m.Max = v
			}
			m.Count++
			m.Sum += v
			m.Histogram[BucketOf(v)]++
		}
	case failed, timedOut:
		m.Finished++
	}
}

// toWire converts the metrics of g into their wire form.
func (m *GraphMetrics) toWire(g *Graph) *wire.GraphMetrics {
	w := &wire.GraphMetrics{Field: g.metricField(), Finished: m.Finished, Succeeded: m.Succeeded, Count: m.Count,
		Sum: m.Sum, Min: m.Min, Max: m.Max,
		FirstStartUnixNanos: m.FirstStartUnixNanos, LastFinishUnixNanos: m.LastFinishUnixNanos}
	w.Histogram = append([]uint32(nil), m.Histogram[:]...)
	if m.Finished > 0 {
		w.SuccessRate = float64(m.Succeeded) / float64(m.Finished)
	}
	if m.Count > 0 {
		w.Mean = m.Sum / float64(m.Count)
	}
	if m.FirstStartUnixNanos != 0 && m.LastFinishUnixNanos > m.FirstStartUnixNanos {
		w.WallMillis = (m.LastFinishUnixNanos - m.FirstStartUnixNanos) / 1e6
	}
	return w
}

// metricsFromWire converts the wire form back (snapshots).
func metricsFromWire(w *wire.GraphMetrics) GraphMetrics {
	m := GraphMetrics{Finished: w.GetFinished(), Succeeded: w.GetSucceeded(), Count: w.GetCount(), Sum: w.GetSum(),
		Min: w.GetMin(), Max: w.GetMax(), FirstStartUnixNanos: w.GetFirstStartUnixNanos(), LastFinishUnixNanos: w.GetLastFinishUnixNanos()}
	copy(m.Histogram[:], w.GetHistogram())
	return m
}
