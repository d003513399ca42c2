package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
)

// Exit codes of `megaflow submit --wait|--watch`, `megaflow status
// --wait|--watch` and `megaflow demo`
// beyond the common ones (0 success, 1 an error, 2 bad usage or input).
const (
	// exitGraphFailed: the graph ended FAILED (a task failed or timed out
	// with no retry left).
	exitGraphFailed = 3
	// exitGraphCancelled: the graph was cancelled.
	exitGraphCancelled = 4
	// exitInterrupted: Ctrl-C while watching; the graph keeps running.
	exitInterrupted = 130
)

// graphExit maps a terminal graph to the command's exit code.
func graphExit(g *client.Graph) *codeError {
	switch g.State {
	case client.GraphSucceeded:
		return nil
	case client.GraphCancelled:
		return &codeError{code: exitGraphCancelled, msg: fmt.Sprintf("graph %s cancelled: %s", g.Id, orDash(g.Reason))}
	}
	// Point at the listing that shows them: --state takes one state.
	see := fmt.Sprintf("megaflow tasks %s --state failed", g.Id)
	switch f, to := g.Counts.GetFailed(), g.Counts.GetTimedOut(); {
	case f == 0 && to > 0:
		see = fmt.Sprintf("megaflow tasks %s --state timed_out", g.Id)
	case f > 0 && to > 0:
		see += "; --state timed_out for the others"
	}
	return &codeError{code: exitGraphFailed, msg: fmt.Sprintf("graph %s %s: %d failed, %d timed out (%s)",
		g.Id, graphState(g.State), g.Counts.GetFailed(), g.Counts.GetTimedOut(), see)}
}

// isTerminal reports whether w is a terminal (a live progress bar makes
// sense there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// counts is a graph's task counts by state, in the order shown.
func countsLine(c interface {
	GetPending() uint32
	GetQueued() uint32
	GetAssigned() uint32
	GetRunning() uint32
	GetSucceeded() uint32
	GetFailed() uint32
	GetCancelled() uint32
	GetTimedOut() uint32
}) string {
	parts := []string{}
	for _, kv := range []struct {
		k string
		v uint32
	}{{"pending", c.GetPending()}, {"queued", c.GetQueued()}, {"assigned", c.GetAssigned()}, {"running", c.GetRunning()},
		{"succeeded", c.GetSucceeded()}, {"failed", c.GetFailed()}, {"timed_out", c.GetTimedOut()}, {"cancelled", c.GetCancelled()}} {
		if kv.v > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", kv.k, kv.v))
		}
	}
	return strings.Join(parts, "  ")
}

// stuckNote is what the progress line adds when nothing of the graph runs
// and some of it waits in the queue: the latest queueing reason its
// events gave (e.g. "no worker runs the docker runtime ..."), so that a
// graph that cannot be placed says why instead of sitting at "queued" (""
// otherwise).
func stuckNote(c interface {
	GetQueued() uint32
	GetAssigned() uint32
	GetRunning() uint32
}, queued string) string {
	if queued == "" || c.GetQueued() == 0 || c.GetAssigned()+c.GetRunning() > 0 {
		return ""
	}
	return "  (queued: " + queued + ")"
}

// stuckAfter is what the message of a wait that gave up adds when nothing
// of graph id runs and some of it waits in the queue: the first queued
// task's reason (stuckNote), read from the leader within a few seconds of
// its own; "" otherwise, or when it cannot be read.
func stuckAfter(ctx context.Context, c *client.Client, id string) string {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	lead := client.ReadOptions{RequireLeader: true}
	g, _, err := c.GetGraph(rctx, id, lead)
	if err != nil || g.Counts.GetQueued() == 0 || g.Counts.GetAssigned()+g.Counts.GetRunning() > 0 {
		return ""
	}
	ts, _, err := c.ListTasks(rctx, client.TaskFilter{GraphID: id, State: client.TaskQueued, PageSize: 1, OmitSpec: true, Read: lead})
	if err != nil || len(ts) == 0 {
		return ""
	}
	return stuckNote(g.Counts, ts[0].Reason)
}

