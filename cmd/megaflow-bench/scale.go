package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/bench/sim"
	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// scaleOptions are the flags of `megaflow-bench scale`.
type scaleOptions struct {
	ns             []int
	deployments    []string
	modes          []string
	compress       float64
	priceSmall     float64
	priceLarge     float64
	tasksPerWorker int
	graphSize      int
	submitters     int
	reps           int // repetitions of the whole sequence
}

// scaleMaxReps bounds --reps.
const scaleMaxReps = 20

func defaultScaleOptions(full bool) scaleOptions {
	o := scaleOptions{
		ns:          []int{1, 100, 2000, 10_000},
		deployments: []string{string(sim.Distributed), string(sim.Centralized)},
		modes:       []string{string(sim.Ephemeral), string(sim.Persistent)},
		compress:    300, priceSmall: sim.SmallPricePerHour, priceLarge: sim.LargePricePerHour,
		tasksPerWorker: 1000, graphSize: 1000, submitters: 4, reps: 1,
	}
	if full {
		o.ns = []int{1, 10, 100, 1000, 2000, 5000, 10_000}
		o.compress = 60
	}
	return o
}

func (o *scaleOptions) validate() error {
	var list []error
	for _, n := range o.ns {
		if n < 1 || n > 100_000 {
			list = append(list, fmt.Errorf("--n %d is outside [1, 100000]", n))
		}
	}
	for _, d := range o.deployments {
		if d != string(sim.Distributed) && d != string(sim.Centralized) {
			list = append(list, fmt.Errorf("--deployments: unknown deployment %q; use distributed or centralized", d))
		}
	}
	for _, m := range o.modes {
		if m != string(sim.Ephemeral) && m != string(sim.Persistent) {
			list = append(list, fmt.Errorf("--modes: unknown mode %q; use ephemeral or persistent", m))
		}
	}
	if err := sim.DefaultModel(o.compress).Validate(); err != nil {
		list = append(list, fmt.Errorf("--compress: %w", err))
	}
	if o.priceSmall <= 0 || o.priceLarge <= 0 {
		list = append(list, fmt.Errorf("--price-small %g and --price-large %g must be positive (USD per instance-hour)", o.priceSmall, o.priceLarge))
	}
	if o.tasksPerWorker < 1 || o.tasksPerWorker > 1024 {
		list = append(list, fmt.Errorf("--tasks-per-worker %d is outside [1, 1024] (a worker's start cap)", o.tasksPerWorker))
	}
	if o.reps < 1 || o.reps > scaleMaxReps {
		list = append(list, fmt.Errorf("--reps %d is outside [1, %d]", o.reps, scaleMaxReps))
	}
	if o.graphSize < 1 || o.submitters < 1 {
		list = append(list, fmt.Errorf("--graph-size %d and --submitters %d must be at least 1", o.graphSize, o.submitters))
	}
	return errors.Join(list...)
}

