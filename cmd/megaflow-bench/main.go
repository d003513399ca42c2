// Command megaflow-bench is MegaFlow's benchmark harness: it reproduces the
// paper's scaling curves with simulated instances (scale), measures
// end-to-end task throughput against Dask distributed (throughput), leader
// and worker failover (failover), replays a cluster trace (replay), and
// runs fault drills on real processes on their own network hosts with a
// linearizability check of what clients saw (chaos), and keeps a steady
// load on 3 head processes for an hour while sampling their memory (soak).
// Each of those writes
// CSVs, PNG plots and a markdown report into --out. One more, sandboxes, is
// the Go client's arm of bench/python_sandboxes.py: it prints its figures
// as JSON for that script. bench/README.md describes the runs and their
// figures.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/internal/version"
)

// globals are the flags every subcommand shares.
type globals struct {
	out        string
	full       bool
	verbose    bool
	cpuProfile string
	stopProf   func()
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := rootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "megaflow-bench:", err)
		os.Exit(1)
	}
}

func rootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "megaflow-bench",
		Short:         "MegaFlow's benchmark harness: scaling curves, throughput against Dask, failover, trace replay",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Get().String(),
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if err := os.MkdirAll(g.out, 0o755); err != nil {
				return fmt.Errorf("--out %q: %w", g.out, err)
			}
			if g.cpuProfile != "" {
				f, err := os.Create(g.cpuProfile)
				if err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				g.stopProf = func() { pprof.StopCPUProfile(); f.Close() }
			}
			return nil
		},
		PersistentPostRun: func(*cobra.Command, []string) {
			if g.stopProf != nil {
				g.stopProf()
			}
		},
	}
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	pf := root.PersistentFlags()
	pf.StringVar(&g.out, "out", "bench/results", "folder for the CSVs, PNGs, reports and the system's logs")
	pf.BoolVar(&g.full, "full", false, "the full runs (longer; see bench/README.md) instead of the short defaults")
	pf.StringVar(&g.cpuProfile, "cpuprofile", "", "write this process's CPU profile to this file (go tool pprof)")
	pf.BoolVarP(&g.verbose, "verbose", "v", false, "log the system under test at info level (into <out>/<subcommand>.log)")
	root.AddCommand(scaleCmd(g), throughputCmd(g), failoverCmd(g), replayCmd(g), chaosCmd(g), procrtCmd(g), soakCmd(g), sandboxesCmd())
	return root
}
