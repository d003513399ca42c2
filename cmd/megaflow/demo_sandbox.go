package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/examples/demo"
	"github.com/megaflow/megaflow/examples/demo/agent"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/worker"
)

// The demo's shapes (--mode): the same step, with the agent loop in the
// rollouts' tasks or in this process.
const (
	// modeGraph submits the step as a graph: each rollout's setup, rollout
	// and eval tasks run cmd/megaflow-agent in one session container.
	modeGraph = "graph"
	// modeSandbox runs the agent loop here: one sandbox per rollout, the
	// setup and eval tasks' commands and each agent step's tool command
	// an exec into it (docs/demo.md).
	modeSandbox = "sandbox"
)

// Sandbox mode's bounds.
const (
	// sandboxWaitReady is how long a rollout waits for its sandbox to be
	// READY (placement included): the most CreateSandbox waits.
	sandboxWaitReady = 10 * time.Minute
	// sandboxLifetime ends a sandbox this process forgot (killed before it
	// closed it); more than a rollout's worst case of timeouts and retries.
	sandboxLifetime = 2 * time.Hour
	// sandboxIdle ends it sooner when nothing execs in it: longer than any
	// step of the data (at most demo.MaxStepSeconds) or initialisation.
	sandboxIdle = 5 * time.Minute
	// toolTimeout bounds one tool command of the model.
	toolTimeout = time.Minute
	// closeTimeout bounds the close of a sandbox, and the final listing.
	closeTimeout = 30 * time.Second
	// modelReadyTimeout bounds the wait for the model service's endpoint.
	modelReadyTimeout = 2 * time.Minute
	// maxRetryBackoff caps the wait before a task's next attempt (1 s
	// doubled per retry, as the head's default).
	maxRetryBackoff = 30 * time.Second
)

// labelDemoStep labels each sandbox with the step's id.
const labelDemoStep = "megaflow.io/demo-step"

// checkSandboxRuntime refuses --mode sandbox where no Docker Engine can
// serve sandboxes, before anything starts: --runtime process, or auto with
// no engine answering. It leaves lo.Runtime "docker", so that the cluster
// never falls back to the process runtime.
func checkSandboxRuntime(ctx context.Context, lo *localOptions) error {
	if lo.Runtime == "process" {
		return errs.New(errs.InvalidArgument, "--mode sandbox with --runtime process: only the Docker runtime serves sandboxes "+
			"(the process runtime cannot exec into a running task); drop --runtime process and run a Docker Engine, "+
			"or use --mode graph, which runs on the process runtime too")
	}
	rt, err := openDocker(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return errs.New(errs.FailedPrecondition, "--mode sandbox: no Docker Engine answers (%v), and only the Docker runtime serves sandboxes; "+
			"start the engine (or set DOCKER_HOST), or use --mode graph, which falls back to the process runtime", err)
	}
	_ = rt.Close()
	lo.Runtime = "docker"
	return nil
}

// rolloutPlan is one rollout of the built step: its profile and its three
// tasks, whose commands, images, resources, retries and timeouts sandbox
// mode keeps.
type rolloutPlan struct {
	profile              demo.Profile
	setup, rollout, eval *wire.TaskSpec
}

// plansOf returns the rollouts of st in profile order.
func plansOf(st *demo.Step) ([]rolloutPlan, error) {
	byName := map[string]*wire.TaskSpec{}
	for _, t := range st.Graph.GetTasks() {
		byName[t.GetName()] = t
	}
	out := make([]rolloutPlan, 0, len(st.Profiles))
	for _, p := range st.Profiles {
		id := p.Instance.ID
		rp := rolloutPlan{profile: p, setup: byName["setup."+id], rollout: byName["rollout."+id], eval: byName["eval."+id]}
		if rp.setup == nil || rp.rollout == nil || rp.eval == nil {
			return nil, fmt.Errorf("the step's graph lacks a task of instance %s (want setup, rollout and eval)", id)
		}
		out = append(out, rp)
	}
	return out, nil
}

// sandboxParallel is how many rollouts sandbox mode runs at once: as many
// sandboxes as the worker's CPU holds beside the model service, at the
// smallest rollout's request, which is what bounds graph mode's sessions
// too; at least 1, at most the rollouts.
func sandboxParallel(workerMillis, modelMillis int64, plans []rolloutPlan) int {
	least := int64(0)
	for _, rp := range plans {
		if m := rp.setup.GetResources().GetCpuMillis(); m > 0 && (least == 0 || m < least) {
			least = m
		}
	}
	n := len(plans)
	if least > 0 {
		n = min(n, int((workerMillis-modelMillis)/least))
	}
	return max(n, 1)
}

