package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
	localcluster "github.com/megaflow/megaflow/internal/cluster"
)

// failoverOptions are the flags of `megaflow-bench failover`.
type failoverOptions struct {
	reps        int
	headBin     string
	workerBin   string
	workerGrace time.Duration
}

func failoverCmd(g *globals) *cobra.Command {
	o := failoverOptions{reps: 5, headBin: "bin/megaflow-head", workerBin: "bin/megaflow-worker", workerGrace: 2 * time.Second}
	cmd := &cobra.Command{
		Use:   "failover",
		Short: "kill -9 of the leader head and of a worker, repeated: recovery times and lost or duplicated results",
		Long: `failover runs 3 megaflow-head and 2 megaflow-worker processes (process runtime)
on loopback and, --reps times each:
  leader: submits a graph (acknowledged), kill -9s the leader, and measures the
    time to the first committed submit (the client retries through the heads);
    then restarts the killed head on its data directory and waits for it to
    catch up;
  worker: submits 4 tasks (sleep 4), waits until they run, kill -9s the worker
    running most of them, and measures the time until every one of its tasks
    runs on another worker (the table's start time of the new attempt); then
    starts a fresh worker, and waits for the graph to finish.
At the end every acknowledged task must have succeeded exactly once: lost
(acknowledged, never succeeded) and duplicated (more than one successful
attempt) results are counted and must be 0. Build the binaries first (make build).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.full && !cmd.Flags().Changed("reps") {
				o.reps = 20
			}
			if o.reps < 1 || o.reps > 1000 {
				return fmt.Errorf("--reps %d is outside [1, 1000]", o.reps)
			}
			for _, b := range []string{o.headBin, o.workerBin} {
				if _, err := os.Stat(b); err != nil {
					return fmt.Errorf("%s: %w (run make build first, or point --head-bin / --worker-bin at the binaries)", b, err)
				}
			}
			return runFailover(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.reps, "reps", o.reps, "repetitions of each kill (--full: 20)")
	f.StringVar(&o.headBin, "head-bin", o.headBin, "the megaflow-head binary")
	f.StringVar(&o.workerBin, "worker-bin", o.workerBin, "the megaflow-worker binary")
	f.DurationVar(&o.workerGrace, "worker-grace", o.workerGrace, "the heads' --worker-grace: how long a worker without a stream keeps its attempts")
	return cmd
}

// proc is a head or worker process the harness owns.
type proc struct {
	name, bin, log string
	args           []string
	attr           *syscall.SysProcAttr // when set, the process's attributes (soak: Pdeathsig)
	cmd            *exec.Cmd
	done           chan struct{}
}

func (p *proc) start() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = p.attr
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); f.Close(); close(p.done) }()
	return nil
}

// kill9 sends SIGKILL and waits for the process to end.
func (p *proc) kill9() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits 10 s at most, then SIGKILL.
func (p *proc) stop() {
	if p.cmd == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.kill9()
	}
}

type failoverRun struct {
	leaderMs, workerMs []float64
	acknowledged       int
	lost, duplicated   int
	retried            int
	failed             int      // acknowledged, ended without success (its result is a recorded failure)
	lostDetail         []string // per lost or failed task: its state, reason and attempts
}

func runFailover(ctx context.Context, g *globals, o failoverOptions) error {
	dir, err := os.MkdirTemp("", "megaflow-bench-failover-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logDir := filepath.Join(g.out, "failover-logs")
	_ = os.RemoveAll(logDir)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	var heads []*proc
	var gossip, grpcs []string
	type addrs struct{ raft, grpc, gossip string }
	var as []addrs
	for range 3 {
		var a addrs
		for _, p := range []*string{&a.raft, &a.grpc, &a.gossip} {
			if *p, err = localcluster.FreeAddr(); err != nil {
				return err
			}
		}
		as = append(as, a)
		gossip, grpcs = append(gossip, a.gossip), append(grpcs, a.grpc)
	}
	for i, a := range as {
		id := fmt.Sprintf("h%d", i+1)
		var join []string
		for j, b := range as {
			if j != i {
				join = append(join, b.gossip)
			}
		}
		heads = append(heads, &proc{name: "head " + id, bin: o.headBin, log: filepath.Join(logDir, id+".log"), args: []string{
			"--node-id", id, "--data-dir", filepath.Join(dir, id), "--raft-addr", a.raft, "--grpc-addr", a.grpc, "--gossip-addr", a.gossip, "--http-addr", "127.0.0.1:0",
			"--bootstrap-expect", "3", "--join", strings.Join(join, ","), "--worker-grace", o.workerGrace.String()}})
	}
	var workers []*proc
	defer func() {
		for _, w := range workers {
			w.stop()
		}
		for _, h := range heads {
			h.stop()
		}
	}()
	for _, h := range heads {
		if err := h.start(); err != nil {
			return err
		}
	}
	nextWorker := 0
	addWorker := func() (*proc, error) {
		nextWorker++
		id := fmt.Sprintf("w%d", nextWorker)
		addr, err := localcluster.FreeAddr()
		if err != nil {
			return nil, err
		}
		p := &proc{name: "worker " + id, bin: o.workerBin, log: filepath.Join(logDir, id+".log"), args: []string{
			"--node-id", id, "--data-dir", filepath.Join(dir, id), "--gossip-addr", addr, "--http-addr", "127.0.0.1:0", "--join", strings.Join(gossip, ","),
			"--runtime", "process", "--cpu-millis", "4000", "--memory-bytes", strconv.Itoa(4 << 30), "--nvml=false",
			// Heartbeats renew the lease (2/3 of the grace): several per lease.
			"--heartbeat-interval", (o.workerGrace / 8).String()}}
		if err := p.start(); err != nil {
			return nil, err
		}
		workers = append(workers, p)
		return p, nil
	}
	cl, err := client.Dial(ctx, grpcs, client.WithBackoff(20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	status := func() (*client.ClusterStatus, error) {
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return cl.ClusterStatus(c)
	}
	if err := waitUntil(ctx, 60*time.Second, "a leader among the head processes", func() bool {
		st, err := status()
		return err == nil && st.LeaderId != ""
	}); err != nil {
		return err
	}
	for range 2 {
		if _, err := addWorker(); err != nil {
			return err
		}
	}
	aliveWorkers := func(n int) error {
		return waitUntil(ctx, 60*time.Second, fmt.Sprintf("%d alive workers", n), func() bool {
			return aliveWorkers(ctx, cl, time.Second) == n
		})
	}
	if err := aliveWorkers(2); err != nil {
		return err
	}
	fmt.Printf("failover: 3 head processes, 2 worker processes (process runtime), %d repetitions each; logs in %s\n", o.reps, logDir)

	run := &failoverRun{}
	var acked []string
	submit := func(id string, n int, cmd ...string) error {
		gs := &client.GraphSpec{Id: id, Tenant: "bench"}
		for i := range n {
			gs.Tasks = append(gs.Tasks, &client.TaskSpec{Name: fmt.Sprintf("t%d", i), Image: "none", Command: cmd, MaxRetries: 3,
				Resources: &client.Resources{CpuMillis: 500, MemoryBytes: 64 << 20}})
		}
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := cl.Submit(c, gs); err != nil {
			return err
		}
		acked = append(acked, id)
		return nil
	}

	for i := range o.reps {
		// Leader: acknowledged work before the kill, then the kill.
		if err := submit(fmt.Sprintf("pre-%d", i), 20, "true"); err != nil {
			return fmt.Errorf("rep %d: submit before the kill: %w", i, err)
		}
		st, err := status()
		if err != nil {
			return err
		}
		li := slices.IndexFunc(heads, func(p *proc) bool { return p.name == "head "+st.LeaderId })
		if li < 0 {
			return fmt.Errorf("rep %d: leader %q is not one of ours", i, st.LeaderId)
		}
		heads[li].kill9()
		t0 := time.Now()
		probe := fmt.Sprintf("probe-%d", i)
		for {
			if err := submit(probe, 1, "true"); err == nil {
				break
			}
			if ctx.Err() != nil || time.Since(t0) > 2*time.Minute {
				return fmt.Errorf("rep %d: no submit committed within %v of the leader's kill", i, time.Since(t0))
			}
		}
		run.leaderMs = append(run.leaderMs, float64(time.Since(t0))/1e6)
		if err := heads[li].start(); err != nil {
			return err
		}
		// The restarted head has caught up when it applied what the new leader committed.
		st2, err := status()
		if err != nil {
			return err
		}
		one, err := client.Dial(ctx, []string{grpcs[li]})
		if err != nil {
			return err
		}
		err = waitUntil(ctx, 60*time.Second, "the restarted head to catch up", func() bool {
			c, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			s, err := one.ClusterStatus(c)
			return err == nil && s.LeaderId != "" && s.AppliedIndex >= st2.CommitIndex
		})
		one.Close()
		if err != nil {
			return err
		}

		// Worker: 4 tasks running, kill -9 the worker with most of them.
		wg := fmt.Sprintf("work-%d", i)
		if err := submit(wg, 4, "sleep", "4"); err != nil {
			return fmt.Errorf("rep %d: submit: %w", i, err)
		}
		var tasks []*client.Task
		if err := waitUntil(ctx, 60*time.Second, "4 tasks running", func() bool {
			c, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			ts, _, err := cl.ListTasks(c, client.TaskFilter{GraphID: wg, OmitSpec: true})
			if err != nil || len(ts) != 4 {
				return false
			}
			for _, t := range ts {
				if t.State != client.TaskRunning {
					return false
				}
			}
			tasks = ts
			return true
		}); err != nil {
			return fmt.Errorf("rep %d: %w", i, err)
		}
		count := map[string]int{}
		for _, t := range tasks {
			count[t.Attempts[len(t.Attempts)-1].WorkerId]++
		}
		victim := ""
		for w, n := range count {
			if victim == "" || n > count[victim] || (n == count[victim] && w < victim) {
				victim = w
			}
		}
		wi := slices.IndexFunc(workers, func(p *proc) bool { return p.name == "worker "+victim })
		if wi < 0 {
			return fmt.Errorf("rep %d: worker %q is not one of ours", i, victim)
		}
		moved := map[string]uint32{}
		for _, t := range tasks {
			if a := t.Attempts[len(t.Attempts)-1]; a.WorkerId == victim {
				moved[t.Id] = a.Number
			}
		}
		workers[wi].kill9()
		workers = slices.Delete(workers, wi, wi+1)
		t0 = time.Now()
		var last time.Time
		if _, err := addWorker(); err != nil {
			return err
		}
		if err := waitUntil(ctx, 2*time.Minute, fmt.Sprintf("the %d tasks of the killed worker %s running elsewhere", len(moved), victim), func() bool {
			c, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			ts, _, err := cl.ListTasks(c, client.TaskFilter{GraphID: wg, OmitSpec: true})
			if err != nil {
				return false
			}
			last = time.Time{}
			for _, t := range ts {
				n, ok := moved[t.Id]
				if !ok {
					continue
				}
				a := t.Attempts[len(t.Attempts)-1]
				if a.Number == n || a.WorkerId == victim || a.StartUnixNanos == 0 {
					return false
				}
				if s := time.Unix(0, a.StartUnixNanos); s.After(last) {
					last = s
				}
			}
			return true
		}); err != nil {
			return fmt.Errorf("rep %d: %w", i, err)
		}
		run.workerMs = append(run.workerMs, float64(last.Sub(t0))/1e6)
		if err := aliveWorkers(2); err != nil {
			return err
		}
		// Let the graph finish before the next kills, so each repetition's
		// tasks see one worker kill (and spend one of their 3 retries).
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		_, err = cl.Wait(wctx, wg)
		cancel()
		if err != nil {
			return fmt.Errorf("rep %d: wait for %s: %w", i, wg, err)
		}
		fmt.Printf("  rep %2d: leader kill -> committed submit %6.0f ms; worker kill -> %d tasks running elsewhere %6.0f ms\n",
			i+1, run.leaderMs[i], len(moved), run.workerMs[i])
	}

	// Every acknowledged task succeeded exactly once.
	for _, id := range acked {
		c, cancel := context.WithTimeout(ctx, 2*time.Minute)
		_, err := cl.Wait(c, id)
		cancel()
		if err != nil {
			return fmt.Errorf("wait for %s: %w", id, err)
		}
		ts, _, err := cl.ListTasks(ctx, client.TaskFilter{GraphID: id, OmitSpec: true})
		if err != nil {
			return err
		}
		for _, t := range ts {
			run.acknowledged++
			ok := 0
			for _, a := range t.Attempts {
				if a.State == client.TaskSucceeded {
					ok++
				}
			}
			if len(t.Attempts) > 1 {
				run.retried++
			}
			var as []string
			for _, a := range t.Attempts {
				as = append(as, fmt.Sprintf("#%d on %s %s %q", a.Number, a.WorkerId, a.State, a.Reason))
			}
			detail := fmt.Sprintf("%s: %s %q; attempts: %s", t.Id, t.State, t.Reason, strings.Join(as, "; "))
			switch {
			case !terminal(t.State):
				run.lost++
				run.lostDetail = append(run.lostDetail, detail)
			case t.State != client.TaskSucceeded:
				run.failed++
				run.lostDetail = append(run.lostDetail, detail)
			case ok > 1:
				run.duplicated++
			}
		}
	}
	fmt.Printf("  %d acknowledged tasks: %d lost, %d duplicated results, %d failed (%d retried)\n", run.acknowledged, run.lost, run.duplicated, run.failed, run.retried)
	for _, d := range run.lostDetail {
		fmt.Println("    not succeeded:", d)
	}
	if err := writeFailover(g.out, o, run); err != nil {
		return err
	}
	if run.lost+run.duplicated > 0 {
		return errors.New("failover lost or duplicated results (see failover.md)")
	}
	return nil
}

func writeFailover(out string, o failoverOptions, r *failoverRun) error {
	var rows [][]string
	sl, sw := series{name: "leader kill -9 -> first committed submit"}, series{name: "worker kill -9 -> its tasks running elsewhere"}
	for i := range r.leaderMs {
		rows = append(rows, []string{"leader", strconv.Itoa(i + 1), f2(r.leaderMs[i])})
		sl.xs, sl.ys = append(sl.xs, float64(i+1)), append(sl.ys, r.leaderMs[i]/1000)
	}
	for i := range r.workerMs {
		rows = append(rows, []string{"worker", strconv.Itoa(i + 1), f2(r.workerMs[i])})
		sw.xs, sw.ys = append(sw.xs, float64(i+1)), append(sw.ys, r.workerMs[i]/1000)
	}
	if err := writeCSV(filepath.Join(out, "failover.csv"), []string{"kill", "rep", "recovery_ms"}, rows); err != nil {
		return err
	}
	if err := linePlot(filepath.Join(out, "failover.png"), axes{title: "Recovery after kill -9, per repetition", x: "repetition", y: "recovery time (s)", yFrom0: true}, sl, sw); err != nil {
		return err
	}
	rep := newReport(out, "failover.md", "megaflow-bench failover")
	rep.p("3 megaflow-head processes (hashicorp/raft default timing: 1 s heartbeat and election timeouts) and 2 megaflow-worker processes (process runtime) on loopback; heads run with --worker-grace %v. %d repetitions of each kill. Leader: time from kill -9 of the leader to the first submit committed through the client library (it retries the heads, 2 s per try). Worker: time from kill -9 of the worker running most of 4 `sleep 4` tasks to the last of its tasks' new attempts starting on another worker (start time in the table).", o.workerGrace, o.reps)
	rep.p("")
	rep.table([]string{"kill -9 of", "p50", "p99", "max", "reps"}, [][]string{
		{"the leader head -> first committed submit", fmt.Sprintf("%.0f ms", percentile(r.leaderMs, 50)), fmt.Sprintf("%.0f ms", percentile(r.leaderMs, 99)), fmt.Sprintf("%.0f ms", percentile(r.leaderMs, 100)), strconv.Itoa(len(r.leaderMs))},
		{"a worker -> its tasks running elsewhere", fmt.Sprintf("%.0f ms", percentile(r.workerMs, 50)), fmt.Sprintf("%.0f ms", percentile(r.workerMs, 99)), fmt.Sprintf("%.0f ms", percentile(r.workerMs, 100)), strconv.Itoa(len(r.workerMs))},
	})
	rep.p("Worker recovery is bounded below by --worker-grace (%v): the leader waits that long for a dropped stream to come back before it re-queues the attempts (gossip may declare the worker dead sooner). Ratio of p50 worker recovery to the grace: %.2f.", o.workerGrace, percentile(r.workerMs, 50)/float64(o.workerGrace.Milliseconds()))
	rep.p("")
	rep.p("Acknowledged tasks at the end: **%d**; lost results (acknowledged, never reaching a terminal state in the table): **%d**; duplicated results (more than one successful attempt): **%d** (both must be 0); failed (ended without success, the failure recorded with its reason, listed below): **%d**; %d tasks ran more than one attempt.", r.acknowledged, r.lost, r.duplicated, r.failed, r.retried)
	rep.p("")
	if len(r.lostDetail) > 0 {
		rep.p("Tasks acknowledged that did not succeed (a live worker declared down counts as a lost attempt: after a leader kill, the new leader gives each worker --worker-grace from its election to reconnect):")
		rep.p("")
		for _, d := range r.lostDetail {
			rep.p("- `%s`", d)
		}
		rep.p("")
	}
	rep.p("![failover](failover.png)")
	return rep.save()
}

// terminal reports whether a task in state s will change no more.
func terminal(s client.TaskState) bool {
	switch s {
	case client.TaskSucceeded, client.TaskFailed, client.TaskCancelled, client.TaskTimedOut:
		return true
	}
	return false
}
