package spec

import (
	"fmt"
	"slices"
	"strings"
)

// maxCycleShown is how many tasks of a long cycle a message shows.
const maxCycleShown = 16

// checkCycles reports a dependency cycle, or returns nil. It runs after every
// task passed its checks, so every dependency is resolved in depOff/depIdx.
// Kahn's algorithm removes tasks whose dependencies are all removed; what
// remains holds a cycle, found by walking from the first remaining task to
// its first remaining dependency until a task repeats. O(V+E) time and
// memory, no recursion.
func (v *validator) checkCycles() error {
	n := len(v.g.Tasks)
	// waiting[i]: dependencies of i not yet removed.
	waiting := make([]int32, n)
	// Reverse edges (dependents) in CSR form.
	revOff := make([]int, n+1)
	for i := range n {
		waiting[i] = int32(v.depOff[i+1] - v.depOff[i])
		for _, j := range v.depIdx[v.depOff[i]:v.depOff[i+1]] {
			revOff[j+1]++
		}
	}
	for i := range n {
		revOff[i+1] += revOff[i]
	}
	revIdx := make([]int32, len(v.depIdx))
	fill := slices.Clone(revOff[:n])
	for i := range n {
		for _, j := range v.depIdx[v.depOff[i]:v.depOff[i+1]] {
			revIdx[fill[j]] = int32(i)
			fill[j]++
		}
	}

	queue := make([]int32, 0, n)
	for i := range n {
		if waiting[i] == 0 {
			queue = append(queue, int32(i))
		}
	}
	for head := 0; head < len(queue); head++ {
		u := queue[head]
		for _, w := range revIdx[revOff[u]:revOff[u+1]] {
			waiting[w]--
			if waiting[w] == 0 {
				queue = append(queue, w)
			}
		}
	}
	if len(queue) == n {
		return nil
	}

	// Every remaining task has a remaining dependency: walk until a repeat.
	pos := make(map[int]int)
	var path []int
	u := slices.IndexFunc(waiting, func(w int32) bool { return w > 0 })
	for {
		if _, ok := pos[u]; ok {
			break
		}
		pos[u] = len(path)
		path = append(path, u)
		for _, j := range v.depIdx[v.depOff[u]:v.depOff[u+1]] {
			if waiting[j] > 0 {
				u = j
				break
			}
		}
	}
	cycle := path[pos[u]:]
	// Start at the task that comes first in the graph, for a stable message.
	first := slices.Index(cycle, slices.Min(cycle))
	cycle = append(slices.Clone(cycle[first:]), cycle[:first]...)
	return v.taskErr(cycle[0], "depends_on", "cycle: %s; each arrow reads \"depends on\"; remove one of these dependencies", v.renderCycle(cycle))
}

// renderCycle writes a cycle as "a -> b -> c -> a", eliding the middle of
// long ones.
func (v *validator) renderCycle(cycle []int) string {
	var b strings.Builder
	for k, i := range cycle {
		if len(cycle) > maxCycleShown && k >= maxCycleShown-1 && k < len(cycle)-1 {
			if k == maxCycleShown-1 {
				fmt.Fprintf(&b, "... (%d more) -> ", len(cycle)-maxCycleShown)
			}
			continue
		}
		b.WriteString(v.g.Tasks[i].Name)
		b.WriteString(" -> ")
	}
	b.WriteString(v.g.Tasks[cycle[0]].Name)
	return b.String()
}

// maxListedTasks is how many other tasks an unknown-dependency message lists
// in full; beyond that it suggests the nearest name.
const maxListedTasks = 8

// suggest completes the message about task i's unknown dependency d: the
// other tasks' names in a small graph, else the nearest name within two
// edits.
func (v *validator) suggest(i int, d string) string {
	tasks := v.g.Tasks
	if len(tasks)-1 <= maxListedTasks {
		var names []string
		for j, t := range tasks {
			if j != i && v.index[t.GetName()] == j {
				names = append(names, fmt.Sprintf("%q", t.GetName()))
			}
		}
		if len(names) == 0 {
			return "(the graph has no other task)"
		}
		slices.Sort(names)
		return "(tasks are: " + strings.Join(names, ", ") + ")"
	}
	const maxEdits = 2
	best, bestDist := -1, maxEdits+1
	var scratch [2][]int
	for j, t := range tasks {
		if j == i || t == nil || v.index[t.Name] != j {
			continue
		}
		if dist := editDistance(d, t.Name, bestDist-1, &scratch); dist < bestDist {
			best, bestDist = j, dist
		}
		if bestDist == 1 {
			break
		}
	}
	if best >= 0 {
		return fmt.Sprintf("(did you mean %q? the graph has %d tasks)", tasks[best].Name, len(tasks))
	}
	return fmt.Sprintf("(none of the graph's %d tasks has that name)", len(tasks))
}

// editDistance returns the Levenshtein distance between a and b when it is at
// most k, else k+1. It fills only a band of 2k+1 diagonals, so it costs
// O(k*len(a)). scratch holds reusable rows.
func editDistance(a, b string, k int, scratch *[2][]int) int {
	la, lb := len(a), len(b)
	if la-lb > k || lb-la > k {
		return k + 1
	}
	inf := k + 1
	for r := range scratch {
		if cap(scratch[r]) < lb+1 {
			scratch[r] = make([]int, lb+1)
		}
		scratch[r] = scratch[r][:lb+1]
	}
	prev, cur := scratch[0], scratch[1]
	for j := range prev {
		prev[j] = min(j, inf)
	}
	for i := 1; i <= la; i++ {
		lo, hi := max(1, i-k), min(lb, i+k)
		cur[0] = min(i, inf)
		if lo > 1 {
			cur[lo-1] = inf
		}
		rowMin := cur[0]
		if lo > 1 {
			rowMin = inf
		}
		for j := lo; j <= hi; j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			c := min(prev[j-1]+cost, prev[j]+1, cur[j-1]+1, inf)
			cur[j] = c
			rowMin = min(rowMin, c)
		}
		if hi < lb {
			cur[hi+1] = inf
		}
		if rowMin >= inf {
			return inf
		}
		prev, cur = cur, prev
	}
	return prev[lb]
}