func scaleCmd(g *globals) *cobra.Command {
	o := defaultScaleOptions(false)
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "wall time, start-up, utilization and cost from 1 to 10,000 simulated instances' tasks (the paper's Figures 3-5)",
		Long: `scale runs the real system (3 heads on loopback, workers in this process)
with simulated instances: each worker offers a group of instances of one shape
and the fake runtime gives each task the model's start-up time and a
contention-slowed work time (bench/sim), time-compressed by --compress.
For each deployment, mode and N it submits N tasks at once and measures the
makespan, each task's start-up latency and orchestration overhead (time in the
system outside the modelled start-up and work), instance-hours and cost.
--reps runs the whole sequence again (interleaved: every cell once, then
again); the ratios then give min / median / max over the repetitions, each
ratio taken within its repetition, and the plots show the first.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.full && !cmd.Flags().Changed("n") {
				o.ns = defaultScaleOptions(true).ns
			}
			if g.full && !cmd.Flags().Changed("compress") {
				o.compress = defaultScaleOptions(true).compress
			}
			if err := o.validate(); err != nil {
				return err
			}
			return runScale(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.ns, "n", o.ns, "task counts to run (--full: 1,10,100,1000,2000,5000,10000)")
	f.StringSliceVar(&o.deployments, "deployments", o.deployments, "deployments: distributed (8 vCPU / 16 GiB, 1 task each), centralized (208 cores / 3 TiB, 50 tasks each)")
	f.StringSliceVar(&o.modes, "modes", o.modes, "execution modes: ephemeral, persistent")
	f.Float64Var(&o.compress, "compress", o.compress, "time compression: simulated time / wall time (--full: 60)")
	f.Float64Var(&o.priceSmall, "price-small", o.priceSmall, "USD per hour of a distributed instance (AWS c6g.2xlarge on demand)")
	f.Float64Var(&o.priceLarge, "price-large", o.priceLarge, "USD per hour of a centralized instance (implied by the paper's 1,470 USD)")
	f.IntVar(&o.tasksPerWorker, "tasks-per-worker", o.tasksPerWorker, "task slots per worker (its simulated instances' tasks); more tasks get more workers")
	f.IntVar(&o.graphSize, "graph-size", o.graphSize, "tasks per submitted graph")
	f.IntVar(&o.submitters, "submitters", o.submitters, "concurrent submitting clients")
	f.IntVar(&o.reps, "reps", o.reps, "repetitions of the whole sequence (ratios: min / median / max)")
	return cmd
}

// scaleResult is one (deployment, mode, N) run.
type scaleResult struct {
	rep               int // repetition, from 0
	d                 sim.Deployment
	mode              sim.Mode
	n, instances, wks int
	makespan          time.Duration // wall, first submit to last result recorded
	startup           []float64     // per task, simulated minutes, submit to work begins
	overheadMs        []float64     // per task, wall ms outside the modelled start-up and work
	// The overhead's parts, per task, wall ms: submit to assignment
	// committed (queueing and placement), assignment to the runtime's
	// Start or Exec (dispatch to the worker), work ended to result
	// recorded (exit reported and committed).
	queueMs, dispatchMs, reportMs []float64
	instanceHours, cost           float64
	cores                         float64 // this process's CPU time / wall time during the run
	succeeded, other              int
	retried                       int
	leaderChanges                 uint64 // Raft terms passed during the measured step
	util                          []utilSample
}

type utilSample struct {
	at                   time.Duration // wall since the first submit
	cpu, mem             float64       // fraction of held instances allocated to tasks
	procCores, heapBytes float64       // measured: this process (heads + workers)
}

func runScale(ctx context.Context, g *globals, o scaleOptions) error {
	model := sim.DefaultModel(o.compress)
	fmt.Printf("scale: time compressed %gx: a task's %v of work runs %v; N = %v\n",
		o.compress, model.Work, model.Wall(model.Work), o.ns)
	log, closer, err := newLogger(filepath.Join(g.out, "scale.log"), g.verbose)
	if err != nil {
		return err
	}
	defer closer.Close()
	var results []*scaleResult
	for i := range o.reps {
		for _, d := range o.deployments {
			for _, m := range o.modes {
				for _, n := range o.ns {
					start := time.Now()
					r, err := scaleOnce(ctx, g, o, model, sim.Deployment(d), sim.Mode(m), n, log)
					if err != nil {
						return fmt.Errorf("scale %s %s n=%d (repetition %d): %w", d, m, n, i+1, err)
					}
					r.rep = i
					results = append(results, r)
					fmt.Printf("  rep %d %-11s %-10s n=%-6d makespan %6.1f sim-min (%5.1fs wall), start-up p50 %5.2f sim-min, overhead p50 %6.1f ms/task (queue %.0f, dispatch %.0f, report %.0f), cost %8.1f USD, %d ok, %d not, %d leader changes (run %.0fs)\n",
						i+1, d, m, n, model.Simulated(r.makespan).Minutes(), r.makespan.Seconds(), percentile(r.startup, 50),
						percentile(r.overheadMs, 50), percentile(r.queueMs, 50), percentile(r.dispatchMs, 50), percentile(r.reportMs, 50), r.cost, r.succeeded, r.other, r.leaderChanges, time.Since(start).Seconds())
				}
			}
		}
	}
	return writeScale(g.out, o, model, results)
}

// scaleOnce runs one deployment, mode and N on a fresh cluster.
func scaleOnce(ctx context.Context, g *globals, o scaleOptions, model sim.Model, d sim.Deployment, mode sim.Mode, n int, log *slog.Logger) (*scaleResult, error) {
	dir, err := os.MkdirTemp("", "megaflow-bench-scale-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	c, err := newCluster(ctx, dir, 3, log, nil)
	if err != nil {
		return nil, err
	}
	defer c.Stop()

	shape := sim.DefaultShape(d)
	shape.PricePerHour = o.priceSmall
	if d == sim.Centralized {
		shape.PricePerHour = o.priceLarge
	}
	instances := shape.Instances(n)
	perWorker := max(1, o.tasksPerWorker/shape.TasksPerInstance)
	var groups []*sim.Group
	var rts []*fake.Runtime
	warm := 0
	for i := 0; i*perWorker < instances; i++ {
		inst := min(perWorker, instances-i*perWorker)
		slots := inst * shape.TasksPerInstance
		rt := fake.New(nil)
		grp, err := sim.NewGroup(model, shape, d, mode, n, inst, nil)
		if err != nil {
			return nil, err
		}
		grp.Attach(rt)
		groups, rts = append(groups, grp), append(rts, rt)
		pool := min(1024, slots)
		if mode == sim.Persistent {
			warm += pool
		}
		capacity := worker.Capacity{CPUMillis: int64(inst) * shape.CPUMillis, MemoryBytes: int64(inst) * shape.MemoryBytes}
		if _, err := c.addWorker(rt, capacity, func(cfg *worker.Config) {
			cfg.MaxConcurrentStarts = pool
			cfg.PoolMax = pool
			cfg.PoolIdle = 200 * time.Millisecond
			cfg.PoolKeeper = []string{sim.KeeperProgram}
			if mode == sim.Persistent {
				cfg.PoolMin = pool
			}
		}); err != nil {
			return nil, err
		}
	}
	cl, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := c.waitWorkers(ctx, cl, len(rts)); err != nil {
		return nil, err
	}
	cpu, mem := shape.TaskRequest()
	task := func(name string, cmd ...string) *client.TaskSpec {
		m := client.ModeEphemeral
		if mode == sim.Persistent {
			m = client.ModePersistent
		}
		return &client.TaskSpec{Name: name, Image: "megaflow/sim-rollout:1", Command: cmd, Type: "train", Mode: m,
			Resources: &client.Resources{CpuMillis: cpu, MemoryBytes: mem}}
	}
	tag := fmt.Sprintf("%s-%s-%d", d, mode, n)
	if mode == sim.Persistent {
		// Persistent mode's point is warm containers: fill every worker's
		// pool (PoolMin) with a warm-up step first, as the step before would.
		wg := &client.GraphSpec{Id: "warmup-" + tag, Tenant: "bench"}
		for i := range len(rts) * 2 {
			wg.Tasks = append(wg.Tasks, task(fmt.Sprintf("w%d", i), "true"))
		}
		if _, err := cl.Submit(ctx, wg); err != nil {
			return nil, fmt.Errorf("submit the warm-up: %w", err)
		}
		if _, err := cl.Wait(ctx, wg.Id); err != nil {
			return nil, fmt.Errorf("wait for the warm-up: %w", err)
		}
		if err := waitUntil(ctx, 5*time.Minute, fmt.Sprintf("%d warm containers", warm), func() bool {
			total := 0
			for _, rt := range rts {
				total += rt.Running()
			}
			return total >= warm
		}); err != nil {
			return nil, err
		}
	}

	// The measured step: n tasks at once, in graphs of graphSize.
	var graphs []*client.GraphSpec
	for i := 0; i < n; i += o.graphSize {
		gs := &client.GraphSpec{Id: fmt.Sprintf("%s-g%d", tag, len(graphs)), Tenant: "bench"}
		for j := i; j < min(n, i+o.graphSize); j++ {
			gs.Tasks = append(gs.Tasks, task(fmt.Sprintf("t%d", j), sim.TaskProgram, "--instance", strconv.Itoa(j)))
		}
		graphs = append(graphs, gs)
	}
	res := &scaleResult{d: d, mode: mode, n: n, instances: instances, wks: len(rts)}
	sctx, stopSampling := context.WithCancel(ctx)
	t0 := time.Now()
	term0 := c.term()
	cpu0 := cpuTime()
	samples := make(chan []utilSample, 1)
	go func() { samples <- sampleProcess(sctx, t0) }()
	submitted := make([]time.Time, len(graphs))
	runCtx, cancel := context.WithTimeout(ctx, 3*model.Wall(model.Work+model.CentralizedStartup[1])+5*time.Minute)
	defer cancel()
	errc := make(chan error, len(graphs))
	var next int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range o.submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(graphs) {
					return
				}
				submitted[i] = time.Now()
				if _, err := cl.Submit(runCtx, graphs[i]); err != nil {
					errc <- fmt.Errorf("submit %s: %w", graphs[i].Id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		stopSampling()
		return nil, err
	default:
	}
	for _, gs := range graphs {
		if _, err := cl.Wait(runCtx, gs.Id); err != nil {
			stopSampling()
			return nil, fmt.Errorf("wait for %s: %w", gs.Id, err)
		}
	}
	wall := time.Since(t0)
	res.leaderChanges = c.term() - term0
	res.cores = (cpuTime() - cpu0).Seconds() / wall.Seconds()
	stopSampling()
	proc := <-samples

	recs := map[string]sim.Record{}
	var all []sim.Record
	var spans [][2]time.Time
	for _, grp := range groups {
		for _, r := range grp.Records() {
			recs[r.TaskID] = r
			all = append(all, r)
		}
		spans = append(spans, grp.InstanceSpans()...)
	}
	var last time.Time
	for i, gs := range graphs {
		for tok := ""; ; {
			ts, nt, err := cl.ListTasks(ctx, client.TaskFilter{GraphID: gs.Id, PageSize: 1000, PageToken: tok, OmitSpec: true})
			if err != nil {
				return nil, fmt.Errorf("list the tasks of %s: %w", gs.Id, err)
			}
			for _, t := range ts {
				if t.State != client.TaskSucceeded {
					res.other++
					continue
				}
				res.succeeded++
				if len(t.Attempts) > 1 {
					res.retried++
				}
				rec, ok := recs[t.Id]
				if !ok {
					return nil, fmt.Errorf("task %s succeeded but the simulated instances never ran it", t.Id)
				}
				done := time.Unix(0, t.UpdateUnixNanos)
				if done.After(last) {
					last = done
				}
				res.startup = append(res.startup, model.Simulated(rec.Called.Add(rec.Startup).Sub(submitted[i])).Minutes())
				res.overheadMs = append(res.overheadMs, float64(done.Sub(submitted[i])-rec.Startup-rec.Work)/1e6)
				a := t.Attempts[len(t.Attempts)-1]
				assigned := time.Unix(0, a.AssignUnixNanos)
				res.queueMs = append(res.queueMs, float64(assigned.Sub(submitted[i]))/1e6)
				res.dispatchMs = append(res.dispatchMs, float64(rec.Called.Sub(assigned))/1e6)
				res.reportMs = append(res.reportMs, float64(done.Sub(rec.End()))/1e6)
			}
			if tok = nt; tok == "" {
				break
			}
		}
	}
	res.makespan = last.Sub(t0)
	for _, s := range spans {
		res.instanceHours += model.Simulated(s[1].Sub(t0)).Hours()
	}
	res.cost = sim.Cost(res.instanceHours, shape.PricePerHour)
	// Figure 4: allocation of the held instances over time, beside the
	// measured CPU and heap of this process (three heads and the workers).
	const points = 120
	for k := 0; k <= points; k++ {
		at := time.Duration(float64(res.makespan) * float64(k) / points)
		u := utilSample{at: at}
		u.cpu, u.mem = sim.Utilization(all, spans, t0, shape, t0.Add(at))
		if len(proc) > 0 {
			j, _ := slices.BinarySearchFunc(proc, at, func(s utilSample, at time.Duration) int { return int(s.at - at) })
			p := proc[min(j, len(proc)-1)]
			u.procCores, u.heapBytes = p.procCores, p.heapBytes
		}
		res.util = append(res.util, u)
	}
	return res, nil
}

// sampleProcess samples this process's CPU use (cores) and heap every
// 250 ms until ctx ends.
func sampleProcess(ctx context.Context, t0 time.Time) []utilSample {
	var out []utilSample
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	prevCPU, prevAt := cpuTime(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return out
		case now := <-t.C:
			c := cpuTime()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			out = append(out, utilSample{at: now.Sub(t0), procCores: (c - prevCPU).Seconds() / now.Sub(prevAt).Seconds(), heapBytes: float64(ms.HeapInuse)})
			prevCPU, prevAt = c, now
		}
	}
}

// writeScale writes scale.csv, scale_utilization.csv, the plots and scale.md.
func writeScale(out string, o scaleOptions, model sim.Model, rs []*scaleResult) error {
	header := []string{"rep", "deployment", "mode", "n", "instances", "workers", "makespan_wall_s", "makespan_sim_min",
		"startup_p50_sim_min", "startup_p99_sim_min", "startup_max_sim_min", "overhead_p50_ms", "overhead_p99_ms", "overhead_mean_ms",
		"queue_p50_ms", "dispatch_p50_ms", "report_p50_ms", "instance_hours", "cost_usd", "cpu_cores", "succeeded", "not_succeeded", "retried", "leader_changes"}
	var rows [][]string
	for _, r := range rs {
		rows = append(rows, []string{strconv.Itoa(r.rep + 1), string(r.d), string(r.mode), strconv.Itoa(r.n), strconv.Itoa(r.instances), strconv.Itoa(r.wks),
			f3(r.makespan.Seconds()), f2(model.Simulated(r.makespan).Minutes()),
			f2(percentile(r.startup, 50)), f2(percentile(r.startup, 99)), f2(percentile(r.startup, 100)),
			f2(percentile(r.overheadMs, 50)), f2(percentile(r.overheadMs, 99)), f2(mean(r.overheadMs)),
			f2(percentile(r.queueMs, 50)), f2(percentile(r.dispatchMs, 50)), f2(percentile(r.reportMs, 50)),
			f2(r.instanceHours), f2(r.cost), f2(r.cores), strconv.Itoa(r.succeeded), strconv.Itoa(r.other), strconv.Itoa(r.retried), strconv.FormatUint(r.leaderChanges, 10)})
	}
	if err := writeCSV(filepath.Join(out, "scale.csv"), header, rows); err != nil {
		return err
	}
	var urows [][]string
	for _, r := range rs {
		for _, u := range r.util {
			urows = append(urows, []string{strconv.Itoa(r.rep + 1), string(r.d), string(r.mode), strconv.Itoa(r.n), f2(model.Simulated(u.at).Minutes()),
				f3(u.cpu), f3(u.mem), f2(u.procCores), f2(u.heapBytes / (1 << 20))})
		}
	}
	if err := writeCSV(filepath.Join(out, "scale_utilization.csv"),
		[]string{"rep", "deployment", "mode", "n", "t_sim_min", "cpu_allocated", "memory_allocated", "process_cores", "process_heap_mib"}, urows); err != nil {
		return err
	}

	// findIn returns repetition rep's run of (d, m, n); find the first
	// repetition's, which the plots and the paper's ratios show.
	findIn := func(rep int, d sim.Deployment, m sim.Mode, n int) *scaleResult {
		for _, r := range rs {
			if r.rep == rep && r.d == d && r.mode == m && r.n == n {
				return r
			}
		}
		return nil
	}
	find := func(d sim.Deployment, m sim.Mode, n int) *scaleResult { return findIn(0, d, m, n) }
	type key struct {
		d sim.Deployment
		m sim.Mode
	}
	var keys []key
	for _, r := range rs {
		if k := (key{r.d, r.mode}); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	line := func(k key, y func(*scaleResult) float64) series {
		s := series{name: fmt.Sprintf("%s, %s", k.d, k.m)}
		for _, r := range rs {
			if r.rep == 0 && r.d == k.d && r.mode == k.m {
				s.xs, s.ys = append(s.xs, float64(r.n)), append(s.ys, y(r))
			}
		}
		return s
	}
	plots := []struct {
		file string
		a    axes
		y    func(*scaleResult) float64
	}{
		{"scale_walltime.png", axes{title: "Wall time vs concurrent tasks (paper Fig. 3)", x: "concurrent tasks N", y: "makespan (simulated min)", logX: true, yFrom0: true},
			func(r *scaleResult) float64 { return model.Simulated(r.makespan).Minutes() }},
		{"scale_startup.png", axes{title: "Environment start-up latency vs N, p50 (paper Fig. 5)", x: "concurrent tasks N", y: "submit to work begins, p50 (simulated min)", logX: true, yFrom0: true},
			func(r *scaleResult) float64 { return percentile(r.startup, 50) }},
		{"scale_cost.png", axes{title: "Cost vs N (instance-hours x on-demand price)", x: "concurrent tasks N", y: "cost (USD)", logX: true, logY: true},
			func(r *scaleResult) float64 { return r.cost }},
		{"scale_overhead.png", axes{title: "Orchestration overhead per task vs N (measured)", x: "concurrent tasks N", y: "submit to result recorded minus modelled time, p50 (wall ms)", logX: true, yFrom0: true},
			func(r *scaleResult) float64 { return percentile(r.overheadMs, 50) }},
	}
	for _, p := range plots {
		var ss []series
		for _, k := range keys {
			ss = append(ss, line(k, p.y))
		}
		if err := linePlot(filepath.Join(out, p.file), p.a, ss...); err != nil {
			return err
		}
	}
	// Figure 4 at the largest N, ephemeral (else the first mode run).
	maxN := slices.Max(o.ns)
	var us []series
	var ps []series
	for _, k := range keys {
		if k.m != keys[0].m {
			continue
		}
		r := find(k.d, k.m, maxN)
		if r == nil {
			continue
		}
		cpuS := series{name: fmt.Sprintf("%s: CPU allocated", k.d)}
		memS := series{name: fmt.Sprintf("%s: memory allocated", k.d)}
		procS := series{name: fmt.Sprintf("%s run: cores used by heads + workers", k.d)}
		for _, u := range r.util {
			t := model.Simulated(u.at).Minutes()
			cpuS.xs, cpuS.ys = append(cpuS.xs, t), append(cpuS.ys, 100*u.cpu)
			memS.xs, memS.ys = append(memS.xs, t), append(memS.ys, 100*u.mem)
			procS.xs, procS.ys = append(procS.xs, t), append(procS.ys, u.procCores)
		}
		us = append(us, cpuS, memS)
		ps = append(ps, procS)
	}
	if len(us) > 0 {
		if err := linePlot(filepath.Join(out, "scale_utilization.png"), axes{title: fmt.Sprintf("Instance CPU and memory utilization over time, N=%d, %s (paper Fig. 4)", maxN, keys[0].m),
			x: "time since submit (simulated min)", y: "allocated to tasks (% of held instances)", yFrom0: true}, us...); err != nil {
			return err
		}
		if err := linePlot(filepath.Join(out, "scale_orchestrator_cpu.png"), axes{title: fmt.Sprintf("Orchestrator CPU over time, N=%d (measured, 3 heads + workers in one process)", maxN),
			x: "time since submit (simulated min)", y: "CPU cores", yFrom0: true}, ps...); err != nil {
			return err
		}
	}

	// The report.
	rep := newReport(out, "scale.md", "megaflow-bench scale")
	rep.p("Real system (3 heads on loopback, Raft + BoltDB + gossip + gRPC; workers in the same process) with simulated instances (bench/sim). Time compressed %gx: a task's %v of work runs %v of wall time; every simulated figure below is wall time x %g. N tasks are submitted at once (graphs of %d, %d clients); a fresh cluster per run.", o.compress, model.Work, model.Wall(model.Work), o.compress, o.graphSize, o.submitters)
	rep.p("")
	rep.p("Models (bench/sim/model.go): work 100 min alone; contention slowdown 1 + 0.10 (k-1)/(capacity-1) for k tasks on an instance (centralized 100 -> 110 min, paper Fig. 3); start-up log-linear in N between the paper's Fig. 5 values at 1 and 10,000 tasks: persistent 20 s -> 50 s, ephemeral 1 -> 6 min, centralized ephemeral 1 -> 13 min; cost = instance-hours (each instance from the first submit to the end of its last task) x price: %.3f USD/h (distributed, AWS c6g.2xlarge on demand), %.2f USD/h (centralized, implied by the paper's 1,470 USD). Orchestration overhead is measured: submit to result recorded in the table, minus the task's modelled start-up and work.", o.priceSmall, o.priceLarge)
	rep.p("")
	var trows [][]string
	for _, r := range rs {
		trows = append(trows, []string{strconv.Itoa(r.rep + 1), string(r.d), string(r.mode), strconv.Itoa(r.n), strconv.Itoa(r.instances),
			fmt.Sprintf("%.1f", model.Simulated(r.makespan).Minutes()), fmt.Sprintf("%.1f s", r.makespan.Seconds()),
			fmt.Sprintf("%.2f / %.2f", percentile(r.startup, 50), percentile(r.startup, 99)),
			fmt.Sprintf("%.0f / %.0f", percentile(r.overheadMs, 50), percentile(r.overheadMs, 99)),
			fmt.Sprintf("%.0f / %.0f / %.0f", percentile(r.queueMs, 50), percentile(r.dispatchMs, 50), percentile(r.reportMs, 50)),
			fmt.Sprintf("%.0f", r.cost), f2(r.cores), fmt.Sprintf("%d / %d / %d", r.succeeded, r.other, r.retried), strconv.FormatUint(r.leaderChanges, 10)})
	}
	rep.table([]string{"rep", "deployment", "mode", "N", "instances", "makespan (sim min)", "wall", "start-up p50 / p99 (sim min)", "overhead p50 / p99 (wall ms per task)", "of which queue / dispatch / report p50 (ms)", "cost USD", "cores used", "ok / not ok / retried", "leader changes"}, trows)

	rep.p("## Ratios")
	rep.p("")
	var rrows [][]string
	for _, k := range keys {
		// The model's own ratio: what the start-up model and contention
		// alone make of 100 against 10,000 tasks (no orchestration).
		shape := sim.DefaultShape(k.d)
		floor := float64(model.Floor(k.d, k.m, 10_000, shape)) / float64(model.Floor(k.d, k.m, 100, shape))
		var measured []float64
		var changes uint64
		for i := range o.reps {
			a, b := findIn(i, k.d, k.m, 100), findIn(i, k.d, k.m, 10_000)
			if a != nil && b != nil {
				measured = append(measured, float64(b.makespan)/float64(a.makespan))
				changes += a.leaderChanges + b.leaderChanges
			}
		}
		if len(measured) == 0 {
			continue
		}
		goal := fmt.Sprintf("the model's floor %.4f", floor)
		if k.d == sim.Distributed {
			goal += "; goal: within 1.02 of it, 0 leader changes"
		}
		goal += fmt.Sprintf(" (%d leader changes in the %d runs)", changes, 2*len(measured))
		over := make([]float64, len(measured))
		for i, m := range measured {
			over[i] = m / floor
		}
		// spread is xs's median (in bold when asked), with the min and max
		// around it when there are several.
		spread := func(xs []float64, bold bool) string {
			lo, med, hi := minMedMax(xs)
			m := f3(med)
			if bold {
				m = "**" + m + "**"
			}
			if len(xs) == 1 {
				return m
			}
			return f3(lo) + " / " + m + " / " + f3(hi)
		}
		what := ""
		if len(measured) > 1 {
			what = fmt.Sprintf(" (min / median / max of %d repetitions)", len(measured))
		}
		rrows = append(rrows, []string{fmt.Sprintf("makespan(10,000) / makespan(100), %s %s%s", k.d, k.m, what), spread(measured, false), goal},
			[]string{fmt.Sprintf("  the same over the model's floor ratio, %s %s%s", k.d, k.m, what), spread(over, true), goal})
	}
	for _, m := range o.modes {
		a, b := find(sim.Distributed, sim.Mode(m), 2000), find(sim.Centralized, sim.Mode(m), 2000)
		if a != nil && b != nil {
			rrows = append(rrows, []string{fmt.Sprintf("cost distributed / centralized at 2,000 tasks, %s (%.0f vs %.0f USD)", m, a.cost, b.cost), f3(a.cost / b.cost), fmt.Sprintf("paper: %.2f (1,005 vs 1,470 USD)", sim.PaperCostRatio)})
		}
		a, b = find(sim.Distributed, sim.Mode(m), maxN), find(sim.Centralized, sim.Mode(m), maxN)
		if a != nil && b != nil {
			rrows = append(rrows, []string{fmt.Sprintf("makespan centralized / distributed at %d tasks, %s", maxN, m), f3(float64(b.makespan) / float64(a.makespan)), "paper: 1.10 (110 vs 100 min)"})
		}
		a, b = find(sim.Distributed, sim.Persistent, maxN), find(sim.Distributed, sim.Ephemeral, maxN)
		if m == string(sim.Persistent) && a != nil && b != nil {
			rrows = append(rrows, []string{fmt.Sprintf("start-up p50 persistent / ephemeral at %d tasks, distributed", maxN), f3(percentile(a.startup, 50) / percentile(b.startup, 50)), "paper: < 1 min vs 1-6 min"})
		}
	}
	rep.table([]string{"ratio", "measured", "reference"}, rrows)
	rep.p("## Plots")
	rep.p("")
	for _, f := range []string{"scale_walltime.png", "scale_startup.png", "scale_utilization.png", "scale_cost.png", "scale_overhead.png", "scale_orchestrator_cpu.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err == nil {
			rep.p("![%s](%s)", f, f)
			rep.p("")
		}
	}
	return rep.save()
}
