package head

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/gossip"
	"github.com/megaflow/megaflow/internal/obs"
	"github.com/megaflow/megaflow/internal/resources"
	"github.com/megaflow/megaflow/internal/wire"
)

// Metric families a head exports on /metrics (docs/observability.md lists
// them with their meaning). Gauges derived from the task table are computed
// at scrape time from an immutable View (tableCollector), never kept by the
// FSM; histograms and counters of task stages are observed from the
// committed event stream (stageObserver); the rest is counted where it
// happens on this head.

// headMetrics holds the head's own instruments, registered in its registry
// by newHeadMetrics.
type headMetrics struct {
	// applySeconds: propose to applied on this head, per command (leader).
	applySeconds prometheus.Histogram
	// rateLimited counts API calls refused by the per-tenant rate limit.
	rateLimited *prometheus.CounterVec
	// stageSeconds: time an attempt spent in each stage, from leader
	// timestamps in the log (stageObserver).
	stageSeconds *prometheus.HistogramVec
	// attempts counts attempts that ended, by outcome and reason class.
	attempts *prometheus.CounterVec
	// eventsMissed counts events the stage observer could not read because
	// the event ring had moved past them.
	eventsMissed prometheus.Counter
	// admissionRefusals counts graphs this head (the leader) refused for
	// its admission policy, by field (network, capabilities).
	admissionRefusals *prometheus.CounterVec
	// aclRefusals counts calls refused for their token, by method and
	// reason (acl.Reason*).
	aclRefusals *prometheus.CounterVec
	// aclEnabled is 1 when the head authorizes calls by token, else 0.
	aclEnabled prometheus.Gauge
}

// latencyBuckets are the histogram buckets of stage latencies, in seconds:
// 1 ms to about 1.1 h, doubling; fine enough to read a P99 start-up of
// 30 s (the paper's target) on either side.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 23)

func newHeadMetrics(reg *obs.Registry, h *Head) *headMetrics {
	m := &headMetrics{
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: obs.Namespace, Subsystem: "raft", Name: "apply_duration_seconds",
			Help:    "Time from proposing a command to Raft to its being applied on this head (leader only), in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: obs.Namespace, Name: "api_rate_limited_total",
			Help: "Client API calls refused by this head's per-tenant rate limit (--rate-limit), by tenant.",
		}, []string{"tenant"}),
		stageSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: obs.Namespace, Name: "attempt_stage_duration_seconds",
			Help: "Time attempts spent in each stage, from the leader's timestamps in the Raft log: " +
				"queued (QUEUED to ASSIGNED), starting (ASSIGNED to RUNNING: image, container create and start on the worker), " +
				"running (RUNNING to the attempt's end). Every head observes every attempt once; aggregate heads with max, not sum.",
			Buckets: latencyBuckets,
		}, []string{"stage", "queue"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: obs.Namespace, Name: "attempts_ended_total",
			Help: "Attempts that ended, by outcome (succeeded, failed, timed_out, cancelled, lost) and reason class; " +
				"observed from the Raft log like attempt_stage_duration_seconds.",
		}, []string{"outcome", "reason_class"}),
		eventsMissed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: obs.Namespace, Name: "metrics_events_missed_total",
			Help: "Task events the stage metrics skipped because this head's event ring (--event-retention) had dropped them.",
		}),
		admissionRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: obs.Namespace, Name: "admission_refusals_total",
			Help: "Graphs and sandboxes the leader refused because a task asked for more than its tenant's admission policy allows, by field (network, capabilities).",
		}, []string{"field"}),
		aclRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: obs.Namespace, Name: "acl_refusals_total",
			Help: "Calls this head refused for their API token (--acl), by method and reason (no_token, unknown_token, expired, role, tenant, stale, no_rule).",
		}, []string{"method", "reason"}),
		aclEnabled: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: obs.Namespace, Name: "acl_enabled",
			Help: "1 when this head authorizes every call by API token (--acl); 0 when any caller may make any call.",
		}),
	}
	if h.cfg.ACL {
		m.aclEnabled.Set(1)
	}
	reg.MustRegister(m.applySeconds, m.rateLimited, m.stageSeconds, m.attempts, m.eventsMissed, m.admissionRefusals,
		m.aclRefusals, m.aclEnabled, &tableCollector{h: h})
	return m
}

