package spec

import "slices"

// MaxGangSize is the most tasks one gang may hold: a gang takes one worker
// per task, all at once.
const MaxGangSize = 256

// checkGangs checks the gangs of the graph: at most MaxGangSize tasks each,
// and no task of a gang depending, directly or through other tasks, on
// another task of its gang (the gang could never be all QUEUED at once).
// It runs after checkCycles, so the dependencies form a DAG. Per gang, one
// breadth-first walk from all its tasks along depends_on visits each task
// at most once: a walk that reaches a task of the gang has found a task
// that waits for another. Gangs are checked in order of their first task.
func (v *validator) checkGangs() error {
	var names []string
	members := map[string][]int{}
	for i, t := range v.g.Tasks {
		if g := t.GetGang(); g != "" {
			if members[g] == nil {
				names = append(names, g)
			}
			members[g] = append(members[g], i)
		}
	}
	if len(names) == 0 {
		return nil
	}
	n := len(v.g.Tasks)
	origin := make([]int32, n) // 1 + the gang task whose walk reached the task; 0: not reached
	var queue []int
	for _, g := range names {
		ms := members[g]
		if len(ms) > MaxGangSize {
			return v.taskErr(ms[0], "gang", "gang %q holds %d tasks; the limit is %d (one worker each, all at once)", g, len(ms), MaxGangSize)
		}
		in := make(map[int]bool, len(ms))
		queue = queue[:0]
		for _, m := range ms {
			in[m] = true
			origin[m] = int32(m) + 1
			queue = append(queue, m)
		}
		visited := slices.Clone(queue)
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			for _, d := range v.depIdx[v.depOff[u]:v.depOff[u+1]] {
				if in[d] {
					from := int(origin[u]) - 1
					return v.taskErr(from, "gang", "%q: the task depends, directly or through other tasks, on %s of its own gang; a gang's tasks start all at once, so none may wait for another",
						g, v.taskRef(d))
				}
				if origin[d] == 0 {
					origin[d] = origin[u]
					visited = append(visited, d)
					queue = append(queue, d)
				}
			}
		}
		for _, u := range visited {
			origin[u] = 0
		}
	}
	return nil
}
