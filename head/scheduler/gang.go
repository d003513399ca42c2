package scheduler

import (
	"cmp"
	"fmt"
	"slices"
)

// gang is the members of one gang among the round's tasks: tasks of one
// graph with the same Task.Gang (see the package documentation, Gangs).
type gang struct {
	name    string   // Task.Gang
	members []*ptask // in task id order
	tried   bool     // the pass reached its first member in round order
}

// newGangs returns each task's gang by task index (nil for a task in
// none), or nil when no task is in a gang.
func newGangs(ts []ptask) []*gang {
	var (
		of    []*gang
		list  []*gang
		byKey = map[string]*gang{}
	)
	for i := range ts {
		t := &ts[i]
		if t.t.Gang == "" {
			continue
		}
		if of == nil {
			of = make([]*gang, len(ts))
		}
		k := GraphOf(t.t.ID) + "\x00" + t.t.Gang
		g := byKey[k]
		if g == nil {
			g = &gang{name: t.t.Gang}
			byKey[k] = g
			list = append(list, g)
		}
		g.members = append(g.members, t)
		of[i] = g
	}
	for _, g := range list {
		slices.SortFunc(g.members, func(a, b *ptask) int { return cmp.Compare(a.t.ID, b.t.ID) })
	}
	return of
}

// gangOf returns the gang of task index i, or nil.
func (r *round) gangOf(i int) *gang {
	if r.gangs == nil {
		return nil
	}
	return r.gangs[i]
}

// subject names g in reasons: `gang "train"`.
func (g *gang) subject() string { return fmt.Sprintf("gang %q", g.name) }

// demand returns what the members of g ask of a quota: all of them, or
// with one tenant only those of that tenant (members of one graph share
// a tenant, but nothing here relies on it).
func (g *gang) demand(all bool, tenant string) demand {
	d := demand{subject: g.subject()}
	for _, t := range g.members {
		if all || t.t.Tenant == tenant {
			d.add(t)
		}
	}
	return d
}

// tenants returns the tenants of g's members, sorted.
func (g *gang) tenants() []string {
	var out []string
	for _, t := range g.members {
		if !slices.Contains(out, t.t.Tenant) {
			out = append(out, t.t.Tenant)
		}
	}
	slices.Sort(out)
	return out
}

// placeGang tries to place g whole; run calls it when the round reaches
// g's first member. It reports whether it placed g. It sets r.stopped,
// considering no member, when the round's placement cap was reached
// before g (a gang may overshoot the cap: see Policy.MaxPlacements).
//
// Members go to distinct workers, so checking each against the current
// state of the workers is valid for the whole gang: no member's placement
// changes the room another sees.
func (r *round) placeGang(g *gang, f finder) bool {
	g.tried = true
	if limit := r.in.Policy.MaxPlacements; limit > 0 && len(r.plan.Placements) >= limit {
		r.stopped = true
		return false
	}
	for _, t := range g.members {
		r.considered[t.idx] = true
	}
	if !r.admitGang(g) {
		return false
	}
	ws, n := matchGang(g.members, r.workers, (*worker).fitsNow, r.in.Policy.ImageLocalityBonus)
	if n < len(g.members) {
		return false
	}
	for k, t := range g.members {
		r.place(t, ws[k])
		f.changed(ws[k])
	}
	r.gangPlaced = true
	return true
}

// admitGang runs the admission checks for g: the Admit hook for each
// member in task id order (stopping at the first refusal), then the
// cluster limit and each tenant's quota for the gang's total, counting
// what this round already placed.
func (r *round) admitGang(g *gang) bool {
	for _, t := range g.members {
		if !r.admit(t) {
			return false
		}
	}
	if quotaFull(&r.cluster, g.demand(true, "")) {
		return false
	}
	for _, tenant := range g.tenants() {
		if q := r.quotas[tenant]; q != nil && quotaFull(q, g.demand(false, tenant)) {
			return false
		}
	}
	return true
}

