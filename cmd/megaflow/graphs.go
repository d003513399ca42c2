package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

func graphsCmd(g *globals) *cobra.Command {
	var f client.GraphFilter
	var sandboxes bool
	cmd := &cobra.Command{
		Use:   "graphs",
		Short: "List graphs, sorted by id",
		Long: `graphs lists the graphs in the head's live table, sorted by id. A finished
graph leaves the live table after the head's --graph-retention (default 6h;
a graph's label megaflow.io/graph-retention overrides it): its tasks are
no longer kept, nor can its logs and artifacts be read; its summary
(counts, metrics, labels, times) stays in the archive for
--archive-retention (default 30 days).
--all lists the archived graphs too, after the live ones, with the time
since they were archived in the ARCHIVED column; megaflow status GRAPH shows
one. Each sandbox is a graph of its own (its id, sbx-..., one task): they
are left out, and counted below the table, unless --sandboxes is given
(megaflow sandbox list lists them as sandboxes).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			f.Read = g.read()
			graphs, next, err := c.ListGraphs(ctx, f)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"graphs": protoList(graphs), "next_page_token": next})
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			header := "GRAPH\tTENANT\tSTATE\tTASKS\tSUCCEEDED\tFAILED\tCANCELLED\tSUCCESS\tREWARD\tAGE"
			if f.IncludeArchived {
				header += "\tARCHIVED"
			}
			fmt.Fprintln(tw, header)
			hidden := 0
			for _, gr := range graphs {
				if !sandboxes && sandboxGraph(gr) {
					hidden++
					continue
				}
				cn, m := gr.Counts, gr.GetMetrics()
				// SUCCESS is of the tasks that ran to an end: CANCELLED beside
				// it keeps a cancelled graph from reading as a full success.
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s", gr.Id, gr.Tenant, graphState(gr.State), gr.TaskCount,
					cn.GetSucceeded(), cn.GetFailed()+cn.GetTimedOut(), cn.GetCancelled(), successRate(m), meanMetric(m), age(gr.CreateUnixNanos))
				if f.IncludeArchived {
					fmt.Fprintf(tw, "\t%s", age(gr.GetArchivedUnixNanos()))
				}
				fmt.Fprintln(tw)
			}
			if hidden > 0 {
				what := fmt.Sprintf("%d sandboxes' graphs", hidden)
				if hidden == 1 {
					what = "1 sandbox's graph"
				}
				fmt.Fprintf(tw, "(%s not shown: --sandboxes shows them; megaflow sandbox list lists them)\n", what)
			}
			if next != "" {
				fmt.Fprintf(tw, "(more: --page-token %s)\n", next)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&sandboxes, "sandboxes", false, "include the sandboxes' graphs (one per sandbox, id sbx-...)")
	cmd.Flags().StringVar(&f.Tenant, "tenant", "", "only this tenant's graphs")
	cmd.Flags().BoolVar(&f.IncludeArchived, "all", false, "include the archived graphs (finished graphs past the head's --graph-retention), after the live ones")
	cmd.Flags().Int32Var(&f.PageSize, "limit", 100, "at most this many")
	cmd.Flags().StringVar(&f.PageToken, "page-token", "", "continue a previous listing")
	return cmd
}

// sandboxGraph reports whether gr is a sandbox's graph: a sandbox id
// (spec.SandboxIDPrefix, then [a-z0-9]) with one task.
func sandboxGraph(gr *client.Graph) bool {
	return gr.TaskCount == 1 && spec.CheckSandboxID("", gr.Id) == nil
}

func tasksCmd(g *globals) *cobra.Command {
	var f client.TaskFilter
	var state string
	cmd := &cobra.Command{
		Use:   "tasks [GRAPH]",
		Short: "List tasks, of one graph or all",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				f.GraphID = args[0]
			}
			if state != "" {
				s, ok := parseTaskState(state)
				if !ok {
					return errs.New(errs.InvalidArgument, "--state %q: want one of pending, queued, assigned, running, succeeded, failed, cancelled, timed_out", state)
				}
				f.State = s
			}
			f.OmitSpec = g.output != "json"
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			f.Read = g.read()
			tasks, next, err := c.ListTasks(ctx, f)
			if err != nil {
				return err
			}
			if len(tasks) == 0 && f.GraphID != "" && f.PageToken == "" {
				// No tasks: say so if the graph itself does not exist.
				if _, _, err := c.GetGraph(ctx, f.GraphID, f.Read); err != nil {
					return err
				}
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"tasks": protoList(tasks), "next_page_token": next})
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TASK\tSTATE\tATTEMPT\tWORKER\tREASON")
			waits := unfinishedDependencies(tasks)
			for _, t := range tasks {
				var worker string
				if n := len(t.Attempts); n > 0 {
					worker = t.Attempts[n-1].WorkerId
				}
				reason := taskReason(t)
				if reason == "" && t.State == client.TaskPending {
					reason = pendingReason(t, waits[t.Id])
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", t.Id, taskState(t.State), len(t.Attempts), orDash(worker), reason)
			}
			if next != "" {
				fmt.Fprintf(tw, "(more: --page-token %s)\n", next)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only tasks in this state")
	cmd.Flags().StringVar(&f.Tenant, "tenant", "", "only this tenant's tasks")
	cmd.Flags().StringVar(&f.WorkerID, "worker", "", "only tasks on this worker")
	cmd.Flags().Int32Var(&f.PageSize, "limit", 100, "at most this many")
	cmd.Flags().StringVar(&f.PageToken, "page-token", "", "continue a previous listing")
	return cmd
}

func statusCmd(g *globals) *cobra.Command {
	var wait, watch bool
	cmd := &cobra.Command{
		Use:   "status GRAPH",
		Short: "Show a graph's state and counts by task state",
		Long: `status shows a graph's state, its counts by task state and its metrics.
With --wait it waits until the graph finishes and prints the same summary
as submit --wait, with the same exit codes (0 succeeded, 3 failed, 4
cancelled, 130 interrupted: the graph keeps running); --watch also shows
the live progress bar. That is how to wait again for a graph whose
submit --wait was interrupted, or one another client submitted.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			wait = wait || watch
			if wait && !cmd.Flags().Changed("timeout") {
				g.timeout = 0 // a graph may run for hours: wait until it ends or Ctrl-C
			}
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			if wait {
				return g.follow(ctx, c, args[0], !watch)
			}
			gr, meta, err := c.GetGraph(ctx, args[0], g.read())
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(gr)
			}
			cn := gr.Counts
			fmt.Fprintf(g.stdout, "graph %s  tenant %s  %s  %d tasks  (index %d from %s)\n", gr.Id, gr.Tenant,
				graphState(gr.State), gr.TaskCount, meta.GetIndex(), meta.GetHeadId())
			fmt.Fprintf(g.stdout, "pending %d  queued %d  assigned %d  running %d  succeeded %d  failed %d  cancelled %d  timed_out %d\n",
				cn.GetPending(), cn.GetQueued(), cn.GetAssigned(), cn.GetRunning(), cn.GetSucceeded(), cn.GetFailed(),
				cn.GetCancelled(), cn.GetTimedOut())
			if note := stuckAfter(ctx, c, gr.Id); note != "" {
				// Nothing of it runs and some waits: why (megaflow tasks
				// gives each task's reason).
				fmt.Fprintf(g.stdout, "%s\n", strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(note), "("), ")"))
			}
			if m := gr.GetMetrics(); m.GetFinished() > 0 || m.GetFirstStartUnixNanos() != 0 {
				fmt.Fprintf(g.stdout, "success %s of %d finished", successRate(m), m.GetFinished())
				if n := cn.GetCancelled(); n > 0 {
					fmt.Fprintf(g.stdout, " (%d cancelled, not counted)", n)
				}
				if m.GetCount() > 0 {
					fmt.Fprintf(g.stdout, "  %s mean %.4g  min %.4g  max %.4g  (%s)", m.GetField(), m.GetMean(), m.GetMin(),
						m.GetMax(), plural(int(m.GetCount()), "value"))
				}
				if m.GetWallMillis() > 0 {
					fmt.Fprintf(g.stdout, "  wall %s", (time.Duration(m.GetWallMillis()) * time.Millisecond).String())
				}
				fmt.Fprintln(g.stdout)
				if m.GetCount() > 0 {
					fmt.Fprintf(g.stdout, "%s histogram: %s\n", m.GetField(), histogram(m.GetHistogram()))
				}
			}
			if gr.Reason != "" {
				fmt.Fprintf(g.stdout, "reason: %s\n", gr.Reason)
			}
			if at := gr.GetArchivedUnixNanos(); at != 0 {
				fmt.Fprintf(g.stdout, "archived %s (%s ago): this is its summary; its tasks are no longer kept, nor can its logs and artifacts be read\n",
					time.Unix(0, at).UTC().Format(time.RFC3339), age(at))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the graph finishes and print its summary; exit 3 if it failed, 4 if cancelled")
	cmd.Flags().BoolVar(&watch, "watch", false, "like --wait, with a live progress bar by task state")
	return cmd
}