// sandboxRunner runs a built demo step in sandbox mode. Its methods run on
// the rollouts' goroutines.
type sandboxRunner struct {
	c    *client.Client
	o    demo.Options
	step *sandboxStep
	// model returns the model's endpoint (http://host:port) for a new
	// rollout attempt: as graph mode's tasks get it at each assignment.
	model func(ctx context.Context) (string, error)
	http  *http.Client
	now   func() time.Time
	// backoff is the wait before a task's second attempt, doubled for
	// each next one up to maxRetryBackoff (the head's default: 1 s).
	backoff time.Duration
}

// run runs every rollout of plans, parallel at once, and returns when all
// have ended and closed their sandboxes. ctx ending stops the rollouts
// (each closes its sandbox) and starts no new one.
func (r *sandboxRunner) run(ctx context.Context, plans []rolloutPlan, parallel int) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() { // owned by run: ends once next is closed; waited for below
			defer wg.Done()
			for i := range next {
				r.runRollout(ctx, i, plans[i])
			}
		}()
	}
feed:
	for i := range plans {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
}

// runRollout runs rollout ri: its setup, rollout and eval tasks in a
// sandbox of its own, closed when the rollout ends, however it ends.
func (r *sandboxRunner) runRollout(ctx context.Context, ri int, rp rolloutPlan) {
	tasks := r.step.rollouts[ri].tasks
	skipRest := func(from int, why string) {
		for _, i := range tasks[from:] {
			r.step.skip(i, why)
		}
	}
	// The sandbox is created before the setup's first attempt, and again
	// before its next one when it could not start or ended during the
	// setup, as graph mode retries a setup whose session container failed
	// in a new one. Its creation (placement, start) is not part of the
	// task's time, as a container's start is not part of an attempt's.
	var sb *client.Sandbox
	defer func() {
		if sb != nil {
			r.closeSandbox(ctx, ri, sb)
		}
	}()
	ensure := func(ctx context.Context) error {
		if sb != nil {
			return nil
		}
		var err error
		sb, err = r.createSandbox(ctx, ri, rp)
		return err
	}
	if !r.runTask(ctx, tasks[0], rp.setup, ensure, func(ctx context.Context, _ int) error {
		res, err := r.exec(ctx, sb, rp.setup.GetCommand(), remaining(ctx))
		if err != nil {
			if sandboxEnded(err) {
				r.closeSandbox(ctx, ri, sb)
				sb = nil
				return fmt.Errorf("%v (the next attempt gets a new sandbox)", err) // retryable: not an *errs.Error
			}
			return err
		}
		return execExit("setup", res)
	}) {
		skipRest(1, "its setup did not succeed")
		return
	}
	if !r.runTask(ctx, tasks[1], rp.rollout, nil, func(ctx context.Context, attempt int) error {
		return r.agentLoop(ctx, ri, sb, rp.profile, attempt)
	}) {
		skipRest(2, "its rollout did not succeed")
		return
	}
	r.runTask(ctx, tasks[2], rp.eval, nil, func(ctx context.Context, _ int) error {
		res, err := r.exec(ctx, sb, rp.eval.GetCommand(), remaining(ctx))
		if err != nil {
			return err
		}
		if err := execExit("eval", res); err != nil {
			return err
		}
		v, err := resultField(res.Stdout, rewardMetric)
		if err != nil {
			return fmt.Errorf("eval: %w", err)
		}
		r.step.setReward(tasks[2], v)
		return nil
	})
}

// createSandbox creates rollout ri's sandbox and waits until it is READY.
// One that is not (it could not start, or the wait ended) is closed, as
// it may exist all the same, and the error says why; it is retryable (not
// an *errs.Error), since another sandbox may start.
func (r *sandboxRunner) createSandbox(ctx context.Context, ri int, rp rolloutPlan) (*client.Sandbox, error) {
	id := spec.NewSandboxID(rand.Reader)
	res := rp.setup.GetResources()
	sb, err := r.c.CreateSandbox(ctx, client.SandboxSpec{ID: id, Tenant: r.o.Tenant, Image: rp.setup.GetImage(),
		CPUMillis: res.GetCpuMillis(), MemoryBytes: res.GetMemoryBytes(), WorkingDir: r.o.WorkRoot,
		Labels:   map[string]string{labelDemoStep: r.o.GraphID, "megaflow.io/instance": rp.profile.Instance.ID},
		Lifetime: sandboxLifetime, IdleTimeout: sandboxIdle, WaitReady: sandboxWaitReady})
	if err == nil {
		r.step.sandboxCreated(ri, id)
		return sb, nil
	}
	if sb == nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		sb, _ = r.c.GetSandbox(cctx, id) // nil: never created
		cancel()
	}
	if sb != nil {
		r.step.sandboxCreated(ri, id)
		r.closeSandbox(ctx, ri, sb)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("no sandbox: %v", err)
}

