package main

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// replayOptions are the flags of `megaflow-bench replay`.
type replayOptions struct {
	pods, nodes string
	skip, tasks int
	nodeCount   int
	compress    float64
	maxLife     float64 // trace seconds
}

func replayCmd(g *globals) *cobra.Command {
	o := replayOptions{
		pods:  "bench/data/alibaba_gpu_v2023/openb_pod_list_default.csv",
		nodes: "bench/data/alibaba_gpu_v2023/openb_node_list_gpu_node.csv",
		skip:  6000, tasks: 150, compress: 2000, maxLife: 86400,
	}
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "replay a GPU cluster trace (Alibaba v2023 columns) through the real system, time-compressed",
		Long: `replay takes --tasks consecutive tasks (by creation time, after skipping --skip)
of a pod list with the Alibaba GPU trace v2023 columns (cpu_milli, memory_mib,
num_gpu, creation_time, scheduled_time, deletion_time; gpu_milli optional) and
simulated nodes from a node list (cpu_milli, memory_mib, gpu, model): the first
--node-count nodes (default: the trace's own node-to-task ratio). Each node is a
worker in this process with the fake runtime and its GPUs; each task is
submitted at its creation time and runs for its lifetime (deletion minus
scheduled, capped at --max-lifetime), both divided by --compress. Tasks never
scheduled in the trace are left out (counted). A fractional GPU request takes a
whole GPU (MegaFlow schedules whole GPUs). Reports queueing delay percentiles
(ours and the trace's own), utilization over time and the makespan against the
ideal (every task starting at its arrival).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.full && !cmd.Flags().Changed("tasks") {
				o.tasks = 500
			}
			if o.tasks < 1 || o.skip < 0 || o.compress < 1 || o.maxLife <= 0 || o.nodeCount < 0 {
				return fmt.Errorf("--tasks %d must be >= 1, --skip %d and --node-count %d >= 0, --compress %g >= 1, --max-lifetime %g > 0", o.tasks, o.skip, o.nodeCount, o.compress, o.maxLife)
			}
			return runReplay(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.pods, "trace", o.pods, "pod list CSV (Alibaba GPU trace v2023 columns)")
	f.StringVar(&o.nodes, "nodes", o.nodes, "node list CSV (sn, cpu_milli, memory_mib, gpu, model)")
	f.IntVar(&o.skip, "skip", o.skip, "tasks to skip (by creation time) before the replayed window")
	f.IntVar(&o.tasks, "tasks", o.tasks, "tasks to replay (--full: 500)")
	f.IntVar(&o.nodeCount, "node-count", 0, "simulated nodes (0: nodes x tasks / all tasks in the trace)")
	f.Float64Var(&o.compress, "compress", o.compress, "time compression: trace time / wall time")
	f.Float64Var(&o.maxLife, "max-lifetime", o.maxLife, "cap on a task's lifetime, trace seconds")
	return cmd
}

// job is one replayed task, times in trace seconds from the window's start.
type job struct {
	name            string
	arrival, life   float64
	traceQueue      float64 // scheduled - creation in the trace
	cpuMillis, memB int64
	gpus            int32
}

type node struct {
	name      string
	cpuMillis int64
	memB      int64
	gpus      int32
	model     string
}

// readCSV reads a CSV with a header and returns, per row, a lookup of the
// required columns; errors name the file, line and column.
func readCSV(path string, required []string) ([]map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: read the header: %w", path, err)
	}
	idx := map[string]int{}
	for i, h := range head {
		idx[h] = i
	}
	for _, c := range required {
		if _, ok := idx[c]; !ok {
			return nil, fmt.Errorf("%s: no column %q in the header %v; the file needs %v", path, c, head, required)
		}
	}
	var out []map[string]string
	for line := 2; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		m := map[string]string{"#line": strconv.Itoa(line)}
		for c, i := range idx {
			if i < len(rec) {
				m[c] = rec[i]
			}
		}
		out = append(out, m)
	}
}

func num(path string, row map[string]string, col string) (float64, error) {
	v, err := strconv.ParseFloat(row[col], 64)
	if err != nil || math.IsNaN(v) || v < 0 {
		return 0, fmt.Errorf("%s:%s: column %s is %q, want a non-negative number", path, row["#line"], col, row[col])
	}
	return v, nil
}

// loadTrace reads the window of jobs and the nodes; skipped counts tasks
// of the window never scheduled in the trace.
func loadTrace(o replayOptions) (jobs []job, nodes []node, skipped, total int, err error) {
	rows, err := readCSV(o.pods, []string{"cpu_milli", "memory_mib", "num_gpu", "creation_time", "scheduled_time", "deletion_time"})
	if err != nil {
		return nil, nil, 0, 0, err
	}
	total = len(rows)
	type parsed struct {
		j      job
		create float64
		ok     bool
	}
	var ps []parsed
	for i, row := range rows {
		var p parsed
		vals := map[string]float64{}
		for _, c := range []string{"cpu_milli", "memory_mib", "num_gpu", "creation_time"} {
			if vals[c], err = num(o.pods, row, c); err != nil {
				return nil, nil, 0, 0, err
			}
		}
		p.create = vals["creation_time"]
		p.j = job{name: fmt.Sprintf("p%d", i), cpuMillis: int64(vals["cpu_milli"]), memB: int64(vals["memory_mib"]) << 20, gpus: int32(vals["num_gpu"])}
		if n, ok := row["name"]; ok && n != "" {
			p.j.name = n
		}
		if row["scheduled_time"] != "" && row["deletion_time"] != "" {
			s, err1 := num(o.pods, row, "scheduled_time")
			d, err2 := num(o.pods, row, "deletion_time")
			if err := errors.Join(err1, err2); err != nil {
				return nil, nil, 0, 0, err
			}
			p.ok = d >= s
			p.j.life = min(d-s, o.maxLife)
			p.j.traceQueue = s - p.create
		}
		ps = append(ps, p)
	}
	slices.SortStableFunc(ps, func(a, b parsed) int { return cmp.Compare(a.create, b.create) })
	if o.skip >= len(ps) {
		return nil, nil, 0, 0, fmt.Errorf("%s has %d tasks; --skip %d leaves none", o.pods, len(ps), o.skip)
	}
	win := ps[o.skip:min(len(ps), o.skip+o.tasks)]
	for _, p := range win {
		if !p.ok {
			skipped++
			continue
		}
		p.j.arrival = p.create - win[0].create
		jobs = append(jobs, p.j)
	}
	nrows, err := readCSV(o.nodes, []string{"cpu_milli", "memory_mib", "gpu"})
	if err != nil {
		return nil, nil, 0, 0, err
	}
	want := o.nodeCount
	if want == 0 {
		want = max(1, int(math.Ceil(float64(len(nrows))*float64(len(win))/float64(total))))
	}
	for i, row := range nrows[:min(want, len(nrows))] {
		var v [3]float64
		for k, c := range []string{"cpu_milli", "memory_mib", "gpu"} {
			if v[k], err = num(o.nodes, row, c); err != nil {
				return nil, nil, 0, 0, err
			}
		}
		nodes = append(nodes, node{name: fmt.Sprintf("n%d", i), cpuMillis: int64(v[0]), memB: int64(v[1]) << 20, gpus: int32(v[2]), model: row["model"]})
	}
	return jobs, nodes, skipped, total, nil
}

// replayProgram is Command[0] of a replayed task; its lifetime in wall
// milliseconds is in the env var REPLAY_MS.
const replayProgram = "megaflow-replay"

func runReplay(ctx context.Context, g *globals, o replayOptions) error {
	jobs, nodes, skipped, total, err := loadTrace(o)
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		return fmt.Errorf("no task of the window was scheduled in the trace; choose another --skip")
	}
	log, closer, err := newLogger(filepath.Join(g.out, "replay.log"), g.verbose)
	if err != nil {
		return err
	}
	defer closer.Close()
	span := 0.0
	for _, j := range jobs {
		span = max(span, j.arrival)
	}
	fmt.Printf("replay: %d tasks of %s (%d of the window never scheduled in the trace, left out) over %.0f trace s on %d nodes, compressed %gx (%.0f s of arrivals)\n",
		len(jobs), o.pods, skipped, span, len(nodes), o.compress, span/o.compress)
	dir, err := os.MkdirTemp("", "megaflow-bench-replay-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c, err := newCluster(ctx, dir, 3, log, nil)
	if err != nil {
		return err
	}
	defer c.Stop()
	var capCPU, capMem, capGPU float64
	fit := func(j job) bool {
		for _, n := range nodes {
			if j.cpuMillis <= n.cpuMillis && j.memB <= n.memB && j.gpus <= n.gpus {
				return true
			}
		}
		return false
	}
	for _, n := range nodes {
		rt := fake.New(nil)
		rt.OnFunc(func(s contract.Spec) (fake.Behavior, bool) {
			if len(s.Command) == 0 || s.Command[0] != replayProgram {
				return fake.Behavior{}, false
			}
			ms, _ := strconv.ParseInt(s.Env["REPLAY_MS"], 10, 64)
			return fake.Behavior{Duration: time.Duration(ms) * time.Millisecond}, true
		})
		capCPU, capMem, capGPU = capCPU+float64(n.cpuMillis), capMem+float64(n.memB), capGPU+float64(n.gpus)
		if _, err := c.addWorker(rt, worker.Capacity{CPUMillis: n.cpuMillis, MemoryBytes: n.memB}, func(cfg *worker.Config) {
			cfg.MaxConcurrentStarts = 64
			for k := range n.gpus {
				cfg.GPUs = append(cfg.GPUs, &wire.GpuDevice{Uuid: fmt.Sprintf("GPU-%s-%d", n.name, k), Model: n.model, MemoryBytes: 16 << 30})
			}
		}); err != nil {
			return err
		}
	}
	var unfit int
	var run []job
	for _, j := range jobs {
		if fit(j) {
			run = append(run, j)
		} else {
			unfit++
		}
	}
	cl, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := c.waitWorkers(ctx, cl, len(nodes)); err != nil {
		return err
	}
	// Submit each task at its compressed arrival, each as a 1-task graph.
	t0 := time.Now()
	submitted := make([]time.Time, len(run))
	var wg sync.WaitGroup
	errc := make(chan error, len(run))
	sem := make(chan struct{}, 32)
	for i, j := range run {
		at := t0.Add(time.Duration(j.arrival / o.compress * float64(time.Second)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(at)):
		}
		sem <- struct{}{}
		wg.Add(1)
		submitted[i] = time.Now()
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ms := int64(j.life / o.compress * 1000)
			gs := &client.GraphSpec{Id: fmt.Sprintf("r%d", i), Tenant: "trace", Tasks: []*client.TaskSpec{{
				Name: j.name, Image: "trace/pod:1", Command: []string{replayProgram}, Env: map[string]string{"REPLAY_MS": strconv.FormatInt(ms, 10)},
				Resources: &client.Resources{CpuMillis: j.cpuMillis, MemoryBytes: j.memB, Gpus: j.gpus}}}}
			if _, err := cl.Submit(ctx, gs); err != nil {
				errc <- fmt.Errorf("submit task %s: %w", j.name, err)
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
	}
	ideal := 0.0
	for _, j := range run {
		ideal = max(ideal, j.arrival+j.life)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Duration(ideal/o.compress*float64(time.Second))*3+5*time.Minute)
	defer cancel()
	type runSpan struct{ start, end float64 } // trace s since t0
	spans := make([]runSpan, len(run))
	var queue, traceQueue []float64
	var last float64
	notOK := 0
	for i, j := range run {
		if _, err := cl.Wait(wctx, fmt.Sprintf("r%d", i)); err != nil {
			return fmt.Errorf("wait for task %s: %w", j.name, err)
		}
		ts, _, err := cl.ListTasks(wctx, client.TaskFilter{GraphID: fmt.Sprintf("r%d", i), OmitSpec: true})
		if err != nil || len(ts) != 1 {
			return fmt.Errorf("read task %s: %v", j.name, err)
		}
		t := ts[0]
		if t.State != client.TaskSucceeded {
			notOK++
			continue
		}
		a := t.Attempts[len(t.Attempts)-1]
		toTrace := func(ns int64) float64 { return time.Unix(0, ns).Sub(t0).Seconds() * o.compress }
		queue = append(queue, time.Unix(0, a.AssignUnixNanos).Sub(submitted[i]).Seconds()*o.compress)
		traceQueue = append(traceQueue, j.traceQueue)
		spans[i] = runSpan{toTrace(a.StartUnixNanos), toTrace(a.FinishUnixNanos)}
		last = max(last, toTrace(t.UpdateUnixNanos))
	}
	// Utilization over time: ours from the table, the ideal from the trace.
	var rows [][]string
	sCPU, sGPU := series{name: "replay: CPU allocated"}, series{name: "replay: GPU allocated"}
	iCPU, iGPU := series{name: "ideal (no queueing): CPU"}, series{name: "ideal (no queueing): GPU"}
	const points = 150
	end := max(last, ideal)
	for k := 0; k <= points; k++ {
		at := end * float64(k) / points
		var c, gp, ic, ig float64
		for i, j := range run {
			if spans[i].start <= at && at < spans[i].end {
				c, gp = c+float64(j.cpuMillis), gp+float64(j.gpus)
			}
			if j.arrival <= at && at < j.arrival+j.life {
				ic, ig = ic+float64(j.cpuMillis), ig+float64(j.gpus)
			}
		}
		h := at / 3600
		sCPU.xs, sCPU.ys = append(sCPU.xs, h), append(sCPU.ys, 100*c/capCPU)
		sGPU.xs, sGPU.ys = append(sGPU.xs, h), append(sGPU.ys, 100*gp/max(capGPU, 1))
		iCPU.xs, iCPU.ys = append(iCPU.xs, h), append(iCPU.ys, 100*ic/capCPU)
		iGPU.xs, iGPU.ys = append(iGPU.xs, h), append(iGPU.ys, 100*ig/max(capGPU, 1))
		rows = append(rows, []string{f2(at), f3(c / capCPU), f3(gp / max(capGPU, 1)), f3(ic / capCPU), f3(ig / max(capGPU, 1))})
	}
	if err := writeCSV(filepath.Join(g.out, "replay_utilization.csv"), []string{"t_trace_s", "cpu_allocated", "gpu_allocated", "ideal_cpu", "ideal_gpu"}, rows); err != nil {
		return err
	}
	var qrows [][]string
	for _, p := range []float64{50, 90, 99, 100} {
		qrows = append(qrows, []string{strconv.FormatFloat(p, 'f', -1, 64), f2(percentile(queue, p)), f2(percentile(traceQueue, p))})
	}
	if err := writeCSV(filepath.Join(g.out, "replay.csv"), []string{"percentile", "queue_delay_trace_s", "trace_recorded_queue_delay_s"}, qrows); err != nil {
		return err
	}
	if err := linePlot(filepath.Join(g.out, "replay_utilization.png"), axes{title: "Trace replay: allocation over time (Alibaba GPU v2023 window)", x: "trace time (h)", y: "% of the simulated nodes", yFrom0: true}, sCPU, sGPU, iCPU, iGPU); err != nil {
		return err
	}
	cdf := func(name string, xs []float64) series {
		s := series{name: name}
		sorted := slices.Sorted(slices.Values(xs))
		for i, x := range sorted {
			s.xs, s.ys = append(s.xs, max(x, 0.1)), append(s.ys, float64(i+1)/float64(len(sorted)))
		}
		return s
	}
	if err := linePlot(filepath.Join(g.out, "replay_queueing.png"), axes{title: "Trace replay: queueing delay CDF", x: "submit to placement (trace s, log; 0 shown at 0.1)", y: "fraction of tasks", logX: true, yFrom0: true},
		cdf("MegaFlow replay", queue), cdf("the trace's own (scheduled - creation)", traceQueue)); err != nil {
		return err
	}
	rep := newReport(g.out, "replay.md", "megaflow-bench replay")
	rep.p("Trace: `%s` (%d tasks), window of %d tasks after skipping %d; %d never scheduled in the trace left out, %d fit on no simulated node (left out), %d replayed over %.1f trace hours of arrivals. Nodes: the first %d of `%s` (%.0f cores, %.0f GiB, %.0f GPUs), each a worker in this process with the fake runtime. Time compressed %gx; lifetimes capped at %.0f s. A fractional GPU takes a whole GPU.",
		o.pods, total, o.tasks, o.skip, skipped, unfit, len(run), span/3600, len(nodes), o.nodes, capCPU/1000, capMem/(1<<30), capGPU, o.compress, o.maxLife)
	rep.p("")
	rep.table([]string{"queueing delay (trace s)", "p50", "p90", "p99", "max"}, [][]string{
		{"MegaFlow replay (submit to placement)", f2(percentile(queue, 50)), f2(percentile(queue, 90)), f2(percentile(queue, 99)), f2(percentile(queue, 100))},
		{"the trace's own (scheduled - creation)", f2(percentile(traceQueue, 50)), f2(percentile(traceQueue, 90)), f2(percentile(traceQueue, 99)), f2(percentile(traceQueue, 100))},
	})
	rep.p("Makespan: %.0f trace s against an ideal of %.0f (every task starting at its arrival, infinite capacity): ratio **%.3f**. %d tasks did not succeed.", last, ideal, last/ideal, notOK)
	rep.p("")
	rep.p("![utilization](replay_utilization.png)")
	rep.p("")
	rep.p("![queueing](replay_queueing.png)")
	fmt.Printf("  queueing delay p50 %.1f p99 %.1f trace s (the trace's own: p50 %.1f p99 %.1f); makespan %.0f vs ideal %.0f trace s (%.3fx); %d not succeeded\n",
		percentile(queue, 50), percentile(queue, 99), percentile(traceQueue, 50), percentile(traceQueue, 99), last, ideal, last/ideal, notOK)
	return rep.save()
}