// cancelled says what a cancel of id (a graph, or GRAPH/TASK) did, n being
// the tasks it cancelled: a task's count includes its dependents that can
// then never run and the rest of its gang, and 0 means everything had
// ended already.
func cancelled(id string, n int) string {
	task := strings.Contains(id, "/")
	switch {
	case n == 0 && task:
		return fmt.Sprintf("%s had already ended: nothing cancelled", id)
	case n == 0:
		return fmt.Sprintf("every task of %s had already ended: nothing cancelled", id)
	case task && n == 1:
		return fmt.Sprintf("cancelled %s", id)
	case task:
		return fmt.Sprintf("cancelled %s and %s (dependents that could then never run, or the rest of its gang)", id, plural(n-1, "other task"))
	}
	return fmt.Sprintf("cancelled %s of %s", plural(n, "task"), id)
}

func cancelCmd(g *globals) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel GRAPH|GRAPH/TASK",
		Short: "Cancel a graph, or one task of it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			var n uint32
			if strings.Contains(args[0], "/") {
				n, err = c.CancelTask(ctx, args[0], reason)
			} else {
				n, err = c.CancelGraph(ctx, args[0], reason)
			}
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"id": args[0], "cancelled": n})
			}
			fmt.Fprintln(g.stdout, cancelled(args[0], int(n)))
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "cancelled by user", "why, recorded on each task")
	return cmd
}