// sandboxEnded reports whether err says the sandbox ended or is gone:
// every later call in it fails alike.
func sandboxEnded(err error) bool {
	switch errs.ReasonOf(err) {
	case client.ReasonSandboxClosed, client.ReasonSandboxExpired, client.ReasonSandboxLost, client.ReasonSandboxFailed,
		client.ReasonSandboxNotFound:
		return true
	}
	return false
}

// closeSandbox closes rollout ri's sandbox sb under its own deadline,
// even when ctx has ended, and records it.
func (r *sandboxRunner) closeSandbox(ctx context.Context, ri int, sb *client.Sandbox) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	r.step.sandboxClosed(ri, sb.Close(cctx))
}

// runTask runs task ti, whose graph-mode spec is ts, by attempts of do as
// the head would: at most 1 + max_retries attempts, each under the task's
// timeout, 1 s doubled between them. prepare (nil: none) runs before each
// attempt, untimed (the attempt fails at once with its error). An attempt
// is not retried when the sandbox ended (every attempt would fail alike).
// It reports whether an attempt succeeded.
func (r *sandboxRunner) runTask(ctx context.Context, ti int, ts *wire.TaskSpec, prepare func(ctx context.Context) error,
	do func(ctx context.Context, attempt int) error) bool {
	for attempt := 1; ; attempt++ {
		var err error
		if prepare != nil {
			err = prepare(ctx)
		}
		r.step.begin(ti, r.now())
		timedOut := false
		if err == nil {
			actx, cancel := context.WithCancel(ctx)
			if s := ts.GetTimeoutSeconds(); s > 0 {
				actx, cancel = context.WithTimeout(ctx, time.Duration(s)*time.Second)
			}
			err = do(actx, attempt)
			timedOut = errors.Is(actx.Err(), context.DeadlineExceeded)
			cancel()
		}
		if err == nil {
			r.step.end(ti, client.TaskSucceeded, "", r.now())
			return true
		}
		if ctx.Err() != nil {
			return false // finish cancels it
		}
		state := client.TaskFailed
		if timedOut {
			state, err = client.TaskTimedOut, fmt.Errorf("timed out after %ds (the task's timeout): %w", ts.GetTimeoutSeconds(), err)
		}
		if attempt > int(ts.GetMaxRetries()) || !retryable(err) {
			r.step.end(ti, state, err.Error(), r.now())
			return false
		}
		r.step.end(ti, client.TaskQueued, err.Error(), r.now())
		if agent.Sleep(ctx, min(r.backoff<<(attempt-1), maxRetryBackoff)) != nil {
			return false
		}
	}
}

// retryable reports whether another attempt may succeed: not when the
// sandbox ended or is not there, nor for a request that is malformed.
func retryable(err error) bool {
	switch errs.ClassOf(err) {
	case errs.FailedPrecondition, errs.NotFound, errs.InvalidArgument, errs.PermissionDenied:
		return false
	}
	return true
}