// matchGang gives members distinct workers of ws on which fits holds, as
// many members as it can, and returns each member's worker (nil for none)
// and how many have one. Each member in turn takes the best of its
// workers (see better) that no earlier member took. A member whose
// workers are all taken moves earlier members to other workers of theirs
// along an augmenting path (Kuhn's algorithm), so the count is the most
// members that can have workers of their own, and the choice is the greedy
// one whenever that succeeds. Gangs are rare and small: it rates every
// worker for every member.
func matchGang(members []*ptask, ws []*worker, fits func(*worker, *ptask) bool, bonus int64) ([]*worker, int) {
	cands := make([][]*worker, len(members))
	for k, t := range members {
		var cs []choice
		for _, w := range ws {
			if fits(w, t) {
				cs = append(cs, rate(w, t, t.image != "" && w.images[t.image], bonus))
			}
		}
		slices.SortFunc(cs, func(a, b choice) int {
			switch {
			case better(a, b):
				return -1
			case better(b, a):
				return 1
			}
			return 0
		})
		for _, c := range cs {
			cands[k] = append(cands[k], c.w)
		}
	}
	owner := map[*worker]int{} // worker -> the member it is given to
	got := make([]*worker, len(members))
	var assign func(k int, seen map[*worker]bool) bool
	assign = func(k int, seen map[*worker]bool) bool {
		for _, w := range cands[k] {
			if _, taken := owner[w]; !taken {
				owner[w], got[k] = k, w
				return true
			}
		}
		for _, w := range cands[k] {
			if seen[w] {
				continue
			}
			seen[w] = true
			if assign(owner[w], seen) {
				owner[w], got[k] = k, w
				return true
			}
		}
		return false
	}
	n := 0
	for k := range members {
		if assign(k, map[*worker]bool{}) {
			n++
		}
	}
	return got, n
}

// gangReason explains why g, unplaced, waits; every member gets it. Like
// reason, it reads the state at the end of the round, which is at least as
// full as when g was tried.
func (r *round) gangReason(g *gang) Reason {
	name, size := g.subject(), len(g.members)
	why := func(kind ReasonKind, format string, args ...any) Reason {
		return Reason{Kind: kind, Message: fmt.Sprintf(format, args...)}
	}
	for _, t := range g.members {
		if m, ok := r.refused[t.idx]; ok {
			return why(ReasonLimit, "%s: task %q: %s", name, t.t.ID, m)
		}
	}
	total := g.demand(true, "")
	if m := quotaNever(&r.cluster, "the cluster", "limit", total); m != "" {
		return why(ReasonInfeasible, "%s", m)
	}
	tenants := g.tenants()
	for _, tenant := range tenants {
		if q := r.quotas[tenant]; q != nil {
			if m := quotaNever(q, tenantName(tenant), "quota", g.demand(false, tenant)); m != "" {
				return why(ReasonInfeasible, "%s", m)
			}
		}
	}
	for _, t := range g.members {
		if fr := r.fitReason(t); fr.Kind == ReasonInfeasible {
			return why(ReasonInfeasible, "%s: task %q: %s", name, t.t.ID, fr.Message)
		}
	}
	bonus := r.in.Policy.ImageLocalityBonus
	if _, n := matchGang(g.members, r.workers, (*worker).everFits, bonus); n < size {
		return why(ReasonInfeasible, "%s needs %d workers that can run its tasks, one each; %d can", name, size, n)
	}
	if m := quotaNow(&r.cluster, "the cluster", "limit", total); m != "" {
		return why(ReasonQuota, "%s", m)
	}
	for _, tenant := range tenants {
		if q := r.quotas[tenant]; q != nil {
			if m := quotaNow(q, tenantName(tenant), "quota", g.demand(false, tenant)); m != "" {
				return why(ReasonQuota, "%s", m)
			}
		}
	}
	if !r.considered[g.members[0].idx] {
		return r.deferred()
	}
	const rule = "a gang starts all at once, one task per worker, or not at all"
	_, now := matchGang(g.members, r.workers, (*worker).fitsNow, bonus)
	if now == size {
		// Not reached for a gang the round tried: it would have been
		// placed. Kept so that a bug shows as a clear message.
		return why(ReasonCapacity, "%s: every task has a worker but the round did not place the gang", name)
	}
	roomy := func(w *worker, t *ptask) bool { return w.selects(t) && w.roomFor(t, true) }
	if _, room := matchGang(g.members, r.workers, roomy, bonus); room == size {
		return why(ReasonStartLimit, "%s: start rate limit: %d of its %d tasks %s a worker with room and a container start slot now; %s",
			name, now, size, plural(int64(now), "has", "have"), rule)
	}
	return why(ReasonCapacity, "%s: %d of its %d tasks %s a worker with room now; %s", name, now, size,
		plural(int64(now), "has", "have"), rule)
}
