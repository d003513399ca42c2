package scheduler

import (
	"fmt"
	"strings"

	"github.com/megaflow/megaflow/internal/resources"
)

// reason explains why t, unplaced, waits. It reads the state at the end of
// the round, which is at least as full as when t was considered (resources
// only shrink within a round), so the explanation still holds. Reasons that
// depend only on t's shape and exemptions are memoized.
func (r *round) reason(t *ptask, memo map[memoKey]Reason) Reason {
	if why, ok := r.refused[t.idx]; ok {
		return Reason{Kind: ReasonLimit, Message: why}
	}
	tenant := tenantName(t.t.Tenant)
	q := r.quotas[t.t.Tenant]
	d := taskDemand(t)
	if m := quotaNever(&r.cluster, "the cluster", "limit", d); m != "" {
		return Reason{Kind: ReasonInfeasible, Message: m}
	}
	if q != nil {
		if m := quotaNever(q, tenant, "quota", d); m != "" {
			return Reason{Kind: ReasonInfeasible, Message: m}
		}
	}
	if w := r.pinWait[t.idx]; w != nil {
		if m := quotaNow(&r.cluster, "the cluster", "limit", d); m != "" {
			return Reason{Kind: ReasonQuota, Message: m}
		}
		if q != nil {
			if m := quotaNow(q, tenant, "quota", d); m != "" {
				return Reason{Kind: ReasonQuota, Message: m}
			}
		}
		return pinReason(t, w)
	}
	_, mask := r.exemptions(t)
	key := memoKey{t.fit, mask}
	fr, ok := memo[key]
	if !ok {
		fr = r.fitReason(t)
		memo[key] = fr
	}
	if fr.Kind == ReasonInfeasible {
		return fr
	}
	if m := quotaNow(&r.cluster, "the cluster", "limit", d); m != "" {
		return Reason{Kind: ReasonQuota, Message: m}
	}
	if q != nil {
		if m := quotaNow(q, tenant, "quota", d); m != "" {
			return Reason{Kind: ReasonQuota, Message: m}
		}
	}
	if !r.considered[t.idx] {
		return r.deferred()
	}
	if w := r.own[t.idx]; w != nil {
		fr.Message += "; holding worker " + w.id + " for it"
	}
	return fr
}

// deferred is the reason of a task the round did not reach.
func (r *round) deferred() Reason {
	return Reason{Kind: ReasonDeferred, Message: fmt.Sprintf("not considered: the round stopped at its cap of %d placements",
		r.in.Policy.MaxPlacements)}
}

// tenantName names a tenant in reasons: "tenant team-a", or `tenant ""`.
func tenantName(tenant string) string {
	if tenant == "" {
		return `tenant ""`
	}
	return "tenant " + tenant
}

// census counts, in one pass over the workers, what fitReason needs.
type census struct {
	sel      int   // workers matching the node selector
	mostGPUs int64 // the most matching GPUs on one of those
	gpu      int   // those with enough matching GPUs
	maxCPU   int64 // the largest capacities among those
	maxMem   int64
	cpuOK    bool // one of those has the CPU
	memOK    bool // one of those has the memory
	ever     int  // those that could run the task if idle
	first    *worker

	// Why each of the ever workers has no room now.
	fits, capped, held, full, gpuShort int
	firstHeld                          *worker
	starts                             int  // starts in flight of the first capped worker
	startsDiffer                       bool // capped workers differ in starts in flight
}

func (r *round) census(t *ptask) census {
	var c census
	for _, w := range r.workers {
		if !w.selects(t) {
			continue
		}
		c.sel++
		if t.gpus > 0 {
			total, _ := w.gpuCounts(t)
			c.mostGPUs = max(c.mostGPUs, total)
			if total < t.gpus {
				continue
			}
		}
		c.gpu++
		c.maxCPU, c.maxMem = max(c.maxCPU, w.capCPU), max(c.maxMem, w.capMem)
		cpu, mem := t.cpu <= 0 || t.cpu <= w.capCPU, t.mem <= 0 || t.mem <= w.capMem
		c.cpuOK, c.memOK = c.cpuOK || cpu, c.memOK || mem
		if !cpu || !mem {
			continue
		}
		c.ever++
		if c.first == nil {
			c.first = w
		}
		switch {
		case w.roomFor(t, true) && w.startOK():
			c.fits++
		case w.roomFor(t, true):
			if c.capped == 0 {
				c.starts = w.starts
			} else if w.starts != c.starts {
				c.startsDiffer = true
			}
			c.capped++
		case w.roomFor(t, false):
			if c.held == 0 {
				c.firstHeld = w
			}
			c.held++
		default:
			c.full++
			if _, free := w.gpuCounts(t); free < t.gpus {
				c.gpuShort++
			}
		}
	}
	return c
}

