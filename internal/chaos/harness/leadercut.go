package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/chaos/check"
	"github.com/megaflow/megaflow/internal/chaos/history"
)

// LeaderCut is the scripted fault of RunLeaderCut: a graph of Tasks tasks
// each running For, the leader's host cut off from every other host once
// all of them run, healed once the graph is over.
type LeaderCut struct {
	// Tasks is the graph's size (1 to 64).
	Tasks int
	// For is how long each task runs (1 s to 5 min): long enough to outlive
	// the cut's consequences (an election, the workers' reconnects, a
	// lease) while it runs.
	For time.Duration
}

// LeaderCutResult is what RunLeaderCut saw.
type LeaderCutResult struct {
	// OldLeader is the head whose host was cut off; NewLeader the head
	// that led after it ("" when none other did before the graph ended).
	OldLeader, NewLeader string
	// GraphState is the graph's final state ("GRAPH_STATE_SUCCEEDED").
	GraphState string
	// Executions are the tasks' executions as their execution files
	// recorded them, keyed by task id.
	Executions map[string][]check.Execution
	// Repeated lists the tasks that started more than once, or whose one
	// execution was stopped: work the cut threw away.
	Repeated []string
	// Verdict is the harness's verdict over the run (tables, leaks, logs).
	Verdict check.Verdict
	// LogDir holds the hosts' logs.
	LogDir string
}

// RunLeaderCut runs one scripted fault on a fresh cluster of cfg (its
// Profile and Clients are not used): it submits a graph of sc.Tasks tasks,
// waits until every one runs, cuts the leader head's host off from every
// other host (the harness still reaches it), waits for the graph to end,
// heals, and collects what ran. A cluster that keeps its promise runs
// every task exactly once: the workers leave their stalled streams and
// reach the new leader before their leases lapse, so no attempt is
// stopped and no finished result is thrown away. The errors are the
// harness's own (no namespaces, a cluster that never started, a graph
// that never ran); what the cluster did is in the result.
func RunLeaderCut(ctx context.Context, cfg Config, sc LeaderCut) (*LeaderCutResult, error) {
	if sc.Tasks < 1 || sc.Tasks > 64 || sc.For < time.Second || sc.For > 5*time.Minute {
		return nil, fmt.Errorf("leader cut of %d tasks of %v: want 1 to 64 tasks of 1s to 5m", sc.Tasks, sc.For)
	}
	c, _, err := prepare(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	defer c.remove()
	res := &LeaderCutResult{LogDir: filepath.Join(cfg.Dir, "logs")}
	if err := c.startAll(ctx); err != nil {
		c.stopAll()
		return nil, err
	}
	rec := history.NewRecorder(time.Now())
	wl := newWorkload(&cfg, c, rec)
	id := "leader-cut"
	g := &client.GraphSpec{Id: id, Tenant: "chaos"}
	var ids []string
	for i := range sc.Tasks {
		name := fmt.Sprintf("t%d", i)
		g.Tasks = append(g.Tasks, &client.TaskSpec{Name: name, Image: "none", MaxRetries: 3,
			Command:   wl.taskCommand(id, name, sc.For.Seconds(), 0),
			Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 16 << 20}})
		ids = append(ids, id+"/"+name)
	}
	op := history.Op{Kind: history.Submit, Graph: id, Tasks: ids, Call: rec.Now()}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	sub, err := c.admin.Submit(sctx, g)
	cancel()
	if err != nil {
		c.stopAll()
		return nil, fmt.Errorf("submit the graph: %w", err)
	}
	op.Return, op.Index = rec.Now(), sub.Index
	rec.Add(op)
	running := func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		ts, _, err := c.admin.ListTasks(cctx, client.TaskFilter{GraphID: id, PageSize: 100, OmitSpec: true})
		n := 0
		for _, t := range ts {
			if t.State == client.TaskRunning {
				n++
			}
		}
		return err == nil && n == sc.Tasks
	}
	if err := waitFor(ctx, 60*time.Second, "every task running", running); err != nil {
		c.stopAll()
		return nil, err
	}
	lead := c.leader(ctx)
	if lead < 0 {
		c.stopAll()
		return nil, fmt.Errorf("no leader known when the tasks ran")
	}
	res.OldLeader = c.heads[lead].name
	h := c.net.Hosts[lead]
	for _, o := range c.net.Hosts {
		if o.Name != h.Name {
			if err := c.net.Cut(ctx, h, o); err != nil {
				c.stopAll()
				return nil, fmt.Errorf("cut %s from %s: %w", h.Name, o.Name, err)
			}
		}
	}
	cfg.say("chaos: cut the leader %s's host off from every other host; %d tasks of %v run", res.OldLeader, sc.Tasks, sc.For)
	// The cut head answers the harness (it still reaches every host) with
	// no leader or itself; the other heads are asked directly.
	var others []*client.Client
	for i, addr := range c.grpc {
		if i == lead {
			continue
		}
		if cl, err := dialOne(ctx, addr); err == nil {
			others = append(others, cl)
			defer cl.Close()
		}
	}
	_ = waitFor(ctx, 30*time.Second, "another leader", func() bool {
		for _, cl := range others {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cl.ClusterStatus(cctx)
			cancel()
			if err == nil && st.LeaderId != "" && st.LeaderId != res.OldLeader {
				res.NewLeader = st.LeaderId
				return true
			}
		}
		return false
	})
	_ = waitFor(ctx, sc.For+90*time.Second, "the graph to end", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		gr, _, err := c.admin.GetGraph(cctx, id, client.ReadOptions{RequireLeader: true})
		if err != nil {
			return false
		}
		res.GraphState = gr.State.String()
		return client.GraphTerminal(gr.State)
	})
	cfg.say("chaos: graph %s; new leader %s; healing", res.GraphState, res.NewLeader)
	in := c.finish(ctx)
	in.Ops = rec.Ops()
	in.Executions, err = readExecutions(filepath.Join(cfg.Dir, "hosts"))
	if err != nil {
		in.LogProblems = append(in.LogProblems, "execution files: "+err.Error())
	}
	in.LogProblems = append(in.LogProblems, scanLogs(res.LogDir)...)
	res.Executions = in.Executions
	for _, t := range ids {
		starts, stopped := 0, false
		for _, e := range in.Executions[t] {
			if !e.End {
				starts++
			}
			stopped = stopped || e.Stopped
		}
		if starts != 1 || stopped {
			res.Repeated = append(res.Repeated, fmt.Sprintf("%s (%d starts%s)", t, starts, map[bool]string{true: ", one stopped"}[stopped]))
		}
	}
	slices.Sort(res.Repeated)
	res.Verdict = check.Judge(in)
	return res, nil
}

// String is a one-line summary of r.
func (r *LeaderCutResult) String() string {
	return fmt.Sprintf("cut %s, then %s led; graph %s; %d tasks repeated or stopped [%s]; verdict failures [%s]",
		r.OldLeader, r.NewLeader, r.GraphState, len(r.Repeated), strings.Join(r.Repeated, ", "), strings.Join(r.Verdict.Failures, "; "))
}