// successRate formats a graph's success rate, "-" while no task finished.
func successRate(m *client.GraphMetrics) string {
	if m.GetFinished() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*m.GetSuccessRate())
}

// meanMetric formats the mean of a graph's metric, "-" without values.
func meanMetric(m *client.GraphMetrics) string {
	if m.GetCount() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", m.GetMean())
}

// histogram formats the fixed buckets of GraphMetrics.histogram.
func histogram(h []uint32) string {
	labels := []string{"<0", "[0,.1)", "[.1,.2)", "[.2,.3)", "[.3,.4)", "[.4,.5)", "[.5,.6)", "[.6,.7)", "[.7,.8)", "[.8,.9)", "[.9,1)", ">=1"}
	var parts []string
	for i, n := range h {
		if n > 0 && i < len(labels) {
			parts = append(parts, fmt.Sprintf("%s:%d", labels[i], n))
		}
	}
	return strings.Join(parts, " ")
}

// taskReason is the REASON column of `megaflow tasks`: the task's own
// reason, and, for a task that is on a later attempt (queued again,
// assigned, running) or ended without a reason of its own after earlier
// attempts, why the last earlier attempt ended: a task that was run again
// (its worker died, its lease lapsed, it failed and had retries) says so
// instead of showing an empty reason or only the queue's.
func taskReason(t *client.Task) string {
	if t.Reason == upstreamFailed && len(t.Attempts) == 0 {
		return upstreamFailedReason
	}
	n := len(t.Attempts)
	if t.State == client.TaskFailed && strings.HasPrefix(t.Reason, "lost ") && strings.HasSuffix(t.Reason, " times") &&
		n > 0 && t.Attempts[n-1].Reason != "" {
		// The head's reason for a task it gave up on after its attempts
		// were lost names no cause: the last one's.
		return fmt.Sprintf("%s (the last: %s)", t.Reason, t.Attempts[n-1].Reason)
	}
	var prev *client.Attempt
	switch t.State {
	case client.TaskPending, client.TaskQueued:
		if n > 0 {
			prev = t.Attempts[n-1] // ended: the task is waiting for another
		}
	default:
		if n > 1 {
			prev = t.Attempts[n-2]
		}
	}
	if prev == nil || prev.Reason == "" || prev.Reason == t.Reason || (t.Reason != "" && taskEnded(t.State)) {
		return t.Reason
	}
	earlier := fmt.Sprintf("attempt %d ended (%s): %s", prev.Number, taskState(prev.State), prev.Reason)
	if lostAttempt(prev.ReasonCode) {
		// Recorded FAILED, but the head ran the task again without
		// counting it against its retries (a worker stopping or lost).
		earlier = fmt.Sprintf("attempt %d was lost (run again, not counted as a failure): %s", prev.Number, prev.Reason)
	}
	if t.Reason == "" {
		return earlier
	}
	return t.Reason + "; " + earlier
}

