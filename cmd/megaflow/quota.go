package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
)

// quotaCmd is `megaflow quota` (list quotas with usage) and `megaflow quota
// set TENANT ...` / `megaflow quota set --cluster ...`.
func quotaCmd(g *globals) *cobra.Command {
	list := &cobra.Command{
		Use:   "quota",
		Short: "List tenant quotas and the cluster limit with current usage",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			qs, err := c.GetQuotas(ctx, g.read())
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(qs)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tRUNNING\tCPU\tMEMORY\tGPUS")
			row := func(name string, u interface {
				GetRunning() int32
			}, q *client.Quota, used *client.Resources) {
				fmt.Fprintf(tw, "%s\t%d/%s\t%.1f/%s\t%s/%s\t%d/%s\n", name,
					u.GetRunning(), limit(int64(q.GetMaxRunning()), func(n int64) string { return fmt.Sprint(n) }),
					float64(used.GetCpuMillis())/1000, limit(q.GetCpuMillis(), func(n int64) string { return fmt.Sprintf("%.1f", float64(n)/1000) }),
					bytesIEC(used.GetMemoryBytes()), limit(q.GetMemoryBytes(), bytesIEC),
					used.GetGpus(), limit(int64(q.GetGpus()), func(n int64) string { return fmt.Sprint(n) }))
			}
			row("(cluster)", qs.GetCluster(), qs.GetCluster().GetQuota(), qs.GetCluster().GetUsed())
			for _, u := range qs.GetQuotas() {
				row(u.GetQuota().GetTenant(), u, u.GetQuota(), u.GetUsed())
			}
			for _, u := range qs.GetUnlimited() {
				row(u.GetQuota().GetTenant(), u, u.GetQuota(), u.GetUsed())
			}
			return tw.Flush()
		},
	}
	var (
		q       client.Quota
		cluster bool
	)
	set := &cobra.Command{
		Use:   "set [TENANT]",
		Short: "Change limits of a tenant's quota (or, with --cluster, of the cluster limit); the others are kept",
		Long: "Set a tenant's quota of running tasks, CPU millicores, memory bytes and GPUs, held in the replicated table\n" +
			"and enforced by the scheduler and the plan verifier. Only the limits given change: the others keep their\n" +
			"current values (read from the leader just before; a concurrent change of the same quota between the read and\n" +
			"the write is overwritten). Zero is no limit; a quota whose limits are all zero is removed.\n" +
			"With --cluster and no tenant, set the cluster-wide limit instead.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case cluster && len(args) == 1:
				return errs.New(errs.InvalidArgument, "quota set: give a TENANT or --cluster, not both")
			case !cluster && len(args) == 0:
				return errs.New(errs.InvalidArgument, "quota set: give a TENANT, or --cluster for the cluster-wide limit")
			}
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			if err := keepOtherLimits(ctx, cmd, c, &q, cluster, args); err != nil {
				return err
			}
			var index uint64
			if cluster {
				index, err = c.SetClusterLimit(ctx, &q)
			} else {
				q.Tenant = args[0]
				index, err = c.SetQuota(ctx, &q)
			}
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"index": index})
			}
			who := "tenant " + q.Tenant
			if cluster {
				who = "the cluster"
			}
			fmt.Fprintf(g.stdout, "quota of %s set at index %d\n", who, index)
			return nil
		},
	}
	set.Flags().Int32Var(&q.MaxRunning, "max-running", 0, "most tasks ASSIGNED or RUNNING at once (0: no limit; not given: kept)")
	set.Flags().Int64Var(&q.CpuMillis, "cpu-millis", 0, "most CPU millicores requested by running tasks in all (0: no limit; not given: kept)")
	set.Flags().Int64Var(&q.MemoryBytes, "memory-bytes", 0, "most memory bytes requested by running tasks in all (0: no limit; not given: kept)")
	set.Flags().Int32Var(&q.Gpus, "gpus", 0, "most GPUs held by running tasks in all (0: no limit; not given: kept)")
	set.Flags().BoolVar(&cluster, "cluster", false, "set the cluster-wide limit instead of a tenant's quota")
	list.AddCommand(set)
	return list
}

// keepOtherLimits fills the limits of q whose flags were not given with
// the current quota's (the tenant's in args, or the cluster's), read from
// the leader, so `quota set T --cpu-millis 500` changes only the CPU limit.
func keepOtherLimits(ctx context.Context, cmd *cobra.Command, c *client.Client, q *client.Quota, cluster bool, args []string) error {
	f := cmd.Flags()
	if f.Changed("max-running") && f.Changed("cpu-millis") && f.Changed("memory-bytes") && f.Changed("gpus") {
		return nil
	}
	qs, err := c.GetQuotas(ctx, client.ReadOptions{RequireLeader: true})
	if err != nil {
		return fmt.Errorf("quota set: reading the current quota to keep the limits not given: %w", err)
	}
	cur := qs.GetCluster().GetQuota()
	if !cluster {
		cur = nil
		for _, u := range qs.GetQuotas() {
			if u.GetQuota().GetTenant() == args[0] {
				cur = u.GetQuota()
			}
		}
	}
	if !f.Changed("max-running") {
		q.MaxRunning = cur.GetMaxRunning()
	}
	if !f.Changed("cpu-millis") {
		q.CpuMillis = cur.GetCpuMillis()
	}
	if !f.Changed("memory-bytes") {
		q.MemoryBytes = cur.GetMemoryBytes()
	}
	if !f.Changed("gpus") {
		q.Gpus = cur.GetGpus()
	}
	return nil
}

// limit formats a limit, "-" for none.
func limit(n int64, format func(int64) string) string {
	if n == 0 {
		return "-"
	}
	return format(n)
}

// limitsCmd is `megaflow limits`: the answering head's API rate limit and
// the cluster-wide settings.
func limitsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "limits",
		Short: "Show the per-tenant API rate limit of a head and the cluster-wide limits",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			l, err := c.GetLimits(ctx, g.read())
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(l)
			}
			rl := "none"
			if l.GetRateLimit() > 0 {
				rl = fmt.Sprintf("%g calls/s per tenant, burst %d", l.GetRateLimit(), l.GetRateBurst())
			}
			cl := l.GetCluster()
			wait := "never"
			if l.GetMaxQueueWaitMillis() > 0 {
				wait = (time.Duration(l.GetMaxQueueWaitMillis()) * time.Millisecond).String()
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "head\t%s\n", l.GetHeadId())
			fmt.Fprintf(tw, "api rate limit\t%s\n", rl)
			fmt.Fprintf(tw, "cluster max running\t%s\n", limit(int64(cl.GetMaxRunning()), func(n int64) string { return fmt.Sprint(n) }))
			fmt.Fprintf(tw, "cluster cpu\t%s\n", limit(cl.GetCpuMillis(), func(n int64) string { return fmt.Sprintf("%.1f cores", float64(n)/1000) }))
			fmt.Fprintf(tw, "cluster memory\t%s\n", limit(cl.GetMemoryBytes(), bytesIEC))
			fmt.Fprintf(tw, "cluster gpus\t%s\n", limit(int64(cl.GetGpus()), func(n int64) string { return fmt.Sprint(n) }))
			fmt.Fprintf(tw, "fail infeasible tasks queued for\t%s\n", wait)
			return tw.Flush()
		},
	}
}