func terminalCount(g *client.Graph) int64 {
	c := g.Counts
	return int64(c.GetSucceeded() + c.GetFailed() + c.GetCancelled() + c.GetTimedOut())
}

// watchGraph follows graph id until it is terminal and returns it. Every
// committed change of the graph (a Watch event, which the client resumes
// through leader changes) triggers a re-read of its counts, at most every
// refresh. On a terminal out it draws a live progress bar by state; on any
// other writer it prints a plain line every plainEvery when the counts
// changed; with quiet it prints nothing.
func watchGraph(ctx context.Context, c *client.Client, id string, out io.Writer, quiet bool) (*client.Graph, error) {
	const refresh, plainEvery = 200 * time.Millisecond, 5 * time.Second
	g, _, err := c.GetGraph(ctx, id, client.ReadOptions{})
	if err != nil {
		return nil, err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	changed := make(chan struct{}, 1)
	var mu sync.Mutex
	queued := "" // the latest queueing reason an event gave (stuckNote); under mu
	if n := g.Counts; n.GetQueued() > 0 && n.GetAssigned()+n.GetRunning() == 0 {
		// Stuck before the watch began: its reason came with an event
		// already past; the first queued task's row has it (read from the
		// leader: an idle follower learns of the reason's commit only at
		// the leader's next heartbeat).
		ts, _, err := c.ListTasks(ctx, client.TaskFilter{GraphID: id, State: client.TaskQueued, PageSize: 1, OmitSpec: true,
			Read: client.ReadOptions{RequireLeader: true}})
		if err == nil && len(ts) > 0 {
			queued = ts[0].Reason
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned by watchGraph: stopped and waited for below
		defer wg.Done()
		for ev, err := range c.Watch(wctx, client.WatchOptions{GraphID: id, After: client.Cursor{Index: g.ModifyIndex}}) {
			if err != nil {
				return // ctx ended, or history lost: the ticker below still re-reads
			}
			if ev.TaskState == client.TaskQueued && ev.Reason != "" {
				mu.Lock()
				queued = ev.Reason
				mu.Unlock()
			}
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}()
	defer func() { stopWatch(); wg.Wait() }()

	var bar *mpb.Bar
	var p *mpb.Progress
	line := countsLine(g.Counts)
	if !quiet && isTerminal(out) {
		p = mpb.NewWithContext(ctx, mpb.WithOutput(out), mpb.WithWidth(32), mpb.WithRefreshRate(refresh))
		bar = p.AddBar(int64(g.TaskCount),
			mpb.PrependDecorators(decor.Name(id+" "), decor.CountersNoUnit("%d/%d tasks done", decor.WCSyncSpace)),
			mpb.AppendDecorators(decor.Elapsed(decor.ET_STYLE_MMSS, decor.WCSyncSpace), decor.Any(func(decor.Statistics) string {
				mu.Lock()
				defer mu.Unlock()
				return "  " + line
			})))
		bar.SetCurrent(terminalCount(g))
	}
	start := time.Now()
	lastPlain, lastLine := time.Time{}, ""
	show := func() {
		mu.Lock()
		line = countsLine(g.Counts) + stuckNote(g.Counts, queued)
		l := line
		mu.Unlock()
		switch {
		case bar != nil:
			bar.SetCurrent(terminalCount(g))
		case !quiet && (l != lastLine && time.Since(lastPlain) >= plainEvery || client.GraphTerminal(g.State)):
			fmt.Fprintf(out, "%s  %s  %d/%d done  %s\n", time.Since(start).Round(time.Second), id, terminalCount(g), g.TaskCount, l)
			lastPlain, lastLine = time.Now(), l
		}
	}
	show()
	// A slow tick re-reads even without events (a Watch that lost its
	// history, or a quiet graph), so the loop always ends.
	tick := time.NewTicker(refresh)
	defer tick.Stop()
	slow := 0
	for !client.GraphTerminal(g.State) {
		select {
		case <-ctx.Done():
			if p != nil {
				bar.Abort(false)
				p.Wait()
			}
			return nil, ctx.Err()
		case <-changed:
			<-tick.C // at most one read per refresh
		case <-tick.C:
			if slow++; slow < 10 {
				continue
			}
		}
		slow = 0
		ng, _, err := c.GetGraph(ctx, id, client.ReadOptions{})
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			return nil, err
		}
		g = ng
		show()
	}
	if p != nil {
		bar.SetTotal(int64(g.TaskCount), true)
		p.Wait()
	}
	return g, nil
}

// Summary is what `submit --watch -o json` and `demo -o json` print: one
// JSON object. Numbers are JSON numbers (counts, rates, seconds as
// floating point), unlike the protojson of other commands' -o json, where
// 64-bit integers are strings.
type Summary struct {
	GraphID string `json:"graph_id"`
	State   string `json:"state"`
	// Tasks is how many tasks the graph has; Counts adds up to it.
	Tasks  int               `json:"tasks"`
	Counts map[string]uint32 `json:"counts"`
	// ServicesStopped is how many of the cancelled tasks are service tasks
	// stopped with their graph once its batch tasks had ended.
	ServicesStopped int `json:"services_stopped"`
	// ServiceRestarts adds up the restarts of the graph's service tasks
	// (new attempts under their restart policy).
	ServiceRestarts int `json:"service_restarts"`
	// SuccessRate is succeeded / finished (SUCCEEDED, FAILED, TIMED_OUT);
	// JSON null while no task finished.
	SuccessRate float64 `json:"success_rate"`
	// RewardMean is the mean of the graph's metric (Metric, "reward") over
	// the RewardCount results that carry it; JSON null when none does (a
	// mean of 0 would read as a measured one).
	Metric      string  `json:"metric"`
	RewardMean  float64 `json:"reward_mean"`
	RewardCount uint32  `json:"reward_count"`
	// TaskSecondsP50 and TaskSecondsP99 are nearest-rank percentiles of the
	// run time of each task's last attempt (start to finish), in seconds,
	// over the TaskTimes tasks that ran to an end (SUCCEEDED, FAILED,
	// TIMED_OUT: cancelled ones are left out, as from the success rate);
	// JSON null when TaskTimes is 0.
	TaskTimes      int     `json:"task_times"`
	TaskSecondsP50 float64 `json:"task_seconds_p50"`
	TaskSecondsP99 float64 `json:"task_seconds_p99"`
	// Attempts is the number of attempts of all tasks but the services
	// stopped with the graph; RetriedTasks the tasks that needed more than
	// one. Task times leave those services out too.
	Attempts     int `json:"attempts"`
	RetriedTasks int `json:"retried_tasks"`
	// WallSeconds is the head's wall time of the graph (first start to
	// last end).
	WallSeconds float64 `json:"wall_seconds"`
	ExitCode    int     `json:"exit_code"`
	// Mode is "sandbox" for `megaflow demo --mode sandbox`, whose step is
	// no graph: GraphID is then the step's id, Tasks each rollout's setup,
	// rollout and eval as that command ran them (execs into the rollout's
	// sandbox), task times and wall time its own clock's, and Sandbox says
	// more. Empty for a graph.
	Mode    string        `json:"mode,omitempty"`
	Sandbox *SandboxStats `json:"sandbox,omitempty"`
	// ArchivedUnixNanos is set when the graph was archived (the head's
	// --graph-retention): its tasks are no longer kept, so the task times,
	// attempts and retries are unknown (zero).
	ArchivedUnixNanos int64 `json:"archived_unix_nanos,omitempty"`
}

// MarshalJSON writes s with success_rate null while no task finished,
// reward_mean null while no result carries the metric and the task time
// percentiles null while no task ran to an end: each is 0 in s then,
// which a reader of the JSON would take for a measured figure.
func (s Summary) MarshalJSON() ([]byte, error) {
	type plain Summary // without this method
	out := struct {
		plain
		SuccessRate    *float64 `json:"success_rate"`
		RewardMean     *float64 `json:"reward_mean"`
		TaskSecondsP50 *float64 `json:"task_seconds_p50"`
		TaskSecondsP99 *float64 `json:"task_seconds_p99"`
	}{plain: plain(s)}
	if s.TaskTimes > 0 {
		out.TaskSecondsP50, out.TaskSecondsP99 = &s.TaskSecondsP50, &s.TaskSecondsP99
	}
	if s.Counts["succeeded"]+s.Counts["failed"]+s.Counts["timed_out"] > 0 {
		out.SuccessRate = &s.SuccessRate
	}
	if s.RewardCount > 0 {
		out.RewardMean = &s.RewardMean
	}
	return json.Marshal(out)
}

// SandboxStats is what `megaflow demo --mode sandbox` adds to its Summary.
type SandboxStats struct {
	// Sandboxes were created, one per rollout (and another for a rollout
	// whose setup's sandbox could not start or ended); Closed of them by
	// the command; Left is how many of the step's sandboxes were still
	// live after (0 unless a close failed); LeftUnknown says why they
	// could not be listed ("" when they were).
	Sandboxes   int      `json:"sandboxes"`
	Closed      int      `json:"closed"`
	Left        int      `json:"left"`
	LeftUnknown string   `json:"left_unknown,omitempty"`
	CloseErrors []string `json:"close_errors,omitempty"`
	// Parallel is how many rollouts ran at most at once.
	Parallel int `json:"parallel"`
	// Execs is how many execs returned an exit (setup, each agent step's
	// tool command, eval); ExecSecondsP50 and P99 are nearest-rank
	// percentiles of their time, request to exit, in seconds.
	Execs          int     `json:"execs"`
	ExecSecondsP50 float64 `json:"exec_seconds_p50"`
	ExecSecondsP99 float64 `json:"exec_seconds_p99"`
	// ModelCalls were made by the command (one per agent step tried);
	// FilesWritten into the sandboxes (the trajectories).
	ModelCalls   int `json:"model_calls"`
	FilesWritten int `json:"files_written"`
	// Rollouts, in step order.
	Rollouts []RolloutResult `json:"rollouts"`
}

// RolloutResult is one rollout of `megaflow demo --mode sandbox`.
type RolloutResult struct {
	// Instance is the SWE-Gym instance; Sandbox the id of its (last)
	// sandbox, "" when none was created.
	Instance string `json:"instance"`
	Sandbox  string `json:"sandbox"`
	// Attempts of its rollout task; Steps the agent steps of the last one
	// that finished.
	Attempts int `json:"attempts"`
	Steps    int `json:"steps"`
	// Reward is the eval's (null without one).
	Reward *float64 `json:"reward"`
	// State is "succeeded" when its three tasks did, else the state of
	// the first that did not, and Reason its name and why.
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// summarize reads every task of g (pages of 1,000, specs left out) and
// computes the Summary.
func summarize(ctx context.Context, c *client.Client, g *client.Graph) (*Summary, error) {
	s := &Summary{GraphID: g.Id, State: graphState(g.State), Tasks: int(g.TaskCount), Counts: map[string]uint32{}}
	cn := g.Counts
	for k, v := range map[string]uint32{"pending": cn.GetPending(), "queued": cn.GetQueued(), "assigned": cn.GetAssigned(),
		"running": cn.GetRunning(), "succeeded": cn.GetSucceeded(), "failed": cn.GetFailed(), "cancelled": cn.GetCancelled(),
		"timed_out": cn.GetTimedOut()} {
		s.Counts[k] = v
	}
	m := g.GetMetrics()
	s.SuccessRate, s.Metric, s.RewardMean, s.RewardCount = m.GetSuccessRate(), m.GetField(), m.GetMean(), m.GetCount()
	s.WallSeconds = float64(m.GetWallMillis()) / 1000
	var secs []float64
	token := ""
	s.ArchivedUnixNanos = g.GetArchivedUnixNanos()
	for s.ArchivedUnixNanos == 0 {
		tasks, next, err := c.ListTasks(ctx, client.TaskFilter{GraphID: g.Id, PageSize: 1000, PageToken: token, OmitSpec: true})
		if errs.ClassOf(err) == errs.NotFound {
			// Archived since it was read (a short --graph-retention):
			// the summary is all there is.
			if ag, _, gerr := c.GetGraph(ctx, g.Id, client.ReadOptions{}); gerr == nil && ag.GetArchivedUnixNanos() != 0 {
				s.ArchivedUnixNanos, s.Attempts, s.RetriedTasks, s.ServiceRestarts, s.ServicesStopped = ag.GetArchivedUnixNanos(), 0, 0, 0, 0
				secs = nil
				break
			}
		}
		if err != nil {
			return nil, err
		}
		for _, t := range tasks {
			s.ServiceRestarts += int(t.Restarts)
			if t.State == client.TaskCancelled && t.ReasonCode == client.ReasonStoppedWithGraph {
				s.ServicesStopped++
				continue // a service's run time is not a task time
			}
			s.Attempts += len(t.Attempts)
			if len(t.Attempts) > 1 {
				s.RetriedTasks++
			}
			if n := len(t.Attempts); n > 0 && ranToAnEnd(t.State) {
				a := t.Attempts[n-1]
				if a.StartUnixNanos > 0 && a.FinishUnixNanos >= a.StartUnixNanos {
					secs = append(secs, float64(a.FinishUnixNanos-a.StartUnixNanos)/1e9)
				}
			}
		}
		if next == "" {
			break
		}
		token = next
	}
	s.TaskTimes, s.TaskSecondsP50, s.TaskSecondsP99 = len(secs), percentile(secs, 0.50), percentile(secs, 0.99)
	if e := graphExit(g); e != nil {
		s.ExitCode = e.code
	}
	return s, nil
}

// ranToAnEnd reports whether a task in state st ran to an end of its own:
// SUCCEEDED, FAILED or TIMED_OUT (not CANCELLED, nor still going).
func ranToAnEnd(st client.TaskState) bool {
	return st == client.TaskSucceeded || st == client.TaskFailed || st == client.TaskTimedOut
}

// percentile returns the nearest-rank q-quantile of v (0 for none).
func percentile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	i := int(q*float64(len(v))+0.999999) - 1
	return v[min(max(i, 0), len(v)-1)]
}

// printSummary writes the summary table.
func printSummary(w io.Writer, s *Summary) {
	if s.Mode == modeSandbox {
		fmt.Fprintf(w, "\nstep %s %s (sandbox mode: no graph; the agent loop ran in this process)\n", s.GraphID, s.State)
	} else {
		fmt.Fprintf(w, "\ngraph %s %s\n", s.GraphID, s.State)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var sum uint32
	for _, k := range []string{"succeeded", "failed", "timed_out", "cancelled", "running", "assigned", "queued", "pending"} {
		switch {
		case k == "cancelled" && s.ServicesStopped > 0:
			fmt.Fprintf(tw, "  %s\t%d\t(%s stopped with the graph)\n", k, s.Counts[k], plural(s.ServicesStopped, "service"))
		case s.Counts[k] > 0 || k == "succeeded" || k == "failed":
			fmt.Fprintf(tw, "  %s\t%d\n", k, s.Counts[k])
		}
		sum += s.Counts[k]
	}
	if sb := s.Sandbox; sb != nil {
		fmt.Fprintf(tw, "  total\t%d\t(%d tasks, run as execs in %s)\n", sum, s.Tasks, plural(sb.Sandboxes, "sandbox"))
	} else {
		fmt.Fprintf(tw, "  total\t%d\t(%d tasks submitted)\n", sum, s.Tasks)
	}
	if finished := s.Counts["succeeded"] + s.Counts["failed"] + s.Counts["timed_out"]; finished > 0 {
		// The rate is of the tasks that ran to an end: say so when some
		// were cancelled, or a cancelled graph reads as a full success.
		if c := s.Counts["cancelled"]; c > 0 {
			fmt.Fprintf(tw, "success rate\t%.1f%%\t(%d of %d finished; %d cancelled, not counted)\n", 100*s.SuccessRate, s.Counts["succeeded"], finished, c)
		} else {
			fmt.Fprintf(tw, "success rate\t%.1f%%\n", 100*s.SuccessRate)
		}
	} else {
		fmt.Fprintf(tw, "success rate\t-\t(no task finished)\n")
	}
	if s.RewardCount > 0 {
		fmt.Fprintf(tw, "mean %s\t%.3f\t(%s)\n", s.Metric, s.RewardMean, plural(int(s.RewardCount), "result"))
	} else {
		fmt.Fprintf(tw, "mean %s\t-\t(no result carries it)\n", orDash(s.Metric))
	}
	if s.ArchivedUnixNanos != 0 {
		fmt.Fprintf(tw, "archived\t%s\t(its tasks are no longer kept: no task times or attempts)\n",
			time.Unix(0, s.ArchivedUnixNanos).UTC().Format(time.RFC3339))
	} else {
		if s.TaskTimes > 0 {
			fmt.Fprintf(tw, "task time p50 / p99\t%s / %s\t(last attempt of each of %s that ran to an end)\n", secs(s.TaskSecondsP50),
				secs(s.TaskSecondsP99), plural(s.TaskTimes, "task"))
		} else {
			fmt.Fprintf(tw, "task time p50 / p99\t-\t(no task ran to an end)\n")
		}
		fmt.Fprintf(tw, "attempts\t%d\t(%s retried)\n", s.Attempts, plural(s.RetriedTasks, "task"))
	}
	if s.ServiceRestarts > 0 {
		fmt.Fprintf(tw, "service restarts\t%d\t(megaflow tasks %s shows why)\n", s.ServiceRestarts, s.GraphID)
	}
	if sb := s.Sandbox; sb != nil {
		fmt.Fprintf(tw, "wall time\t%s\t(first task start to last task end)\n", secs(s.WallSeconds))
		left := fmt.Sprintf("%d left", sb.Left)
		if sb.LeftUnknown != "" {
			left = "left unknown: " + sb.LeftUnknown
		}
		fmt.Fprintf(tw, "sandboxes\t%d\t(for %s, at most %d at once; %d closed, %s)\n", sb.Sandboxes, plural(len(sb.Rollouts), "rollout"),
			sb.Parallel, sb.Closed, left)
		fmt.Fprintf(tw, "execs\t%d\t(setup, one per agent step, eval; %d files written)\n", sb.Execs, sb.FilesWritten)
		fmt.Fprintf(tw, "exec time p50 / p99\t%s / %s\t(request to exit, seen from this process)\n", secs(sb.ExecSecondsP50), secs(sb.ExecSecondsP99))
		fmt.Fprintf(tw, "model calls\t%d\t(from this process)\n", sb.ModelCalls)
	} else {
		fmt.Fprintf(tw, "wall time\t%s\n", secs(s.WallSeconds))
	}
	tw.Flush()
}

// plural returns "1 task", "2 tasks" ("2 sandboxes": -es after s or x).
func plural(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "s") || strings.HasSuffix(noun, "x"):
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func secs(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Millisecond).String()
}

// follow waits for graph id to end (with a live progress bar unless quiet
// or -o json), prints the summary (a table, or one JSON object with -o
// json) and returns the exit code's error for a graph that did not
// succeed.
func (g *globals) follow(ctx context.Context, c *client.Client, id string, quiet bool) error {
	gr, err := watchGraph(ctx, c, id, g.stdout, quiet || g.output == "json")
	if err != nil {
		if ctx.Err() != nil && g.interrupted() {
			return &codeError{code: exitInterrupted, msg: fmt.Sprintf("stopped waiting; graph %s keeps running (megaflow status %s --wait waits again)", id, id)}
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return &codeError{code: 1, msg: fmt.Sprintf("stopped waiting after --timeout; graph %s keeps running%s (megaflow status %s --wait waits again)",
				id, stuckAfter(ctx, c, id), id)}
		}
		return err
	}
	// The summary reads every task: give it its own deadline.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	s, err := summarize(sctx, c, gr)
	if err != nil {
		return err
	}
	if g.output == "json" {
		if err := g.printJSON(s); err != nil {
			return err
		}
	} else {
		printSummary(g.stdout, s)
	}
	if e := graphExit(gr); e != nil {
		return e
	}
	return nil
}
