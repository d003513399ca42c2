package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/megaflow/megaflow/internal/chaos/fault"
	"github.com/megaflow/megaflow/internal/chaos/harness"
	"github.com/megaflow/megaflow/internal/chaos/history"
)

func chaosCmd(g *globals) *cobra.Command {
	cfg := harness.DefaultConfig()
	var profile, kinds string
	var duration time.Duration
	maxFaults := -1
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "fault drills on real processes on their own network hosts, with a linearizability check of what clients saw",
		Long: `chaos builds one Linux network namespace per host (3 megaflow-head, --workers
megaflow-worker processes on the process runtime, each with its own address on a
bridge), runs a workload from --clients concurrent clients through the Go client
library (submits of 1-task and 50-task graphs, cancels, reads, watches; tasks
that append one line per execution to a file on their host, some that fail,
some that time out), and injects the faults of a seeded schedule: kill -9 and
restart of a head (the leader preferred) or a worker, SIGSTOP/SIGCONT, a node
cut from all, the leader cut from the other heads, a worker cut from the
leader, a leader deaf to one follower, a slow link, packet loss.

Every client operation is recorded with its invoke and return times and checked
with porcupine against a model of the task table, per task. At the end the
harness heals everything, waits for the cluster to settle and checks directly:
every acknowledged graph present on every head, every task terminal, no result
recorded twice, every head at the same applied index with the same table, no
process left, no panic or data race in the logs. Executions are counted from
the hosts' files: two executions of one task overlapping in time fail the run,
unless the worker of one of them was frozen then (the lease rule); those are
counted apart.

It writes chaos.md, chaos.csv (the faults), chaos_timeline.csv and chaos.png
into --out; a failing run keeps its logs and data in --out/chaos-run and exits
non-zero. --seed S replays the same schedule. Needs root, iproute2, iptables
and the binaries of make build. docs/reliability.md describes the profiles.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch profile {
			case "short":
				cfg.Profile = fault.Short()
			case "long":
				cfg.Profile = fault.Long()
			default:
				return fmt.Errorf("--profile %q: give short or long", profile)
			}
			if g.full && !cmd.Flags().Changed("profile") {
				cfg.Profile = fault.Long()
			}
			if duration > 0 {
				cfg.Profile.Duration = duration
			}
			if maxFaults >= 0 {
				cfg.Profile.MaxFaults = maxFaults
			}
			ks, err := fault.ParseKinds(kinds)
			if err != nil {
				return fmt.Errorf("--kinds: %w", err)
			}
			cfg.Profile.Kinds = ks
			cfg.Dir = filepath.Join(g.out, "chaos-run")
			_ = os.RemoveAll(cfg.Dir)
			cfg.Progress = os.Stdout
			res, err := harness.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			printChaos(os.Stdout, res)
			if err := writeChaos(g.out, res); err != nil {
				return err
			}
			if !res.Verdict.Pass() {
				return fmt.Errorf("chaos run failed (seed %d; logs and data kept in %s): %s", cfg.Seed, cfg.Dir, strings.Join(res.Verdict.Failures, "; "))
			}
			if !cfg.Keep {
				_ = os.RemoveAll(cfg.Dir)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()%1_000_000), "seed of the fault schedule and the workload (the same seed replays the same schedule)")
	f.StringVar(&profile, "profile", "short", "short (about 2 minutes, every fault kind once and a few more kills) or long (30 minutes, about 300 faults; --full)")
	f.DurationVar(&duration, "duration", 0, "length of the faulty phase (default: the profile's)")
	f.IntVar(&maxFaults, "faults", -1, "most faults to inject (default: the profile's)")
	f.StringVar(&kinds, "kinds", "all", "comma-separated fault kinds: "+kindList())
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "worker hosts")
	f.IntVar(&cfg.Clients, "clients", cfg.Clients, "concurrent workload clients")
	f.DurationVar(&cfg.Pace, "pace", cfg.Pace, "mean pause of a client between two operations")
	f.DurationVar(&cfg.OpTimeout, "op-timeout", cfg.OpTimeout, "deadline of one client call (past it the outcome is unknown)")
	f.DurationVar(&cfg.Lease, "worker-lease", cfg.Lease, "the heads' --worker-lease (the workers heartbeat every lease/6)")
	f.DurationVar(&cfg.LeaseMargin, "worker-lease-margin", cfg.LeaseMargin, "the heads' --worker-lease-margin")
	f.StringVar(&cfg.HeadBin, "head-bin", cfg.HeadBin, "the megaflow-head binary")
	f.StringVar(&cfg.WorkerBin, "worker-bin", cfg.WorkerBin, "the megaflow-worker binary")
	f.StringVar(&cfg.InitBin, "init-bin", cfg.InitBin, "the megaflow-init binary (every worker's --init-path)")
	f.BoolVar(&cfg.Keep, "keep", false, "keep the run's logs and data in --out/chaos-run even when it passes")
	f.StringVar(&cfg.Break, "break", "", "apply a deliberately broken build to the verdict (duplicate-result: one result recorded twice) to see the run fail")
	return cmd
}

func kindList() string {
	var s []string
	for _, k := range fault.AllKinds {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}

// chaosSummary is the summary table's rows.
func chaosSummary(res *harness.Result) [][]string {
	v := res.Verdict
	counts := map[fault.Kind]int{}
	errs := 0
	for _, f := range res.Faults {
		counts[f.Fault.Kind]++
		if f.Err != "" {
			errs++
		}
	}
	var per []string
	for _, k := range fault.AllKinds {
		if counts[k] > 0 {
			per = append(per, fmt.Sprintf("%s %d", k, counts[k]))
		}
	}
	lin := "yes"
	if !v.Lin.OK() {
		lin = fmt.Sprintf("NO (%d illegal, %d undecided)", len(v.Lin.Illegal), v.Lin.TimedOut)
	}
	verdict := "PASS"
	if !v.Pass() {
		verdict = "FAIL: " + strings.Join(v.Failures, "; ")
	}
	var states []string
	for _, s := range []string{"SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED", "PENDING", "QUEUED", "ASSIGNED", "RUNNING"} {
		if v.States[s] > 0 {
			states = append(states, fmt.Sprintf("%s %d", s, v.States[s]))
		}
	}
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "NO"
	}
	return [][]string{
		{"seed, profile", fmt.Sprintf("%d, %s (%v faulty phase, %v in all)", res.Config.Seed, res.Config.Profile.Name, res.Workload.Round(time.Second), res.Total.Round(time.Second))},
		{"faults injected", fmt.Sprintf("%d of %d kinds (%s); %d failed to inject or heal", len(res.Faults), len(counts), strings.Join(per, ", "), errs)},
		{"client operations acknowledged", strconv.Itoa(v.Acknowledged)},
		{"client operations with unknown outcome", strconv.Itoa(v.Unknown)},
		{"graphs / tasks acknowledged", fmt.Sprintf("%d / %d", v.AckedGraphs, v.AckedTasks)},
		{"final task states (leader)", strings.Join(states, ", ")},
		{"lost (acknowledged, missing at the end)", strconv.Itoa(v.Lost)},
		{"not terminal after healing", strconv.Itoa(v.NotTerminal)},
		{"results recorded twice", strconv.Itoa(v.DuplicateResults)},
		{"history linearizable (porcupine)", fmt.Sprintf("%s: %d partitions, %d per-task operations", lin, v.Lin.Partitions, v.Lin.Ops)},
		{"impossible reads / watch events out of order", fmt.Sprintf("%d / %d", v.ReadProblems, v.WatchProblems)},
		{"heads at the same applied index, same table", yes(v.HeadsAgree)},
		{"executions (from the hosts' files)", strconv.Itoa(v.Executions)},
		{"tasks executed more than once (retries)", strconv.Itoa(v.ReExecuted)},
		{"tasks that lost an attempt with its worker (re-queued)", strconv.Itoa(v.Requeued)},
		{"tasks with overlapping executions outside a worker freeze", strconv.Itoa(v.Overlapping)},
		{"tasks with overlapping executions during a worker freeze (allowed)", strconv.Itoa(v.OverlapAllowed)},
		{"executions killed without an end line (not compared)", strconv.Itoa(v.Unended)},
		{"attempts executed twice", strconv.Itoa(v.SameAttemptTwice)},
		{"ended tasks whose attempt is still active at the end", strconv.Itoa(v.ActiveAtEnd)},
		{"processes left after the cluster stopped", strconv.Itoa(v.LeakedProcesses)},
		{"verdict", verdict},
	}
}

func printChaos(w *os.File, res *harness.Result) {
	rows := chaosSummary(res)
	width := 0
	for _, r := range rows {
		width = max(width, len(r[0]))
	}
	fmt.Fprintln(w, "chaos summary:")
	for _, r := range rows {
		fmt.Fprintf(w, "  %-*s  %s\n", width, r[0], r[1])
	}
	for _, d := range res.Verdict.Details {
		fmt.Fprintln(w, "  detail:", d)
	}
}

// timeline buckets the acknowledged and unknown operations by second.
func timeline(res *harness.Result) (acked, unknown []float64) {
	n := max(1, int(res.Workload/time.Second)) // whole seconds only
	acked, unknown = make([]float64, n), make([]float64, n)
	for _, op := range res.Ops {
		if op.Kind == history.Watch {
			continue
		}
		s := int(op.Call / int64(time.Second))
		if s < 0 || s >= n {
			continue
		}
		if op.Return == history.Unknown {
			unknown[s]++
		} else {
			acked[s]++
		}
	}
	return acked, unknown
}

func writeChaos(out string, res *harness.Result) error {
	var rows [][]string
	for _, f := range res.Faults {
		rows = append(rows, []string{strconv.Itoa(f.Fault.Seq), string(f.Fault.Kind), f.Target,
			f3(float64(f.Start) / 1e9), f3(float64(f.End) / 1e9), f.Err})
	}
	if err := writeCSV(filepath.Join(out, "chaos.csv"), []string{"seq", "kind", "target", "start_s", "end_s", "error"}, rows); err != nil {
		return err
	}
	acked, unknown := timeline(res)
	rows = rows[:0]
	for s := range acked {
		active := ""
		for _, f := range res.Faults {
			if f.Start <= int64(s+1)*1e9 && f.End >= int64(s)*1e9 {
				active = string(f.Fault.Kind)
			}
		}
		rows = append(rows, []string{strconv.Itoa(s), strconv.Itoa(int(acked[s])), strconv.Itoa(int(unknown[s])), active})
	}
	if err := writeCSV(filepath.Join(out, "chaos_timeline.csv"), []string{"second", "acknowledged_ops", "unknown_ops", "fault"}, rows); err != nil {
		return err
	}
	if err := chaosPlot(filepath.Join(out, "chaos.png"), res, acked, unknown); err != nil {
		return err
	}
	rep := newReport(out, "chaos.md", "megaflow-bench chaos")
	rep.p("3 megaflow-head and %d megaflow-worker processes (process runtime), each in its own network namespace with its own address on a bridge; %d workload clients through the Go client library; heads run with --worker-lease %v --worker-lease-margin %v, workers with --heartbeat-interval %v and every task under megaflow-init. Profile %s, seed %d: replay with `megaflow-bench chaos --profile %s --seed %d`. docs/reliability.md says what is promised and how this run checks it.",
		res.Config.Workers, res.Config.Clients, res.Config.Lease, res.Config.LeaseMargin, res.Config.HeartbeatInterval(), res.Config.Profile.Name, res.Config.Seed, res.Config.Profile.Name, res.Config.Seed)
	rep.p("")
	rep.table([]string{"", ""}, chaosSummary(res))
	if ds := res.Verdict.Details; len(ds) > 0 {
		rep.p("Details:")
		rep.p("")
		for _, d := range ds {
			rep.p("- `%s`", d)
		}
		rep.p("")
	}
	counts := map[fault.Kind][]float64{}
	for _, f := range res.Faults {
		counts[f.Fault.Kind] = append(counts[f.Fault.Kind], float64(f.End-f.Start)/1e9)
	}
	var krows [][]string
	for _, k := range fault.AllKinds {
		if d := counts[k]; len(d) > 0 {
			krows = append(krows, []string{string(k), strconv.Itoa(len(d)), fmt.Sprintf("%.1f s", mean(d))})
		}
	}
	rep.table([]string{"fault kind", "injected", "mean hold"}, krows)
	rep.p("Faults one by one are in chaos.csv, acknowledged operations per second in chaos_timeline.csv.")
	rep.p("")
	rep.p("![timeline of faults and throughput](chaos.png)")
	return rep.save()
}

// chaosPlot draws acknowledged operations per second over the run, with
// one row of bars per fault kind showing when each fault held.
func chaosPlot(path string, res *harness.Result, acked, unknown []float64) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("chaos: seed %d, %d faults", res.Config.Seed, len(res.Faults))
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "client operations per second"
	top := 1.0
	for _, a := range acked {
		top = max(top, a)
	}
	mk := func(ys []float64) plotter.XYs {
		xy := make(plotter.XYs, len(ys))
		for i, y := range ys {
			xy[i] = plotter.XY{X: float64(i), Y: y}
		}
		return xy
	}
	la, err := plotter.NewLine(mk(acked))
	if err != nil {
		return err
	}
	la.Color = color.RGBA{B: 200, A: 255}
	lu, err := plotter.NewLine(mk(unknown))
	if err != nil {
		return err
	}
	lu.Color = color.RGBA{R: 200, A: 255}
	lu.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
	p.Add(plotter.NewGrid(), la, lu)
	p.Legend.Add("acknowledged", la)
	p.Legend.Add("unknown outcome", lu)
	p.Legend.Top = true
	kinds := map[fault.Kind]int{}
	var order []fault.Kind
	for _, k := range fault.AllKinds {
		for _, f := range res.Faults {
			if f.Fault.Kind == k {
				kinds[k] = len(order)
				order = append(order, k)
				break
			}
		}
	}
	palette := []color.RGBA{{230, 25, 75, 255}, {60, 180, 75, 255}, {245, 130, 48, 255}, {145, 30, 180, 255}, {70, 240, 240, 255},
		{240, 50, 230, 255}, {128, 128, 0, 255}, {0, 128, 128, 255}, {170, 110, 40, 255}, {128, 0, 0, 255}}
	sort.SliceStable(res.Faults, func(i, j int) bool { return res.Faults[i].Start < res.Faults[j].Start })
	for _, k := range order {
		y := top * (1.05 + 0.06*float64(kinds[k]))
		var first *plotter.Line
		for _, f := range res.Faults {
			if f.Fault.Kind != k {
				continue
			}
			l, err := plotter.NewLine(plotter.XYs{{X: float64(f.Start) / 1e9, Y: y}, {X: float64(f.End) / 1e9, Y: y}})
			if err != nil {
				return err
			}
			l.Color = palette[kinds[k]%len(palette)]
			l.Width = vg.Points(4)
			p.Add(l)
			if first == nil {
				first = l
			}
		}
		if first != nil {
			p.Legend.Add(string(k), first)
		}
	}
	p.Y.Min = 0
	p.Y.Max = top * (1.15 + 0.06*float64(len(order)))
	p.Legend.Left = false
	p.Legend.XOffs = vg.Points(0)
	p.Legend.ThumbnailWidth = vg.Points(14)

	if err := p.Save(10*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("save plot %s: %w", path, err)
	}
	return nil
}
