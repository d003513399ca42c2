package scheduler

import (
	"cmp"
	"slices"
)

// order returns the indices of ts in the order the round considers them.
//
// Each queue is sorted by priority (highest first), then QueueSeq (lowest
// first), then id. Queues then take turns by weighted fair share: the next
// task comes from the queue with tasks left whose running tasks
// (running[queue], from the input) plus the tasks it has had turns for this
// round, divided by its weight, is lowest; the first by name on a tie. With
// nothing running, queues of weight 1 simply alternate, and a queue of
// weight 3 gets three turns for one of the others. Counting running tasks
// carries fairness across rounds: a queue that got the few free slots of
// the last round goes after the others in this one, so a flood of one type
// cannot starve another even when each round places only a few tasks.
func order(ts []ptask, pol Policy, running map[string]int) []int {
	byQueue := map[string][]int{}
	for i := range ts {
		q := ts[i].t.Queue
		byQueue[q] = append(byQueue[q], i)
	}
	type queue struct {
		tasks  []int
		weight int64
		served int64 // running tasks plus turns this round
	}
	names := sortedKeys(byQueue)
	qs := make([]*queue, len(names))
	for i, name := range names {
		tasks := byQueue[name]
		slices.SortFunc(tasks, func(a, b int) int {
			ta, tb := ts[a].t, ts[b].t
			return cmp.Or(cmp.Compare(tb.Priority, ta.Priority), cmp.Compare(ta.QueueSeq, tb.QueueSeq),
				cmp.Compare(ta.ID, tb.ID))
		})
		qs[i] = &queue{tasks: tasks, weight: int64(max(pol.queue(name).Weight, 1)), served: int64(max(running[name], 0))}
	}
	out := make([]int, 0, len(ts))
	for len(qs) > 0 {
		pick := qs[0]
		for _, q := range qs[1:] {
			// q.served/q.weight < pick.served/pick.weight, without division.
			if q.served*pick.weight < pick.served*q.weight {
				pick = q
			}
		}
		pick.served++
		out = append(out, pick.tasks[0])
		pick.tasks = pick.tasks[1:]
		if len(pick.tasks) == 0 {
			qs = slices.DeleteFunc(qs, func(q *queue) bool { return q == pick })
		}
	}
	return out
}
