package main

// The bookkeeping of `megaflow demo --mode sandbox` (demo_sandbox.go): the
// step's tasks, rollouts, sandboxes and execs, and its Summary.

import (
	"fmt"
	"sync"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/wire"
)

// stepTask is one task of a step run in sandbox mode (a rollout's setup,
// rollout or eval, named as in graph mode) as this process ran it.
type stepTask struct {
	name     string
	state    client.TaskState
	attempts int
	// start and finish are those of the last attempt; finish is zero
	// while it runs.
	start, finish time.Time
	// reason says why the last attempt failed ("" otherwise).
	reason string
	// reward is the eval's result (nil for other tasks, or before).
	reward *float64
}

// stepRollout is one rollout of the step: its instance, its sandbox and
// its tasks' indices in sandboxStep.tasks.
type stepRollout struct {
	instance string
	sandbox  string
	tasks    [3]int
	steps    int
}

// sandboxStep is the bookkeeping of a step run in sandbox mode: its tasks
// in graph order, its rollouts, their sandboxes and execs. Every method
// is safe for concurrent use: each rollout's goroutine reports its own
// tasks. Times come from the caller.
type sandboxStep struct {
	id string

	mu       sync.Mutex
	tasks    []stepTask
	rollouts []stepRollout
	// execSecs are the execs' times, request to exit.
	execSecs []float64
	// modelCalls, filesWritten, and the sandboxes created and closed.
	modelCalls, filesWritten, created, closed int
	closeErrors                               []string
	// ids are the sandboxes created, in order.
	ids []string
	// firstStart and lastFinish bound the step's wall time.
	firstStart, lastFinish time.Time
	// Set by finish: whether the step was interrupted, how many rollouts
	// ran at once, how many of its sandboxes were left live (or why that
	// is unknown).
	interrupted    bool
	parallel, left int
	leftUnknown    string
}

// newSandboxStep returns the bookkeeping of step id with plans' rollouts,
// every task PENDING.
func newSandboxStep(id string, plans []rolloutPlan) *sandboxStep {
	s := &sandboxStep{id: id}
	for _, rp := range plans {
		r := stepRollout{instance: rp.profile.Instance.ID}
		for i, t := range []*wire.TaskSpec{rp.setup, rp.rollout, rp.eval} {
			r.tasks[i] = len(s.tasks)
			s.tasks = append(s.tasks, stepTask{name: t.GetName(), state: client.TaskPending})
		}
		s.rollouts = append(s.rollouts, r)
	}
	return s
}

// begin starts a new attempt of task i at at.
func (s *sandboxStep) begin(i int, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &s.tasks[i]
	t.state, t.attempts, t.start, t.finish, t.reason = client.TaskRunning, t.attempts+1, at, time.Time{}, ""
	if s.firstStart.IsZero() || at.Before(s.firstStart) {
		s.firstStart = at
	}
}

// end ends task i's attempt at at in state (QUEUED: it will be retried).
func (s *sandboxStep) end(i int, state client.TaskState, reason string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &s.tasks[i]
	t.state, t.finish, t.reason = state, at, reason
	if at.After(s.lastFinish) {
		s.lastFinish = at
	}
}

// skip cancels task i, which will not run: an earlier task of its rollout
// did not succeed (graph mode cancels a failed task's dependents).
func (s *sandboxStep) skip(i int, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tasks[i].state == client.TaskPending {
		s.tasks[i].state, s.tasks[i].reason = client.TaskCancelled, reason
	}
}

// setReward records the eval task i's reward.
func (s *sandboxStep) setReward(i int, v float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tasks[i].reward = &v
}

// sandboxCreated records rollout r's sandbox.
func (s *sandboxStep) sandboxCreated(r int, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rollouts[r].sandbox = id
	s.ids = append(s.ids, id)
	s.created++
}

// sandboxClosed records the close of rollout r's sandbox, or its error.
func (s *sandboxStep) sandboxClosed(r int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.closeErrors = append(s.closeErrors, fmt.Sprintf("%s: %v", s.rollouts[r].sandbox, err))
		return
	}
	s.closed++
}

// sandboxIDs returns the ids of every sandbox created.
func (s *sandboxStep) sandboxIDs() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make(map[string]bool, len(s.ids))
	for _, id := range s.ids {
		ids[id] = true
	}
	return ids
}

// stepsDone records the agent steps of rollout r's last rollout attempt.
func (s *sandboxStep) stepsDone(r, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rollouts[r].steps = n
}

// execDone records one exec that returned an exit after d.
func (s *sandboxStep) execDone(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.execSecs = append(s.execSecs, d.Seconds())
}

// modelCalled counts a model call; fileWritten a file written.
func (s *sandboxStep) modelCalled() { s.mu.Lock(); s.modelCalls++; s.mu.Unlock() }
func (s *sandboxStep) fileWritten() { s.mu.Lock(); s.filesWritten++; s.mu.Unlock() }