// fitReason explains why t fits no worker at the end of the round: either
// no worker could ever run it (Infeasible), or those that could are busy.
func (r *round) fitReason(t *ptask) Reason {
	infeasible := func(format string, args ...any) Reason {
		return Reason{Kind: ReasonInfeasible, Message: fmt.Sprintf(format, args...)}
	}
	if len(r.workers) == 0 {
		return infeasible("there are no workers")
	}
	c := r.census(t)
	if c.sel == 0 {
		if len(t.sel) == 1 && t.sel[0].k == RuntimeLabel { // the task's runtime alone, in the user's words
			rt := t.sel[0].v
			return infeasible("no worker runs the %s runtime (the task asks for runtime: %s; a worker's is its --runtime)", rt, rt)
		}
		return infeasible("no worker matches node selector %s", formatSelector(t.sel))
	}
	// The task's runtime is a pseudo label (RuntimeLabel): named in the
	// user's words, apart from the labels they wrote.
	subject := "worker"
	var user []kv
	runtime := ""
	for _, s := range t.sel {
		if s.k == RuntimeLabel {
			runtime = s.v
		} else {
			user = append(user, s)
		}
	}
	if runtime != "" {
		subject += " running the " + runtime + " runtime"
	}
	if len(user) > 0 {
		if runtime != "" {
			subject += " and"
		}
		subject += " matching node selector " + formatSelector(user)
	}
	if t.gpus > 0 {
		gpus := formatGPUs(t, t.gpus, "")
		switch {
		case c.gpu == 0 && c.mostGPUs == 0:
			return infeasible("no %s has %s (none has any)", subject, gpus)
		case c.gpu == 0:
			return infeasible("no %s has %s (the most any has is %d)", subject, gpus, c.mostGPUs)
		}
		subject += " with " + gpus
	}
	switch {
	case !c.cpuOK:
		return infeasible("no %s has %s (the largest has %s)", subject, resources.FormatCPU(t.cpu), resources.FormatCPU(c.maxCPU))
	case !c.memOK:
		return infeasible("no %s has %s of memory (the largest has %s)", subject, resources.FormatBytes(t.mem),
			resources.FormatBytes(c.maxMem))
	case c.ever == 0:
		return infeasible("no %s has both %s and %s of memory", subject, resources.FormatCPU(t.cpu),
			resources.FormatBytes(t.mem))
	}
	return busyReason(t, &c)
}

// busyReason explains why t fits none of the workers that could run it.
func busyReason(t *ptask, c *census) Reason {
	n := c.ever
	// all says something about every worker that could run t.
	all := func(what string) string {
		switch n {
		case 1:
			return fmt.Sprintf("the only worker that fits (%s) is %s", c.first.id, what)
		case 2:
			return "both workers that fit are " + what
		}
		return fmt.Sprintf("all %d workers that fit are %s", n, what)
	}
	capacity := func(msg string) Reason { return Reason{Kind: ReasonCapacity, Message: msg} }
	switch {
	case c.fits > 0:
		// Not reached for a task the round considered: it would have been
		// placed. Kept so that a bug shows as a clear message.
		return capacity("a worker fits but the round did not place the task")
	case c.capped == n && c.startsDiffer:
		return Reason{Kind: ReasonStartLimit, Message: "start rate limit: every fitting worker is at its cap of container starts in flight"}
	case c.capped == n:
		return Reason{Kind: ReasonStartLimit, Message: fmt.Sprintf("start rate limit: every fitting worker has %d container %s in flight",
			c.starts, plural(int64(c.starts), "start", "starts"))}
	case c.gpuShort == n && n == 1:
		return capacity(fmt.Sprintf("no worker has %s (the only worker that fits, %s, is using them)",
			formatGPUs(t, t.gpus, "free"), c.first.id))
	case c.gpuShort == n:
		return capacity(fmt.Sprintf("no worker has %s (%s)", formatGPUs(t, t.gpus, "free"), all("using them")))
	case c.full == n:
		return capacity(all("full") + " (cluster at capacity)")
	case c.held == n && n == 1:
		return capacity(all("held for " + heldBy(c.firstHeld, t) + " (head of line)"))
	case c.held == n:
		return capacity(all("full or held for tasks ahead of it (head of line)"))
	}
	var parts []string
	if c.full > 0 {
		parts = append(parts, fmt.Sprintf("%d full", c.full))
	}
	if c.held == 1 {
		parts = append(parts, "1 held for "+heldBy(c.firstHeld, t))
	} else if c.held > 1 {
		parts = append(parts, fmt.Sprintf("%d held for tasks ahead of it", c.held))
	}
	if c.capped > 0 {
		parts = append(parts, fmt.Sprintf("%d at the container start limit", c.capped))
	}
	return capacity(all("busy") + " (cluster at capacity): " + strings.Join(parts, ", "))
}

