package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	localcluster "github.com/megaflow/megaflow/internal/cluster"
	"github.com/megaflow/megaflow/runtime/process"
	"github.com/megaflow/megaflow/worker"
)

// procrtOptions are the flags of `megaflow-bench procrt`.
type procrtOptions struct {
	tasks       int
	concurrency []int
	batch       int
	reps        int
	initPath    string
	noInit      bool // run the tasks without megaflow-init: a measure of what the init costs
}

// The bounds of the procrt flags.
const (
	procrtMaxTasks       = 1_000_000
	procrtMaxConcurrency = 1024
	procrtMaxReps        = 100
	// procrtTaskMillis is the CPU each task asks for; the worker offers
	// concurrency times it, so that exactly concurrency tasks fit at once.
	procrtTaskMillis = 100
)

func procrtCmd(g *globals) *cobra.Command {
	o := procrtOptions{tasks: 2000, concurrency: []int{8, 32}, batch: 100, reps: 3}
	cmd := &cobra.Command{
		Use:   "procrt",
		Short: "`true` tasks through one head and a process-runtime worker, against xargs -P in the same run",
		Long: `procrt runs --tasks tasks of the command true through the cluster that
` + "`megaflow up --runtime process`" + ` starts (one head, a single-voter Raft on disk, and
one worker on the process runtime with its state directory and megaflow-init),
with the worker's slots set to the concurrency: it offers concurrency x 100
millicores (each task asks for 100) and as many concurrent starts
(--max-concurrent-starts). The tasks go in graphs of --batch tasks, all
submitted at once; the time runs from the first submit to the last graph's
result. The baseline runs the same true the same number of times with
` + "`xargs -P <concurrency> -n 1 true`" + `. The two arms alternate, --reps times each
(the order flips every repetition), on one cluster per concurrency after a
warm-up graph; the report gives min/median/max of each arm's tasks/s and of
their ratio (target >= 0.5).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.full && !cmd.Flags().Changed("tasks") {
				o.tasks = 10_000
			}
			if err := o.validate(); err != nil {
				return err
			}
			return runProcrt(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.tasks, "tasks", o.tasks, "true tasks per arm and repetition (--full: 10000)")
	f.IntSliceVar(&o.concurrency, "concurrency", o.concurrency, "the worker's slots and xargs' -P, one cluster each")
	f.IntVar(&o.batch, "batch", o.batch, "tasks per graph")
	f.IntVar(&o.reps, "reps", o.reps, "repetitions of each arm at each concurrency")
	f.StringVar(&o.initPath, "init-path", "", "megaflow-init (default: next to this binary, then PATH, as megaflow up finds it)")
	f.BoolVar(&o.noInit, "no-init", false, "run the tasks without megaflow-init, which is not how megaflow up runs them (a task would outlive its worker's lease): it measures what the init costs")
	return cmd
}

// validate checks the flags; each error names its flag and its bound.
func (o *procrtOptions) validate() error {
	switch {
	case o.tasks < 1 || o.tasks > procrtMaxTasks:
		return fmt.Errorf("--tasks %d is outside [1, %d]", o.tasks, procrtMaxTasks)
	case o.batch < 1 || o.batch > o.tasks:
		return fmt.Errorf("--batch %d is outside [1, --tasks %d]", o.batch, o.tasks)
	case o.reps < 1 || o.reps > procrtMaxReps:
		return fmt.Errorf("--reps %d is outside [1, %d]", o.reps, procrtMaxReps)
	case len(o.concurrency) == 0:
		return fmt.Errorf("--concurrency is empty: give one or more slot counts")
	}
	for _, c := range o.concurrency {
		if c < 1 || c > procrtMaxConcurrency {
			return fmt.Errorf("--concurrency %d is outside [1, %d]", c, procrtMaxConcurrency)
		}
	}
	return nil
}

// procrtRep is one repetition of both arms at one concurrency.
type procrtRep struct {
	megaflow, xargs time.Duration
	load            string // /proc/loadavg after the repetition
}

func runProcrt(ctx context.Context, g *globals, o procrtOptions) error {
	log, closer, err := newLogger(filepath.Join(g.out, "procrt.log"), g.verbose)
	if err != nil {
		return err
	}
	defer closer.Close()
	initPath := ""
	if !o.noInit {
		initPath, err = worker.FindInit(o.initPath)
		if err != nil {
			return fmt.Errorf("megaflow up runs every process task under megaflow-init: %w", err)
		}
	}
	trueBin, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("no true on PATH: %w", err)
	}
	fmt.Printf("procrt: %d true tasks per arm, graphs of %d, concurrency %v, %d repetitions, load average %s\n", o.tasks, o.batch, o.concurrency, o.reps, loadAvg())
	results := map[int][]procrtRep{}
	for _, c := range o.concurrency {
		reps, err := procrtAt(ctx, log, o, c, initPath, trueBin)
		if err != nil {
			return fmt.Errorf("concurrency %d: %w", c, err)
		}
		results[c] = reps
	}
	return writeProcrt(g.out, o, initPath, trueBin, results)
}

// procrtAt starts the cluster for concurrency c and runs the repetitions.
func procrtAt(ctx context.Context, log *slog.Logger, o procrtOptions, c int, initPath, trueBin string) ([]procrtRep, error) {
	dir, err := os.MkdirTemp("", "megaflow-bench-procrt-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// As cmd/megaflow/up.go: the runtime's state under <data>/process.
	rt, err := process.New(process.Config{Logger: log, StateDir: filepath.Join(dir, "process")})
	if err != nil {
		return nil, err
	}
	defer rt.Close() // after the cluster's stop: its spawner, if the tasks had one
	cls, err := localcluster.Start(ctx, localcluster.Options{Dir: dir, Heads: 1, Logger: log, LeaderTimeout: 60 * time.Second,
		StopTimeout: 30 * time.Second,
		ConfigureHead: func(_ int, hc *head.Config) {
			hc.NodeID, hc.DataDir = "local-head", filepath.Join(dir, "head")
			hc.Join = nil
			hc.BootstrapExpect = 1
		}})
	if err != nil {
		return nil, err
	}
	defer cls.Stop()
	if _, err := cls.AddWorker(localcluster.WorkerOptions{DataDir: filepath.Join(dir, "worker"), Runtime: rt,
		Capacity: worker.Capacity{CPUMillis: int64(c) * procrtTaskMillis, MemoryBytes: 1 << 40},
		Configure: func(wc *worker.Config) {
			wc.Heads = []string{cls.Members[0].Head().GRPCAddr()}
			wc.MaxConcurrentStarts = c
			wc.InitPath = initPath
		}}); err != nil {
		return nil, err
	}
	cl, err := cls.Dial(ctx)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	bc := &cluster{cls}
	if err := bc.waitWorkers(ctx, cl, 1); err != nil {
		return nil, err
	}
	seq := 0
	runGraphs := func(n int) (time.Duration, error) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		var ids []string
		t0 := time.Now()
		for done := 0; done < n; {
			k := min(o.batch, n-done)
			seq++
			gs := &client.GraphSpec{Id: fmt.Sprintf("procrt-c%d-%d", c, seq), Tenant: "bench"}
			for j := range k {
				gs.Tasks = append(gs.Tasks, &client.TaskSpec{Name: fmt.Sprintf("t%d", j), Image: "megaflow/noop:1", Command: []string{"true"},
					Resources: &client.Resources{CpuMillis: procrtTaskMillis, MemoryBytes: 16 << 20}})
			}
			if _, err := cl.Submit(rctx, gs); err != nil {
				return 0, fmt.Errorf("submit %s: %w", gs.Id, err)
			}
			ids = append(ids, gs.Id)
			done += k
		}
		for _, id := range ids {
			gr, err := cl.Wait(rctx, id)
			if err != nil {
				return 0, fmt.Errorf("wait %s: %w", id, err)
			}
			if gr.State != client.GraphSucceeded {
				return 0, fmt.Errorf("graph %s ended %s", id, gr.State)
			}
		}
		return time.Since(t0), nil
	}
	xargs := func(n int) (time.Duration, error) {
		// seq writes the n arguments; xargs runs `true <i>` n times, c at
		// a time (true ignores its argument).
		cmd := exec.CommandContext(ctx, "sh", "-c", fmt.Sprintf("seq %d | xargs -P %d -n 1 %s", n, c, trueBin))
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("xargs: %w: %s", err, out)
		}
		return time.Since(t0), nil
	}
	// Warm-up: one graph, and xargs once.
	if _, err := runGraphs(min(o.batch, o.tasks)); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	if _, err := xargs(min(o.batch, o.tasks)); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	var reps []procrtRep
	for i := range o.reps {
		var r procrtRep
		arms := []func() error{
			func() (err error) { r.megaflow, err = runGraphs(o.tasks); return err },
			func() (err error) { r.xargs, err = xargs(o.tasks); return err },
		}
		if i%2 == 1 {
			slices.Reverse(arms)
		}
		for _, a := range arms {
			if err := a(); err != nil {
				return nil, fmt.Errorf("repetition %d: %w", i+1, err)
			}
		}
		r.load = loadAvg()
		mf, xa := float64(o.tasks)/r.megaflow.Seconds(), float64(o.tasks)/r.xargs.Seconds()
		fmt.Printf("  concurrency %3d rep %d: megaflow %7.0f tasks/s, xargs %7.0f tasks/s, ratio %.3f, load %s\n", c, i+1, mf, xa, mf/xa, r.load)
		reps = append(reps, r)
	}
	st := bc.stageMeans()
	fmt.Printf("  concurrency %3d: mean per attempt queued %.1f ms, starting %.1f ms, running %.1f ms; Raft apply %.1f ms\n", c, st.queued, st.starting, st.running, st.apply)
	return reps, nil
}

// minMedMax returns the minimum, median and maximum of xs (not empty).
func minMedMax(xs []float64) (lo, med, hi float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[0], s[len(s)/2], s[len(s)-1]
}

func writeProcrt(out string, o procrtOptions, initPath, trueBin string, results map[int][]procrtRep) error {
	var rows [][]string
	rep := newReport(out, "procrt.md", "megaflow-bench procrt")
	under := fmt.Sprintf("every task under the worker's megaflow-init spawner `%s --spawn-fd`", initPath)
	if initPath == "" {
		under = "**without megaflow-init** (`--no-init`: not how `megaflow up` runs tasks; a measure of the init's cost)"
	}
	rep.p("`%s` through one head (a single-voter Raft on disk, as `megaflow up` runs it) and one worker on the process runtime (state directory, %s), all in this process; each task asks for %d millicores and the worker offers concurrency x %d, with as many concurrent starts. %d tasks per arm in graphs of %d, all submitted at once, timed from the first submit to the last graph's result. Baseline: `seq %d | xargs -P <concurrency> -n 1 %s`. Arms alternate (the order flips every repetition), %d repetitions, after a warm-up of each.",
		trueBin, under, procrtTaskMillis, procrtTaskMillis, o.tasks, o.batch, o.tasks, trueBin, o.reps)
	rep.p("")
	var trows [][]string
	for _, c := range o.concurrency {
		var mf, xa, ratio []float64
		var loads []string
		for i, r := range results[c] {
			m, x := float64(o.tasks)/r.megaflow.Seconds(), float64(o.tasks)/r.xargs.Seconds()
			mf, xa, ratio = append(mf, m), append(xa, x), append(ratio, m/x)
			loads = append(loads, r.load)
			rows = append(rows, []string{strconv.Itoa(c), strconv.Itoa(i + 1), strconv.Itoa(o.tasks), f3(r.megaflow.Seconds()), f3(r.xargs.Seconds()), f2(m), f2(x), f3(m / x), r.load})
		}
		m0, m1, m2 := minMedMax(mf)
		x0, x1, x2 := minMedMax(xa)
		r0, r1, r2 := minMedMax(ratio)
		trows = append(trows, []string{strconv.Itoa(c),
			fmt.Sprintf("%.0f / %.0f / %.0f", m0, m1, m2), fmt.Sprintf("%.0f / %.0f / %.0f", x0, x1, x2),
			fmt.Sprintf("%.3f / **%.3f** / %.3f", r0, r1, r2), strings.Join(loads, "; ")})
	}
	if err := writeCSV(filepath.Join(out, "procrt.csv"), []string{"concurrency", "rep", "tasks", "megaflow_wall_s", "xargs_wall_s", "megaflow_tasks_per_s", "xargs_tasks_per_s", "ratio", "loadavg"}, rows); err != nil {
		return err
	}
	rep.table([]string{"concurrency", "MegaFlow tasks/s min / median / max", "xargs tasks/s min / median / max", "MegaFlow / xargs min / median / max (target >= 0.5)", "load average after each repetition"}, trows)
	return rep.save()
}