// finish ends the step at at: tasks that never ended are CANCELLED (the
// step was interrupted), and records what the step left (left live
// sandboxes; unknown, when they could not be listed, says why).
func (s *sandboxStep) finish(at time.Time, interrupted bool, parallel, left int, unknown string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.tasks {
		t := &s.tasks[i]
		switch t.state {
		case client.TaskRunning:
			t.finish = at
			if at.After(s.lastFinish) {
				s.lastFinish = at
			}
			fallthrough
		case client.TaskPending, client.TaskQueued:
			t.state, t.reason = client.TaskCancelled, "the step was interrupted"
		}
	}
	s.interrupted, s.parallel, s.left, s.leftUnknown = interrupted, parallel, left, unknown
}

// counts returns the tasks' counts by state.
func (s *sandboxStep) counts() *wire.StateCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.countsLocked()
}

func (s *sandboxStep) countsLocked() *wire.StateCounts {
	c := &wire.StateCounts{}
	for _, t := range s.tasks {
		switch t.state {
		case client.TaskPending:
			c.Pending++
		case client.TaskQueued:
			c.Queued++
		case client.TaskRunning:
			c.Running++
		case client.TaskSucceeded:
			c.Succeeded++
		case client.TaskFailed:
			c.Failed++
		case client.TaskCancelled:
			c.Cancelled++
		case client.TaskTimedOut:
			c.TimedOut++
		}
	}
	return c
}

// failures returns "name: reason" of the tasks that failed or timed out,
// in graph order.
func (s *sandboxStep) failures() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, t := range s.tasks {
		if t.state == client.TaskFailed || t.state == client.TaskTimedOut {
			out = append(out, t.name+": "+t.reason)
		}
	}
	return out
}

// summary returns the step's Summary, in graph mode's terms: the same
// counts, success rate, mean reward, task times, attempts and wall time,
// plus the sandboxes and execs.
func (s *sandboxStep) summary() *Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.countsLocked()
	sum := &Summary{GraphID: s.id, Mode: modeSandbox, Tasks: len(s.tasks), Metric: rewardMetric,
		Counts: map[string]uint32{"pending": c.Pending, "queued": c.Queued, "assigned": c.Assigned, "running": c.Running,
			"succeeded": c.Succeeded, "failed": c.Failed, "cancelled": c.Cancelled, "timed_out": c.TimedOut}}
	if finished := c.Succeeded + c.Failed + c.TimedOut; finished > 0 {
		sum.SuccessRate = float64(c.Succeeded) / float64(finished)
	}
	var secs []float64
	var rewards float64
	for _, t := range s.tasks {
		sum.Attempts += t.attempts
		if t.attempts > 1 {
			sum.RetriedTasks++
		}
		if ranToAnEnd(t.state) && !t.start.IsZero() && !t.finish.Before(t.start) {
			secs = append(secs, t.finish.Sub(t.start).Seconds())
		}
		if t.reward != nil {
			rewards += *t.reward
			sum.RewardCount++
		}
	}
	if sum.RewardCount > 0 {
		sum.RewardMean = rewards / float64(sum.RewardCount)
	}
	sum.TaskTimes, sum.TaskSecondsP50, sum.TaskSecondsP99 = len(secs), percentile(secs, 0.50), percentile(secs, 0.99)
	if !s.firstStart.IsZero() && s.lastFinish.After(s.firstStart) {
		sum.WallSeconds = s.lastFinish.Sub(s.firstStart).Seconds()
	}
	switch {
	case s.interrupted:
		sum.State, sum.ExitCode = "cancelled", exitInterrupted
	case c.Succeeded == uint32(len(s.tasks)):
		sum.State = "succeeded"
	default:
		sum.State, sum.ExitCode = "failed", exitGraphFailed
	}
	sb := &SandboxStats{Sandboxes: s.created, Closed: s.closed, Left: s.left, LeftUnknown: s.leftUnknown, CloseErrors: s.closeErrors,
		Parallel: s.parallel, Execs: len(s.execSecs), ExecSecondsP50: percentile(s.execSecs, 0.50), ExecSecondsP99: percentile(s.execSecs, 0.99),
		ModelCalls: s.modelCalls, FilesWritten: s.filesWritten}
	for _, r := range s.rollouts {
		rr := RolloutResult{Instance: r.instance, Sandbox: r.sandbox, Attempts: s.tasks[r.tasks[1]].attempts, Steps: r.steps,
			Reward: s.tasks[r.tasks[2]].reward, State: taskState(client.TaskSucceeded)}
		for _, i := range r.tasks {
			if t := s.tasks[i]; t.state != client.TaskSucceeded {
				rr.State, rr.Reason = taskState(t.state), t.name+": "+t.reason
				break
			}
		}
		sb.Rollouts = append(sb.Rollouts, rr)
	}
	sum.Sandbox = sb
	return sum
}

// rewardMetric is the result field the step's mean is of (graph mode's
// megaflow.io/metric label): the eval's reward.
const rewardMetric = "reward"