// agentLoop is one attempt of rollout ri's agent in sandbox sb: per step
// of the profile, a model call from this process, an exec of the tool
// command it answers, a trajectory line, and the rest of the step's time;
// then the trajectory is written into the sandbox for the eval, as the
// agent writes it. Attempts the data makes fail break off half-way, as
// the agent's do (its exit 17).
func (r *sandboxRunner) agentLoop(ctx context.Context, ri int, sb *client.Sandbox, p demo.Profile, attempt int) error {
	url, err := r.model(ctx)
	if err != nil {
		return err
	}
	m := &agent.Model{URL: url, HTTP: r.http}
	conv := agent.NewConversation(p.Instance.ID)
	var traj bytes.Buffer
	enc := json.NewEncoder(&traj)
	for i, ms := range p.StepMillis {
		start := r.now()
		if attempt < p.Attempts && i == len(p.StepMillis)/2 {
			return fmt.Errorf("attempt %d: the environment broke at step %d (a runtime failure of the data): the rollout needs another attempt", attempt, i+1)
		}
		cmd, err := m.Next(ctx, conv.Messages())
		r.step.modelCalled()
		if err != nil {
			return fmt.Errorf("step %d: model at %s: %w", i+1, url, err)
		}
		modelMs := r.now().Sub(start).Milliseconds()
		res, err := r.exec(ctx, sb, []string{"sh", "-c", cmd}, toolTimeout)
		if err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
		out := append(res.Stdout, res.Stderr...)
		if err := enc.Encode(agent.Step{Step: i + 1, Attempt: attempt, ModelMillis: modelMs, Tool: cmd, ToolExit: res.ExitCode,
			OutputBytes: len(out)}); err != nil {
			return err
		}
		conv.Observe(cmd, res.ExitCode, out)
		if err := agent.Sleep(ctx, time.Duration(ms)*time.Millisecond-r.now().Sub(start)); err != nil {
			return err
		}
	}
	end := "finished"
	if !p.Finished {
		end = "step-limit"
	}
	if err := enc.Encode(agent.Step{Step: len(p.StepMillis), Attempt: attempt, End: end}); err != nil {
		return err
	}
	if err := sb.WriteFile(ctx, path.Join(r.o.WorkRoot, "trajectory.jsonl"), traj.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing the trajectory: %w", err)
	}
	r.step.fileWritten()
	r.step.stepsDone(ri, len(p.StepMillis))
	return nil
}

// exec runs argv in sb (in the work root, killed after timeout) and
// records its time, request to exit.
func (r *sandboxRunner) exec(ctx context.Context, sb *client.Sandbox, argv []string, timeout time.Duration) (*client.ExecResult, error) {
	start := r.now()
	res, err := sb.Exec(ctx, argv, client.ExecOptions{Cwd: r.o.WorkRoot, Timeout: timeout})
	if err != nil {
		return nil, fmt.Errorf("exec %q in sandbox %s: %w", strings.Join(argv, " "), sb.ID(), err)
	}
	r.step.execDone(r.now().Sub(start))
	return res, nil
}

// remaining is the time left before ctx's deadline, in whole milliseconds
// (an exec's timeout); 0, the exec's default, without one.
func remaining(ctx context.Context) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return max(time.Until(dl).Truncate(time.Millisecond), time.Millisecond)
}

// execExit is nil for an exec that exited 0, else an error naming what
// ran, its exit and the last line of its output.
func execExit(what string, res *client.ExecResult) error {
	if res.ExitCode == 0 {
		return nil
	}
	last := lastLine(res.Stderr)
	if last == "" {
		last = lastLine(res.Stdout)
	}
	if res.TimedOut {
		return fmt.Errorf("%s: killed at its timeout (exit %d): %s", what, res.ExitCode, last)
	}
	return fmt.Errorf("%s: exit code %d: %s", what, res.ExitCode, last)
}

// lastLine returns the last non-empty line of b.
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// resultField returns the number field of the last MEGAFLOW_RESULT line
// of out (the task result's line, worker.ResultPrefix).
func resultField(out []byte, field string) (float64, error) {
	var line string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, worker.ResultPrefix) {
			line = strings.TrimPrefix(l, worker.ResultPrefix)
		}
	}
	if line == "" {
		return 0, fmt.Errorf("no %sline in its output", worker.ResultPrefix)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		return 0, fmt.Errorf("result %q is not a JSON object: %w", line, err)
	}
	v, ok := res[field].(float64)
	if !ok {
		return 0, fmt.Errorf("result %q has no number %q", line, field)
	}
	return v, nil
}

// modelEndpoint returns a function that returns the model service's first
// ready endpoint, waiting at most modelReadyTimeout for one; it fails
// early when the model's graph ended.
func modelEndpoint(c *client.Client, graphID string) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, modelReadyTimeout)
		defer cancel()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			svcs, err := c.ListServices(ctx, demo.Model, client.ReadOptions{})
			if err == nil && len(svcs) > 0 && len(svcs[0].GetEndpoints()) > 0 {
				return svcs[0].GetEndpoints()[0].GetUrl(), nil
			}
			if g, _, gerr := c.GetGraph(ctx, graphID, client.ReadOptions{}); gerr == nil && client.GraphTerminal(g.State) {
				return "", fmt.Errorf("the model's graph %s ended (%s) without a ready endpoint: megaflow tasks %s says why", graphID, graphState(g.State), graphID)
			}
			select {
			case <-ctx.Done():
				if err == nil {
					err = errors.New("no ready endpoint")
				}
				return "", fmt.Errorf("the model service %q: %v after %v (megaflow tasks %s says why)", demo.Model, err, modelReadyTimeout, graphID)
			case <-t.C:
			}
		}
	}
}

