package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
)

// poolCmd is `megaflow pool` (list the pre-warm targets) and `megaflow pool
// warm IMAGE --size N [--workers k=v,...]`.
func poolCmd(g *globals) *cobra.Command {
	list := &cobra.Command{
		Use:   "pool",
		Short: "List the pre-warm targets of persistent mode's warm container pools",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			ts, err := c.PoolList(ctx, g.read())
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"targets": protoList(ts)})
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "IMAGE\tTENANT\tSIZE\tCPU\tMEMORY\tWORKERS\tSET AT")
			for _, t := range ts {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\n", t.GetImage(), t.GetTenant(), t.GetSize(),
					limit(t.GetCpuMillis(), func(n int64) string { return fmt.Sprintf("%.1f", float64(n)/1000) }),
					limit(t.GetMemoryBytes(), bytesIEC), selectorString(t.GetWorkerSelector()), t.GetModifyIndex())
			}
			return tw.Flush()
		},
	}
	var (
		t       client.PoolTarget
		workers string
	)
	warm := &cobra.Command{
		Use:   "warm IMAGE --size N",
		Short: "Keep N warm containers of IMAGE on each matching worker (persistent mode); --size 0 removes the target",
		Long: "Ask the workers matching --workers (every worker by default) to keep N warm containers of IMAGE for\n" +
			"persistent tasks of --tenant with --cpu-millis and --memory-bytes, ahead of a burst. The target is held in the\n" +
			"replicated table (it survives leader changes) and replaces an earlier one of the same image and tenant.\n" +
			"A sandbox create of the same image, tenant and limits (no --network) takes one of these containers\n" +
			"instead of starting one (docs/sandboxes.md, \"Warm pool\"); the pool then refills.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("size") {
				return errs.New(errs.InvalidArgument, "pool warm: give --size N (0 removes the target)")
			}
			sel, err := parseSelector(workers)
			if err != nil {
				return err
			}
			t.Image, t.WorkerSelector = args[0], sel
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			index, err := c.PoolWarm(ctx, &t)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"index": index})
			}
			if t.Size == 0 {
				fmt.Fprintf(g.stdout, "pre-warm target of %s removed at index %d\n", t.Image, index)
				return nil
			}
			fmt.Fprintf(g.stdout, "%d warm containers of %s per worker (%s) set at index %d\n", t.Size, t.Image,
				selectorString(sel), index)
			return nil
		},
	}
	warm.Flags().Int32Var(&t.Size, "size", 0, "warm containers per matching worker, 0 to 64 (0 removes the target)")
	warm.Flags().StringVar(&workers, "workers", "", "worker label selector, e.g. zone=a,disk=ssd (default: every worker)")
	warm.Flags().StringVar(&t.Tenant, "tenant", "", "tenant whose persistent tasks use the containers (default: \"default\")")
	warm.Flags().Int64Var(&t.CpuMillis, "cpu-millis", 0, "CPU millicores of those tasks (the containers' limit; 0: none)")
	warm.Flags().Int64Var(&t.MemoryBytes, "memory-bytes", 0, "memory bytes of those tasks (the containers' limit; 0: none)")
	list.AddCommand(warm)
	return list
}

// parseSelector reads "k=v,k2=v2" into a map; "" is no selector.
func parseSelector(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, errs.New(errs.InvalidArgument, "--workers %q: want KEY=VALUE pairs separated by commas, e.g. zone=a,disk=ssd", s)
		}
		out[k] = v
	}
	return out, nil
}

// selectorString formats a selector as "k=v,k2=v2", or "all workers".
func selectorString(sel map[string]string) string {
	if len(sel) == 0 {
		return "all workers"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		parts = append(parts, k+"="+sel[k])
	}
	return strings.Join(parts, ",")
}