// lostAttempt reports whether an attempt that ended with code was lost
// rather than failed: its worker stopped it, left, was declared down or no
// longer ran it, or a GPU it held went bad. The head re-queues such a task
// and counts the attempt apart from failures (lost_count; a task lost 3
// times fails: docs/reasons.md).
func lostAttempt(code client.ReasonCode) bool {
	switch code {
	case wire.ReasonCode_REASON_CODE_STOPPED_BY_WORKER, wire.ReasonCode_REASON_CODE_WORKER_LOST,
		wire.ReasonCode_REASON_CODE_LEASE_LAPSED, wire.ReasonCode_REASON_CODE_NOT_ON_WORKER,
		wire.ReasonCode_REASON_CODE_GPU_UNHEALTHY:
		return true
	}
	return false
}

// unfinishedDependencies maps the id of each task of tasks to the ids of
// its dependencies among tasks that have not ended, in listing order: a
// task's dependencies are the tasks that name it among their dependents
// (the listing omits specs). A dependency that ended no longer holds a
// PENDING task: it succeeded, or the task runs on its failure
// (run_on_upstream_failure; without it the task would have been
// cancelled).
func unfinishedDependencies(tasks []*client.Task) map[string][]string {
	out := map[string][]string{}
	for _, d := range tasks {
		if taskEnded(d.State) {
			continue
		}
		for _, name := range d.Dependents {
			id := d.GraphId + "/" + name
			out[id] = append(out[id], d.Id)
		}
	}
	return out
}

// maxNamedDependencies is how many unfinished dependencies a PENDING
// task's reason names.
const maxNamedDependencies = 3

// pendingReason says what PENDING task t waits for: its dependencies
// that have not ended (deps: those of them the listing shows), named when
// the listing shows them all, up to maxNamedDependencies.
func pendingReason(t *client.Task, deps []string) string {
	n := int(t.DepsRemaining)
	if n == 0 {
		return ""
	}
	what := fmt.Sprintf("%d dependencies", n)
	if n == 1 {
		what = "its dependency"
	}
	if len(deps) != n {
		return "waiting for " + what
	}
	named := strings.Join(deps[:min(n, maxNamedDependencies)], ", ")
	if n > maxNamedDependencies {
		named += fmt.Sprintf(" and %d more", n-maxNamedDependencies)
	}
	return fmt.Sprintf("waiting for %s: %s", what, named)
}

// upstreamFailed is the table's reason for a task cancelled because a
// dependency did not succeed (head/state.ReasonUpstreamFailed), which
// scripts may match; upstreamFailedReason is how the listing says it.
const (
	upstreamFailed       = "upstream_failed"
	upstreamFailedReason = "a dependency did not succeed (upstream_failed)"
)

// taskEnded reports whether s is a task's final state.
func taskEnded(s client.TaskState) bool {
	switch s {
	case client.TaskSucceeded, client.TaskFailed, client.TaskCancelled, client.TaskTimedOut:
		return true
	}
	return false
}

func taskState(s client.TaskState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "TASK_STATE_"))
}

func graphState(s client.GraphState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "GRAPH_STATE_"))
}

func parseTaskState(s string) (client.TaskState, bool) {
	for v := client.TaskPending; v <= client.TaskTimedOut; v++ {
		if taskState(v) == strings.ToLower(s) {
			return v, true
		}
	}
	return 0, false
}

func age(unixNanos int64) string {
	if unixNanos == 0 {
		return "-"
	}
	return time.Since(time.Unix(0, unixNanos)).Round(time.Second).String()
}

// protoList turns a slice of messages into JSON-ready values (protoValue).
func protoList[T proto.Message](items []T) []any {
	out := make([]any, len(items))
	for i, it := range items {
		out[i], _ = protoValue(it)
	}
	return out
}