// Descriptions of the gauges the tableCollector computes at scrape time.
var (
	descTasks = prometheus.NewDesc("megaflow_tasks", "Tasks in the table by state and type (queue).",
		[]string{"state", "type"}, nil)
	descQueueDepth = prometheus.NewDesc("megaflow_queue_depth", "QUEUED tasks waiting for placement, per queue (task type; \"default\" for none).",
		[]string{"queue"}, nil)
	descQueueOldest = prometheus.NewDesc("megaflow_queue_oldest_wait_seconds", "How long the oldest QUEUED task of each queue has waited, in seconds (0: empty).",
		[]string{"queue"}, nil)
	descGraphs  = prometheus.NewDesc("megaflow_graphs", "Graphs in the table by state.", []string{"state"}, nil)
	descWorkers = prometheus.NewDesc("megaflow_workers", "Workers the table knows, by status (alive, down, left).",
		[]string{"status"}, nil)
	descWorkerCPUCap   = prometheus.NewDesc("megaflow_worker_cpu_capacity_cores", "CPU an ALIVE worker offers, in cores.", []string{"worker"}, nil)
	descWorkerCPUAlloc = prometheus.NewDesc("megaflow_worker_cpu_allocated_cores", "CPU the active attempts on an ALIVE worker ask for, in cores.", []string{"worker"}, nil)
	descWorkerMemCap   = prometheus.NewDesc("megaflow_worker_memory_capacity_bytes", "Memory an ALIVE worker offers, in bytes.", []string{"worker"}, nil)
	descWorkerMemAlloc = prometheus.NewDesc("megaflow_worker_memory_allocated_bytes", "Memory the active attempts on an ALIVE worker ask for, in bytes.", []string{"worker"}, nil)
	descWorkerGPUCap   = prometheus.NewDesc("megaflow_worker_gpus", "GPUs an ALIVE worker offers.", []string{"worker"}, nil)
	descWorkerGPUAlloc = prometheus.NewDesc("megaflow_worker_gpus_allocated", "GPUs held by the active attempts on an ALIVE worker.", []string{"worker"}, nil)
	descWorkerAttempts = prometheus.NewDesc("megaflow_worker_active_attempts", "Attempts ASSIGNED or RUNNING on an ALIVE worker.", []string{"worker"}, nil)
	descFragmentation  = prometheus.NewDesc("megaflow_cluster_fragmentation_ratio",
		"Share of the free resource (cpu, memory) of ALIVE workers that cannot hold one more of the smallest queued (else running) task: "+
			"stranded capacity, after Weng et al. ATC'23; the MegaFlow paper targets < 0.10. 0 when there is no such task.",
		[]string{"resource"}, nil)
	descQuotaUsed  = prometheus.NewDesc("megaflow_tenant_usage", "What a tenant's ASSIGNED and RUNNING tasks ask for, by resource (tasks, cpu_cores, memory_bytes, gpus).", []string{"tenant", "resource"}, nil)
	descQuotaLimit = prometheus.NewDesc("megaflow_tenant_quota_limit", "A tenant's quota by resource (tasks, cpu_cores, memory_bytes, gpus); tenant \"\" is the cluster limit; absent: no limit.", []string{"tenant", "resource"}, nil)

	descRaftLeader      = prometheus.NewDesc("megaflow_raft_leader", "1 if this head is the Raft leader, else 0.", nil, nil)
	descRaftHasLeader   = prometheus.NewDesc("megaflow_raft_has_leader", "1 if this head knows a Raft leader (itself or another), else 0.", nil, nil)
	descRaftTerm        = prometheus.NewDesc("megaflow_raft_term", "Current Raft term of this head.", nil, nil)
	descRaftCommit      = prometheus.NewDesc("megaflow_raft_commit_index", "Highest Raft log index this head knows to be committed.", nil, nil)
	descRaftApplied     = prometheus.NewDesc("megaflow_raft_applied_index", "Last Raft log index applied to this head's task table.", nil, nil)
	descRaftLastLog     = prometheus.NewDesc("megaflow_raft_last_log_index", "Last index in this head's Raft log.", nil, nil)
	descRaftSnapshot    = prometheus.NewDesc("megaflow_raft_last_snapshot_index", "Raft log index covered by this head's latest snapshot (changes() counts snapshots).", nil, nil)
	descRaftLastContact = prometheus.NewDesc("megaflow_raft_last_contact_seconds", "Seconds since this follower last heard from the leader (0 on the leader, -1 never).", nil, nil)
	descGossipMembers   = prometheus.NewDesc("megaflow_gossip_members", "Gossip pool members as this head sees them, by role and status.", []string{"role", "status"}, nil)
	descStreams         = prometheus.NewDesc("megaflow_worker_streams", "Workers with a live stream to this head (the leader; 0 elsewhere).", nil, nil)
)

// tableCollector computes the table-derived gauges at scrape time from one
// immutable View, with the Raft and gossip state of its head. Prometheus'
// registry calls Collect from the scraping goroutine; it reads only
// immutable views and thread-safe getters. Cost: one pass over the tasks
// (O(tasks)), a few microseconds per thousand tasks.
type tableCollector struct{ h *Head }