// heldBy names the first task holding w against t.
func heldBy(w *worker, t *ptask) string {
	for _, h := range w.holders {
		if !exempt(t, h) {
			return h.t.ID
		}
	}
	return "another task"
}

// quotaNever explains why d alone exceeds q (a task's request, or a
// gang's total), or returns "".
func quotaNever(q *Quota, who, noun string, d demand) string {
	if d.n > 1 && q.MaxRunning > 0 && d.n > q.MaxRunning {
		return fmt.Sprintf("%s has %d tasks, more than %s's %s of %d running %s", d.subject, d.n, who, noun, q.MaxRunning,
			plural(int64(q.MaxRunning), "task", "tasks"))
	}
	check := func(dim string, req, limit int64, format func(int64) string) string {
		if limit > 0 && req > limit {
			return fmt.Sprintf("%s asks for %s, more than %s's %s %s of %s", d.subject, format(req), who, dim, noun, format(limit))
		}
		return ""
	}
	gpus := func(n int64) string { return resources.FormatGPUs(n, "") }
	return firstNonEmpty(
		check("CPU", d.cpu, q.Max.CPUMillis, resources.FormatCPU),
		check("memory", d.mem, q.Max.MemoryBytes, resources.FormatBytes),
		check("GPU", d.gpus, q.Max.GPUs, gpus))
}

// quotaNow explains why q has no room for d now, or returns "".
func quotaNow(q *Quota, who, noun string, d demand) string {
	if q.MaxRunning > 0 && q.Running+d.n > q.MaxRunning {
		m := fmt.Sprintf("%s is at its %s of %d running %s", who, noun, q.MaxRunning, plural(int64(q.MaxRunning), "task", "tasks"))
		if d.n > 1 {
			m += fmt.Sprintf(" (%d running; %s has %d tasks)", q.Running, d.subject, d.n)
		}
		return m
	}
	check := func(dim string, used, req, limit int64, format func(int64) string) string {
		if over(used+req, limit, req) {
			return fmt.Sprintf("%s is at its %s %s (%s of %s in use; %s asks for %s)", who, dim, noun,
				format(used), format(limit), d.subject, format(req))
		}
		return ""
	}
	gpus := func(n int64) string { return resources.FormatGPUs(n, "") }
	return firstNonEmpty(
		check("CPU", q.Used.CPUMillis, d.cpu, q.Max.CPUMillis, resources.FormatCPU),
		check("memory", q.Used.MemoryBytes, d.mem, q.Max.MemoryBytes, resources.FormatBytes),
		check("GPU", q.Used.GPUs, d.gpus, q.Max.GPUs, gpus))
}

// formatGPUs writes n GPUs as t asks for them, with an optional adjective:
// "2 free H100 GPUs with at least 80 GiB each".
func formatGPUs(t *ptask, n int64, adj string) string {
	s := resources.FormatGPUs(n, strings.TrimSpace(adj+" "+t.t.GPUModel))
	if t.gpuMem > 0 {
		s += " with at least " + resources.FormatBytes(t.gpuMem)
		if n > 1 {
			s += " each"
		}
	}
	return s
}

func formatSelector(sel []kv) string {
	parts := make([]string, len(sel))
	for i, s := range sel {
		parts[i] = s.k + "=" + s.v
	}
	return strings.Join(parts, ",")
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
