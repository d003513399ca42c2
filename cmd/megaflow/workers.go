package main

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func workersCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "workers",
		Short: "List workers with capacity, allocation and status",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			workers, err := c.ListWorkers(ctx, g.read())
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"workers": protoList(workers)})
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKER\tSTATUS\tVERSION\tRUNTIME\tCPU (used/total)\tMEMORY (used/total)\tGPUS\tATTEMPTS\tLEASE\tLABELS\tREASON")
			now := time.Now()
			for _, w := range workers {
				capa, alloc := w.Info.GetCapacity(), w.GetAllocated()
				var labels []string
				for k, v := range w.Info.GetLabels() {
					labels = append(labels, k+"="+v)
				}
				sort.Strings(labels)
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1f/%.1f\t%s/%s\t%d/%d\t%d\t%s\t%s\t%s\n", w.Info.GetId(),
					strings.ToLower(strings.TrimPrefix(w.Status.String(), "WORKER_STATUS_")), orDash(w.Info.GetVersion()), w.Info.GetRuntime(),
					float64(alloc.GetCpuMillis())/1000, float64(capa.GetCpuMillis())/1000,
					bytesIEC(alloc.GetMemoryBytes()), bytesIEC(capa.GetMemoryBytes()), alloc.GetGpus(), capa.GetGpus(),
					w.ActiveAttempts, leaseState(w.GetLeaseRenewedUnixNanos(), w.GetLeaseExpiresUnixNanos(), now),
					orDash(strings.Join(labels, ",")), w.Reason)
			}
			return tw.Flush()
		},
	}
}

// leaseState describes a worker's lease as the leader holds it: "renewed
// 1.2s ago, expires in 13.8s", "expired 2s ago", or "-" when the answer
// came from a follower (only the leader holds leases) or the worker is
// down.
func leaseState(renewed, expires int64, now time.Time) string {
	if expires == 0 {
		return "-"
	}
	in := time.Unix(0, expires).Sub(now).Round(100 * time.Millisecond)
	var s string
	if renewed != 0 {
		s = "renewed " + now.Sub(time.Unix(0, renewed)).Round(100*time.Millisecond).String() + " ago, "
	} else {
		s = "not renewed yet, "
	}
	if in <= 0 {
		return s + "expired " + (-in).String() + " ago"
	}
	return s + "expires in " + in.String()
}

// bytesIEC formats a byte count with binary units (1.5Gi).
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ci", float64(n)/float64(div), "KMGTPE"[exp])
}
