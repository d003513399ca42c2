package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// throughputOptions are the flags of `megaflow-bench throughput`.
type throughputOptions struct {
	clients []int
	tasks   int // per client count, split among the clients
	batch   int
	python  string
	script  string
	noDask  bool
	reps    int
}

// throughputMaxReps bounds --reps.
const throughputMaxReps = 20

func throughputCmd(g *globals) *cobra.Command {
	o := throughputOptions{clients: []int{1, 4, 16}, tasks: 3200, batch: 100, python: "/usr/bin/python3", script: "bench/peer/dask_noop.py", reps: 3}
	cmd := &cobra.Command{
		Use:   "throughput",
		Short: "no-op tasks end to end through 3 heads, against Dask distributed in the same run",
		Long: `throughput submits no-op tasks (the fake runtime exits 0 at once) through a
3-head cluster with 2 workers, from 1, 4 and 16 concurrent clients: each client
submits batches of --batch tasks (one graph each) and waits for every result
before the next batch. Between MegaFlow's runs, the same workload goes through
Dask distributed (a LocalCluster with 2 worker processes, bench/peer/dask_noop.py)
on the same machine. Reports tasks/s (submit to result recorded), p50/p99
submit-to-start latency, and MegaFlow/Dask ratios (target >= 10x). The whole
sequence runs --reps times (repetitions interleaved: every client count and
both systems once, then again), and the report gives min / median / max over
the repetitions, each ratio taken within its repetition.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.full && !cmd.Flags().Changed("tasks") {
				o.tasks = 16_000
			}
			if o.tasks < 1 || o.batch < 1 {
				return fmt.Errorf("--tasks %d and --batch %d must be at least 1", o.tasks, o.batch)
			}
			if o.reps < 1 || o.reps > throughputMaxReps {
				return fmt.Errorf("--reps %d is outside [1, %d]", o.reps, throughputMaxReps)
			}
			for _, c := range o.clients {
				if c < 1 || c > 256 {
					return fmt.Errorf("--clients %d is outside [1, 256]", c)
				}
			}
			return runThroughput(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.clients, "clients", o.clients, "concurrent client counts")
	f.IntVar(&o.tasks, "tasks", o.tasks, "no-op tasks per client count, split evenly among the clients (--full: 16000)")
	f.IntVar(&o.batch, "batch", o.batch, "tasks a client submits at once (a graph; a client.map for Dask)")
	f.StringVar(&o.python, "python", o.python, "the Python that has Debian's python3-distributed")
	f.StringVar(&o.script, "dask-script", o.script, "the Dask peer's script")
	f.BoolVar(&o.noDask, "no-dask", false, "skip the Dask peer")
	f.IntVar(&o.reps, "reps", o.reps, "repetitions of the whole sequence (min / median / max reported)")
	return cmd
}

// tpResult is one side's run at one client count.
type tpResult struct {
	system         string
	clients, tasks int
	wall           time.Duration
	p50, p99       float64 // submit-to-start latency, ms
	err            error   // why the side could not run (the peer only)
	// stages is where MegaFlow's time went (MegaFlow only).
	stages stageMeans
	// commandsPerBatch is how many commands the leader applied per batch
	// of tasks in the run (MegaFlow only): the chain of commits a batch
	// waits for, and the other clients' beside it.
	commandsPerBatch float64
	load             string // the load average after the run
}

func (r tpResult) rate() float64 { return float64(r.tasks) / r.wall.Seconds() }

func runThroughput(ctx context.Context, g *globals, o throughputOptions) error {
	log, closer, err := newLogger(filepath.Join(g.out, "throughput.log"), g.verbose)
	if err != nil {
		return err
	}
	defer closer.Close()
	fmt.Printf("throughput: %d no-op tasks per client count, batches of %d, clients %v, %d repetitions, load average %s\n", o.tasks, o.batch, o.clients, o.reps, loadAvg())
	// ours[i] and peer[i] hold client count i's repetitions.
	ours := make([][]tpResult, len(o.clients))
	peer := make([][]tpResult, len(o.clients))
	for rep := range o.reps {
		for i, c := range o.clients {
			per := max(1, o.tasks/c)
			r, err := megaflowNoop(ctx, log, c, per, o.batch)
			if err != nil {
				return fmt.Errorf("megaflow, %d clients, repetition %d: %w", c, rep+1, err)
			}
			r.load = loadAvg()
			ours[i] = append(ours[i], r)
			fmt.Printf("  rep %d megaflow %2d clients: %7.0f tasks/s, submit-to-start p50 %6.1f ms p99 %6.1f ms; mean queued %.1f ms, starting %.1f ms, Raft apply %.1f ms, %.1f commands per batch; load %s\n",
				rep+1, c, r.rate(), r.p50, r.p99, r.stages.queued, r.stages.starting, r.stages.apply, r.commandsPerBatch, r.load)
			if o.noDask {
				continue
			}
			d := daskNoop(ctx, o, c, per)
			d.load = loadAvg()
			peer[i] = append(peer[i], d)
			if d.err != nil {
				fmt.Printf("  rep %d dask     %2d clients: could not run: %v\n", rep+1, c, d.err)
			} else {
				fmt.Printf("  rep %d dask     %2d clients: %7.0f tasks/s, submit-to-start p50 %6.1f ms p99 %6.1f ms; megaflow/dask %.2fx; load %s\n", rep+1, c, d.rate(), d.p50, d.p99, r.rate()/d.rate(), d.load)
			}
		}
	}
	return writeThroughput(g.out, o, ours, peer)
}

// megaflowNoop runs clients clients of per tasks each on a fresh cluster.
func megaflowNoop(ctx context.Context, log *slog.Logger, clients, per, batch int) (tpResult, error) {
	res := tpResult{system: "megaflow", clients: clients, tasks: clients * per}
	dir, err := os.MkdirTemp("", "megaflow-bench-tp-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	c, err := newCluster(ctx, dir, 3, log, nil)
	if err != nil {
		return res, err
	}
	defer c.Stop()
	for range 2 {
		rt := fake.New(nil) // every container exits 0 at once
		if _, err := c.addWorker(rt, worker.Capacity{CPUMillis: 1_000_000, MemoryBytes: 1 << 40}, func(cfg *worker.Config) {
			cfg.MaxConcurrentStarts = 1024
		}); err != nil {
			return res, err
		}
	}
	cls := make([]*client.Client, clients)
	for i := range cls {
		if cls[i], err = c.dial(ctx); err != nil {
			return res, err
		}
		defer cls[i].Close()
	}
	if err := c.waitWorkers(ctx, cls[0], 2); err != nil {
		return res, err
	}
	noop := func(name string) *client.TaskSpec {
		return &client.TaskSpec{Name: name, Image: "megaflow/noop:1", Command: []string{"true"},
			Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}}
	}
	// Warm-up: one batch per client, as the Dask side does.
	for i, cl := range cls {
		gs := &client.GraphSpec{Id: fmt.Sprintf("warmup-%d", i), Tenant: "bench"}
		for j := range 10 {
			gs.Tasks = append(gs.Tasks, noop(fmt.Sprintf("t%d", j)))
		}
		if _, err := cl.Submit(ctx, gs); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
		if _, err := cl.Wait(ctx, gs.Id); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var lat []float64
	var firstErr error
	var wg sync.WaitGroup
	before := c.stageMeans().commands
	t0 := time.Now()
	for i, cl := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done, b := 0, 0; done < per; b++ {
				n := min(batch, per-done)
				gs := &client.GraphSpec{Id: fmt.Sprintf("c%d-b%d", i, b), Tenant: "bench"}
				for j := range n {
					gs.Tasks = append(gs.Tasks, noop(fmt.Sprintf("t%d", j)))
				}
				sub := time.Now()
				err := func() error {
					if _, err := cl.Submit(rctx, gs); err != nil {
						return err
					}
					gr, err := cl.Wait(rctx, gs.Id)
					if err != nil {
						return err
					}
					if gr.State != client.GraphSucceeded {
						return fmt.Errorf("graph %s ended %s", gs.Id, gr.State)
					}
					var ls []float64
					for tok := ""; ; {
						ts, nt, err := cl.ListTasks(rctx, client.TaskFilter{GraphID: gs.Id, PageSize: 1000, PageToken: tok, OmitSpec: true})
						if err != nil {
							return err
						}
						for _, t := range ts {
							a := t.Attempts[len(t.Attempts)-1]
							ls = append(ls, float64(time.Unix(0, a.StartUnixNanos).Sub(sub))/1e6)
						}
						if tok = nt; tok == "" {
							break
						}
					}
					mu.Lock()
					lat = append(lat, ls...)
					mu.Unlock()
					return nil
				}()
				if err != nil {
					mu.Lock()
					firstErr = orErr(firstErr, fmt.Errorf("client %d batch %d: %w", i, b, err))
					mu.Unlock()
					return
				}
				done += n
			}
		}()
	}
	wg.Wait()
	res.wall = time.Since(t0)
	if firstErr != nil {
		return res, firstErr
	}
	res.p50, res.p99 = percentile(lat, 50), percentile(lat, 99)
	res.stages = c.stageMeans()
	res.commandsPerBatch = (res.stages.commands - before) / float64(res.tasks) * float64(batch)
	return res, nil
}

// orErr returns a if it is set, else b.
func orErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// daskNoop runs the Dask peer script; a failure is returned in the result.
func daskNoop(ctx context.Context, o throughputOptions, clients, per int) tpResult {
	res := tpResult{system: "dask", clients: clients, tasks: clients * per}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(rctx, o.python, o.script, "--clients", strconv.Itoa(clients), "--tasks", strconv.Itoa(per), "--batch", strconv.Itoa(o.batch))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndex(msg, "\n"); i >= 0 {
			msg = msg[i+1:]
		}
		res.err = fmt.Errorf("%s %s: %w: %s", o.python, o.script, err, msg)
		return res
	}
	var out struct {
		Tasks       int     `json:"tasks"`
		WallS       float64 `json:"wall_s"`
		P50         float64 `json:"latency_p50_ms"`
		P99         float64 `json:"latency_p99_ms"`
		DaskVersion string  `json:"dask_version"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &out); err != nil {
		res.err = fmt.Errorf("the Dask peer printed %q, not its JSON result: %w", stdout.String(), err)
		return res
	}
	if out.Tasks != res.tasks {
		res.err = fmt.Errorf("the Dask peer ran %d tasks, want %d", out.Tasks, res.tasks)
		return res
	}
	res.system = "dask " + out.DaskVersion
	res.wall = time.Duration(out.WallS * float64(time.Second))
	res.p50, res.p99 = out.P50, out.P99
	return res
}