// Describe sends every descriptor the collector may emit.
func (c *tableCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTasks, descQueueDepth, descQueueOldest, descGraphs, descWorkers,
		descWorkerCPUCap, descWorkerCPUAlloc, descWorkerMemCap, descWorkerMemAlloc, descWorkerGPUCap, descWorkerGPUAlloc,
		descWorkerAttempts, descFragmentation, descQuotaUsed, descQuotaLimit, descRaftLeader, descRaftHasLeader, descRaftTerm,
		descRaftCommit, descRaftApplied, descRaftLastLog, descRaftSnapshot, descRaftLastContact, descGossipMembers, descStreams} {
		ch <- d
	}
}

// queueName is the queue label of a task type: "default" for none.
func queueName(t string) string {
	if t == "" {
		return "default"
	}
	return t
}

// Collect computes every gauge from the head's current view.
func (c *tableCollector) Collect(ch chan<- prometheus.Metric) {
	h := c.h
	view := h.fsm.View()
	now := h.clock.Now()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}

	// Tasks by state and type; queue depth and oldest wait; the reference
	// request for fragmentation.
	type key struct {
		state wire.TaskState
		queue string
	}
	counts := map[key]int{}
	queues := map[string]bool{"default": true}
	oldest := map[string]int64{}
	var refQueued, refActive resources.Resources
	var hasQueued, hasActive bool
	for t := range view.Tasks() {
		q := queueName(t.Queue())
		queues[q] = true
		counts[key{t.State, q}]++
		req := state.ResourcesOf(t.Spec.GetResources())
		switch t.State {
		case wire.TaskState_TASK_STATE_QUEUED:
			if o, ok := oldest[q]; !ok || t.QueuedUnixNanos < o {
				oldest[q] = t.QueuedUnixNanos
			}
			if !hasQueued || smallerRequest(req, refQueued) {
				refQueued, hasQueued = req, true
			}
		case wire.TaskState_TASK_STATE_ASSIGNED, wire.TaskState_TASK_STATE_RUNNING:
			if !hasActive || smallerRequest(req, refActive) {
				refActive, hasActive = req, true
			}
		}
	}
	for k, n := range counts {
		gauge(descTasks, float64(n), stateName(k.state), k.queue)
	}
	for q := range queues {
		gauge(descQueueDepth, float64(counts[key{wire.TaskState_TASK_STATE_QUEUED, q}]), q)
		wait := 0.0
		if o, ok := oldest[q]; ok && o > 0 {
			wait = max(0, now.Sub(time.Unix(0, o)).Seconds())
		}
		gauge(descQueueOldest, wait, q)
	}

	graphs := map[string]int{}
	for g := range view.Graphs() {
		graphs[graphStateName(g.State)]++
	}
	for s, n := range graphs {
		gauge(descGraphs, float64(n), s)
	}

	// Workers: status counts, capacity and allocation, fragmentation.
	statuses := map[string]int{"alive": 0, "down": 0, "left": 0}
	var free []resources.Resources
	for _, w := range view.Workers() {
		statuses[workerStatusName(w.Status)]++
		if !w.Alive() {
			continue
		}
		id, capa := w.ID(), w.Capacity()
		gauge(descWorkerCPUCap, float64(capa.CPUMillis)/1000, id)
		gauge(descWorkerCPUAlloc, float64(w.Allocated.CPUMillis)/1000, id)
		gauge(descWorkerMemCap, float64(capa.MemoryBytes), id)
		gauge(descWorkerMemAlloc, float64(w.Allocated.MemoryBytes), id)
		gauge(descWorkerGPUCap, float64(capa.GPUs), id)
		gauge(descWorkerGPUAlloc, float64(w.Allocated.GPUs), id)
		gauge(descWorkerAttempts, float64(w.ActiveAttempts), id)
		free = append(free, w.Free())
	}
	for s, n := range statuses {
		gauge(descWorkers, float64(n), s)
	}
	ref, hasRef := refQueued, hasQueued
	if !hasRef {
		ref, hasRef = refActive, hasActive
	}
	frag := ComputeFragmentation(free, ref, hasRef)
	gauge(descFragmentation, frag.CPU, "cpu")
	gauge(descFragmentation, frag.Memory, "memory")

	// Quotas and usage per tenant.
	usage, _ := view.Usage()
	for _, tenant := range state.SortedTenants(usage) {
		u := usage[tenant]
		gauge(descQuotaUsed, float64(u.Running), tenant, "tasks")
		gauge(descQuotaUsed, float64(u.Used.CPUMillis)/1000, tenant, "cpu_cores")
		gauge(descQuotaUsed, float64(u.Used.MemoryBytes), tenant, "memory_bytes")
		gauge(descQuotaUsed, float64(u.Used.GPUs), tenant, "gpus")
	}
	for _, q := range view.QuotaRows() {
		for _, l := range []struct {
			res string
			v   float64
		}{{"tasks", float64(q.MaxRunning)}, {"cpu_cores", float64(q.Max.CPUMillis) / 1000},
			{"memory_bytes", float64(q.Max.MemoryBytes)}, {"gpus", float64(q.Max.GPUs)}} {
			if l.v > 0 {
				gauge(descQuotaLimit, l.v, q.Tenant, l.res)
			}
		}
	}

	// Raft.
	st := h.node.Stats()
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge(descRaftLeader, b2f(st.State == "Leader"))
	gauge(descRaftHasLeader, b2f(st.LeaderID != ""))
	gauge(descRaftTerm, float64(st.Term))
	gauge(descRaftCommit, float64(st.CommitIndex))
	gauge(descRaftApplied, float64(h.fsm.AppliedIndex()))
	gauge(descRaftLastLog, float64(st.LastLogIndex))
	gauge(descRaftSnapshot, float64(st.LastSnapshotIndex))
	contact := -1.0
	if st.State == "Leader" {
		contact = 0
	} else if lc := h.node.Raft().LastContact(); !lc.IsZero() {
		contact = time.Since(lc).Seconds() // Raft's time, not the head's clock
	}
	gauge(descRaftLastContact, contact)

	// Gossip and worker streams.
	members := map[[2]string]int{}
	for _, role := range []string{string(gossip.RoleHead), string(gossip.RoleWorker)} {
		for _, s := range []string{"alive", "dead", "left"} {
			members[[2]string{role, s}] = 0
		}
	}
	for _, m := range h.gossip.Members() {
		role := string(m.Meta.Role)
		if role == "" {
			role = "unknown"
		}
		members[[2]string{role, m.Status.String()}]++
	}
	for k, n := range members {
		gauge(descGossipMembers, float64(n), k[0], k[1])
	}
	gauge(descStreams, float64(h.sessions.count()))
}

