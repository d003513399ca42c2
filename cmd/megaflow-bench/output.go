package main

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/megaflow/megaflow/internal/version"
)

// series is one line of a plot.
type series struct {
	name   string
	xs, ys []float64
}

// axes says how a plot's axes look.
type axes struct {
	title, x, y string
	logX, logY  bool
	yFrom0      bool
}

// linePlot writes a PNG line plot of ss to path (6 x 4 inches).
func linePlot(path string, a axes, ss ...series) error {
	p := plot.New()
	p.Title.Text = a.title
	p.X.Label.Text = a.x
	p.Y.Label.Text = a.y
	p.Legend.Top = true
	p.Legend.Left = true
	if a.logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if a.logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	var args []any
	for _, s := range ss {
		xys := make(plotter.XYs, 0, len(s.xs))
		for i := range s.xs {
			if (a.logX && s.xs[i] <= 0) || (a.logY && s.ys[i] <= 0) || math.IsNaN(s.ys[i]) {
				continue
			}
			xys = append(xys, plotter.XY{X: s.xs[i], Y: s.ys[i]})
		}
		if len(xys) > 0 {
			args = append(args, s.name, xys)
		}
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if a.yFrom0 && !a.logY {
		p.Y.Min = 0
	}
	// One point (one client count, say) gives a log axis the range
	// [v, v], which gonum/plot pads down to 0 and then refuses ("Values
	// must be greater than 0 for a log scale"): widen it to a factor of 2
	// each way.
	if a.logX && p.X.Min == p.X.Max && p.X.Min > 0 {
		p.X.Min, p.X.Max = p.X.Min/2, p.X.Max*2
	}
	if a.logY && p.Y.Min == p.Y.Max && p.Y.Min > 0 {
		p.Y.Min, p.Y.Max = p.Y.Min/2, p.Y.Max*2
	}
	p.Add(plotter.NewGrid())
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("save plot %s: %w", path, err)
	}
	return nil
}

// writeCSV writes a header and rows to path.
func writeCSV(path string, header []string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	w := csv.NewWriter(f)
	_ = w.Write(header)
	_ = w.WriteAll(rows)
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// percentile returns the p-th percentile (0..100, nearest rank) of xs; NaN
// when xs is empty. xs is not modified.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t / float64(len(xs))
}

func f2(x float64) string { return fmt.Sprintf("%.2f", x) }
func f3(x float64) string { return fmt.Sprintf("%.3f", x) }

// cpuTime returns this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machine describes the machine the harness runs on, for the reports.
func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if _, v, ok := strings.Cut(l, ":"); ok {
					cpu = strings.TrimSpace(v)
				}
				break
			}
		}
	}
	mem := "unknown memory"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	commit := "unknown commit"
	if v := version.Get(); v.Commit != "" {
		// The binary's own build: what ran, wherever it runs from.
		commit = v.Commit[:min(12, len(v.Commit))]
		if v.Modified {
			commit += " (built with uncommitted changes)"
		}
	} else if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
		// The results folder is left out: a run writes its CSVs and plots
		// there before its report.
		if st, err := exec.Command("git", "status", "--porcelain", "--", ".", ":(exclude)bench/results").Output(); err == nil && len(st) > 0 {
			commit += " (with uncommitted changes)"
		}
	}
	return fmt.Sprintf("%s, %d cores (GOMAXPROCS %d), %s memory, %s %s/%s, commit %s, %s, load average at the end %s",
		cpu, runtime.NumCPU(), runtime.GOMAXPROCS(0), mem, runtime.Version(), runtime.GOOS, runtime.GOARCH, commit,
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), loadAvg())
}

// report is a markdown report being written.
type report struct {
	path string
	b    strings.Builder
}

func newReport(dir, name, title string) *report {
	r := &report{path: filepath.Join(dir, name)}
	fmt.Fprintf(&r.b, "# %s\n\nMachine: %s.\n\n", title, machine())
	return r
}

func (r *report) p(format string, args ...any) { fmt.Fprintf(&r.b, format+"\n", args...) }

// table writes a markdown table.
func (r *report) table(header []string, rows [][]string) {
	r.p("| %s |", strings.Join(header, " | "))
	seps := make([]string, len(header))
	for i := range seps {
		seps[i] = "---"
	}
	r.p("| %s |", strings.Join(seps, " | "))
	for _, row := range rows {
		r.p("| %s |", strings.Join(row, " | "))
	}
	r.p("")
}

func (r *report) save() error {
	return os.WriteFile(r.path, []byte(r.b.String()), 0o644)
}

// loadAvg returns /proc/loadavg's 1, 5 and 15 minute figures: how busy the
// (shared) machine was, which the absolute figures depend on.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