func writeThroughput(out string, o throughputOptions, ours, peer [][]tpResult) error {
	var rows [][]string
	for i := range ours {
		for j, r := range append(append([]tpResult(nil), ours[i]...), peer[i]...) {
			rep := strconv.Itoa(j%len(ours[i]) + 1)
			if r.err != nil {
				rows = append(rows, []string{rep, r.system, strconv.Itoa(r.clients), strconv.Itoa(r.tasks), "", "", "", "", r.load, r.err.Error()})
				continue
			}
			rows = append(rows, []string{rep, r.system, strconv.Itoa(r.clients), strconv.Itoa(r.tasks), f3(r.wall.Seconds()), f2(r.rate()), f2(r.p50), f2(r.p99), r.load, ""})
		}
	}
	if err := writeCSV(filepath.Join(out, "throughput.csv"), []string{"rep", "system", "clients", "tasks", "wall_s", "tasks_per_s", "submit_to_start_p50_ms", "submit_to_start_p99_ms", "load_after", "error"}, rows); err != nil {
		return err
	}
	// of returns f of each run that ran.
	of := func(rs []tpResult, f func(tpResult) float64) (xs []float64) {
		for _, r := range rs {
			if r.err == nil {
				xs = append(xs, f(r))
			}
		}
		return xs
	}
	rates := func(rs []tpResult) []float64 { return of(rs, tpResult.rate) }
	p50s := func(rs []tpResult) []float64 { return of(rs, func(r tpResult) float64 { return r.p50 }) }
	sOurs := series{name: "MegaFlow (3 heads, 2 workers), median"}
	sPeer := series{name: "Dask distributed (LocalCluster, 2 worker processes), median"}
	lOurs := series{name: "MegaFlow p50, median"}
	lPeer := series{name: "Dask p50, median"}
	for i, c := range o.clients {
		if xs := rates(ours[i]); len(xs) > 0 {
			_, m, _ := minMedMax(xs)
			_, l, _ := minMedMax(p50s(ours[i]))
			sOurs.xs, sOurs.ys = append(sOurs.xs, float64(c)), append(sOurs.ys, m)
			lOurs.xs, lOurs.ys = append(lOurs.xs, float64(c)), append(lOurs.ys, l)
		}
		if xs := rates(peer[i]); len(xs) > 0 {
			_, m, _ := minMedMax(xs)
			_, l, _ := minMedMax(p50s(peer[i]))
			sPeer.xs, sPeer.ys = append(sPeer.xs, float64(c)), append(sPeer.ys, m)
			lPeer.xs, lPeer.ys = append(lPeer.xs, float64(c)), append(lPeer.ys, l)
		}
	}
	if err := linePlot(filepath.Join(out, "throughput.png"), axes{title: "No-op tasks end to end: committed tasks/s vs clients (median of the repetitions)", x: "concurrent clients", y: "tasks/s (submit to result recorded)", logX: true, yFrom0: true}, sOurs, sPeer); err != nil {
		return err
	}
	if err := linePlot(filepath.Join(out, "throughput_latency.png"), axes{title: "No-op tasks: submit-to-start latency p50 vs clients (median of the repetitions)", x: "concurrent clients", y: "p50 latency (ms)", logX: true, yFrom0: true}, lOurs, lPeer); err != nil {
		return err
	}
	mmm := func(xs []float64, format string) string {
		if len(xs) == 0 {
			return "not run"
		}
		lo, med, hi := minMedMax(xs)
		return fmt.Sprintf(format+" / "+format+" / "+format, lo, med, hi)
	}
	rep := newReport(out, "throughput.md", "megaflow-bench throughput")
	rep.p("No-op tasks end to end. MegaFlow: 3 heads (Raft over TCP loopback, BoltDB, gossip, gRPC) and 2 workers in this process, the fake runtime (a container exits 0 at once); a batch is one graph of %d tasks, submitted through the client library, waited for (Watch) and read back. Dask: Debian's python3-distributed, a LocalCluster of 2 worker processes with 1 thread each, one Client per client thread, a batch is client.map of %d no-op calls then gather. Each client waits for a batch's results before submitting the next. Both sides get a warm-up batch per client; they run alternately on the same machine (MegaFlow first at each client count), and the whole sequence runs %d times (repetitions interleaved). Submit-to-start: the attempt's start time in the table (MegaFlow) or the time the function began (Dask), minus the batch's submit time. Figures are min / median / max over the repetitions; a ratio is taken within each repetition.", o.batch, o.batch, o.reps)
	rep.p("")
	var trows [][]string
	for i, c := range o.clients {
		var ratios []float64
		for j, r := range ours[i] {
			if j < len(peer[i]) && peer[i][j].err == nil && r.err == nil {
				ratios = append(ratios, r.rate()/peer[i][j].rate())
			}
		}
		var errText string
		for _, d := range peer[i] {
			if d.err != nil {
				errText = d.err.Error()
			}
		}
		ratio := "not run"
		if len(ratios) > 0 {
			lo, med, hi := minMedMax(ratios)
			ratio = fmt.Sprintf("%.2f / **%.2f** / %.2f", lo, med, hi)
		} else if errText != "" {
			ratio = "could not run: " + errText
		}
		trows = append(trows, []string{strconv.Itoa(c), strconv.Itoa(max(1, o.tasks/c) * c), mmm(rates(ours[i]), "%.0f"), mmm(p50s(ours[i]), "%.1f"), mmm(rates(peer[i]), "%.0f"), mmm(p50s(peer[i]), "%.1f"), ratio})
	}
	rep.table([]string{"clients", "tasks per repetition", "MegaFlow tasks/s", "MegaFlow submit-to-start p50 ms", "Dask tasks/s", "Dask submit-to-start p50 ms", "MegaFlow / Dask tasks/s (target >= 10 at the median)"}, trows)
	rep.p("Where MegaFlow's time went, from the leader's metrics (means per attempt or per command, ms, median over the repetitions): each stage runs between the leader's timestamps of two commands, taken when the leader makes them: queued = QUEUED to ASSIGNED (the submission's commit, the wait for a scheduling round and the planning; 0 for a task placed with its submission or with the end that freed its room), starting = ASSIGNED to RUNNING (the commit that placed it, the delivery, the start on the worker, and the worker's event until the leader proposes it, behind the worker's earlier batch in flight), running = RUNNING to the attempt's end, Raft apply = a command's proposal to its application on the leader (megaflow_raft_apply_duration_seconds), commands per batch = the commands the leader applied in the run divided by the batches (submissions, plans, event batches, anything else; at 1 client the chain of commits a batch waits for, at more the clients' batches share commits). A task placed with its submission, or with an event batch (the leader's round on the table the command leaves, which the command carries), counts that command's commit in starting, not queued.")
	rep.p("")
	var srows [][]string
	for i, c := range o.clients {
		var q, st, ru, ap, cb []float64
		for _, r := range ours[i] {
			q, st, ru, ap = append(q, r.stages.queued), append(st, r.stages.starting), append(ru, r.stages.running), append(ap, r.stages.apply)
			cb = append(cb, r.commandsPerBatch)
		}
		med := func(xs []float64) string {
			_, m, _ := minMedMax(xs)
			return fmt.Sprintf("%.1f", m)
		}
		srows = append(srows, []string{strconv.Itoa(c), med(q), med(st), med(ru), med(ap), med(cb)})
	}
	rep.table([]string{"clients", "queued ms", "starting ms", "running ms", "Raft apply ms", "commands per batch"}, srows)
	var loads []string
	for i := range o.clients {
		for _, r := range ours[i] {
			loads = append(loads, r.load)
		}
	}
	rep.p("Load average (1, 5, 15 min) after each MegaFlow run: %s.", strings.Join(loads, "; "))
	rep.p("")
	rep.p("![throughput](throughput.png)")
	rep.p("")
	rep.p("![latency](throughput_latency.png)")
	return rep.save()
}