// runSandboxStep runs step in sandbox mode on the local cluster lc
// through c, prints its progress and summary, and returns the exit
// code's error. model is the model's endpoint function.
func runSandboxStep(ctx context.Context, g *globals, c *client.Client, lc *localCluster, step *demo.Step, o demo.Options,
	model func(context.Context) (string, error), modelMillis int64) error {
	plans, err := plansOf(step)
	if err != nil {
		return err
	}
	parallel := sandboxParallel(lc.worker.Capacity().CPUMillis, modelMillis, plans)
	quiet := g.output == "json"
	if !quiet {
		fmt.Fprintf(g.stdout, "== sandbox mode: the agent loop runs in this process; %s, one per rollout (its repository's image, "+
			"no network), at most %d at once; each agent step is a model call from here and an exec of its command\n",
			plural(len(plans), "sandbox"), parallel)
	}
	st := newSandboxStep(o.GraphID, plans)
	r := &sandboxRunner{c: c, o: o, step: st, model: model, http: &http.Client{Timeout: 30 * time.Second}, now: time.Now, backoff: time.Second}

	done := make(chan struct{})
	var wg sync.WaitGroup
	if !quiet {
		wg.Add(1)
		go func() { // owned by runSandboxStep: ends when done closes; waited for below
			defer wg.Done()
			showProgress(g.stdout, st, done)
		}()
	}
	r.run(ctx, plans, parallel)
	close(done)
	wg.Wait()

	// The closed sandboxes' containers go before the cluster stops.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer wcancel()
	if left := lc.waitRemoved(wctx, st.sandboxIDs()); len(left) > 0 {
		fmt.Fprintf(g.stderr, "megaflow demo: %d closed sandbox(es)' containers still there after %v: %s\n", len(left), removeTimeout, strings.Join(left, ", "))
	}

	// What is left: the live sandboxes this step created.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	left, unknown := 0, ""
	if live, err := c.ListSandboxes(lctx, o.Tenant, false); err != nil {
		unknown = err.Error()
	} else {
		for _, sb := range live {
			if sb.GetLabels()[labelDemoStep] == o.GraphID {
				left++
			}
		}
	}
	st.finish(time.Now(), ctx.Err() != nil, parallel, left, unknown)
	s := st.summary()
	if quiet {
		if err := g.printJSON(s); err != nil {
			return err
		}
	} else {
		if f := st.failures(); len(f) > 0 {
			fmt.Fprintf(g.stdout, "\n%s did not succeed:\n", plural(len(f), "task"))
			for i, l := range f {
				if i == 5 {
					fmt.Fprintf(g.stdout, "  ... and %d more (-o json lists every rollout)\n", len(f)-5)
					break
				}
				fmt.Fprintf(g.stdout, "  %s\n", l)
			}
		}
		printSummary(g.stdout, s)
	}
	switch {
	case s.State == "cancelled":
		return &codeError{code: exitInterrupted, msg: "interrupted: the rollouts stopped and their sandboxes were closed"}
	case s.ExitCode != 0:
		return &codeError{code: s.ExitCode, msg: fmt.Sprintf("step %s failed: %d failed, %d timed out", s.GraphID, s.Counts["failed"], s.Counts["timed_out"])}
	case s.Sandbox.Left > 0 || len(s.Sandbox.CloseErrors) > 0:
		return fmt.Errorf("step %s: %d sandbox(es) left open, %d close error(s) (megaflow sandbox ls)", s.GraphID, s.Sandbox.Left, len(s.Sandbox.CloseErrors))
	}
	return nil
}

// showProgress prints a line of st's task counts every 5 s while they
// change, as submit --watch does without a terminal, until done closes;
// then the last line.
func showProgress(w io.Writer, st *sandboxStep, done <-chan struct{}) {
	const every = 5 * time.Second
	start := time.Now()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last, lastAt := "", time.Time{}
	show := func(force bool) {
		c := st.counts()
		l := countsLine(c)
		if force || l != last && time.Since(lastAt) >= every {
			total := c.Pending + c.Queued + c.Running + c.Succeeded + c.Failed + c.Cancelled + c.TimedOut
			fmt.Fprintf(w, "%s  %s  %d/%d done  %s\n", time.Since(start).Round(time.Second), st.id,
				c.Succeeded+c.Failed+c.Cancelled+c.TimedOut, total, l)
			last, lastAt = l, time.Now()
		}
	}
	show(true)
	for {
		select {
		case <-done:
			show(true)
			return
		case <-t.C:
			show(false)
		}
	}
}