// stateName is the lower-case label of a task state ("queued").
func stateName(s wire.TaskState) string { return lowerSuffix(s.String(), "TASK_STATE_") }

// graphStateName is the lower-case label of a graph state.
func graphStateName(s wire.GraphState) string { return lowerSuffix(s.String(), "GRAPH_STATE_") }

// workerStatusName is the lower-case label of a worker status.
func workerStatusName(s wire.WorkerStatus) string { return lowerSuffix(s.String(), "WORKER_STATUS_") }

func lowerSuffix(s, prefix string) string {
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		s = s[len(prefix):]
	}
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// count returns how many workers have a live stream.
func (ss *sessions) count() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.live)
}

// ready is the head's /readyz check: it knows a Raft leader and has
// applied every entry that leader has committed as far as this head has
// heard (waiting up to a second for its table to catch up, so a head under
// steady load stays ready). On a follower that is the highest commit index
// a leader has sent it since it started (consensus Stats.LeaderCommitIndex),
// not Raft's own commit index: that one is 0 after a restart until the
// leader's first AppendEntries with entries arrives, and capped at the last
// entry received while the follower catches up, so a restarted follower
// that had only heard a heartbeat looked ready. The leader is ready once
// its leadership barrier is applied (every entry of earlier terms). The
// error says which condition fails.
func (h *Head) ready() error {
	st := h.node.Stats()
	if st.LeaderID == "" {
		return fmt.Errorf("head %s knows no Raft leader (state %s, term %d): election in progress or no quorum", h.cfg.NodeID, st.State, st.Term)
	}
	target := st.CommitIndex
	if st.LeaderID == h.cfg.NodeID {
		if !h.leaderReady.Load() {
			return fmt.Errorf("head %s is the Raft leader (term %d) and is still applying the entries of earlier terms (its leadership barrier)", h.cfg.NodeID, st.Term)
		}
	} else {
		if st.LeaderCommitIndex == 0 {
			return fmt.Errorf("head %s has not yet heard the commit index from the leader %s since it started (applied index %d): still catching up", h.cfg.NodeID, st.LeaderID, h.fsm.AppliedIndex())
		}
		target = max(target, st.LeaderCommitIndex)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := h.fsm.WaitForIndex(ctx, target); err != nil {
		return fmt.Errorf("head %s has applied index %d, behind the commit index %d the leader %s sent it: still catching up", h.cfg.NodeID, h.fsm.AppliedIndex(), target, st.LeaderID)
	}
	return nil
}

// Ready reports whether the head is ready to serve, as /readyz does: nil
// when it knows a leader and has applied what that leader committed as far
// as it has heard, else an error saying which condition fails. It may wait
// up to a second for the table to catch up. Any goroutine may call it.
func (h *Head) Ready() error { return h.ready() }
