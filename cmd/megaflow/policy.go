package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/admission"
	"github.com/megaflow/megaflow/internal/errs"
)

// policyCmd is `megaflow policy`: set, get and list the container
// admission policies (docs/security.md).
func policyCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "policy",
		Short: "Set and show the per-tenant container admission policies (network, capabilities, user, read-only root, pids)",
		Long: "An admission policy bounds what a tenant's task and sandbox containers may ask for and forces limits on them.\n" +
			"Each tenant has the policy of its own row, else the cluster row (policy set --cluster), else the built-in\n" +
			"default: networks none, bridge and any named network but not host; no added capabilities; the image's user\n" +
			"(on a cluster whose ACLs were bootstrapped: 65534:65534, nobody); a writable root; no pids limit. The heads refuse a graph whose tasks ask for more (PERMISSION_DENIED, naming\n" +
			"the task, the field and the policy); the workers refuse it again and apply the user, read-only root and pids\n" +
			"limit to every container. Needs rules 5 (every head on a build that has them). See docs/security.md.",
		Args: cobra.NoArgs,
	}
	var (
		nets, caps []string
		readOnly   bool
		user       string
		maxPids    int64
		cluster    bool
	)
	set := &cobra.Command{
		Use:   "set TENANT|--cluster",
		Short: "Replace a tenant's admission policy (or, with --cluster, the cluster row) with the one the flags give",
		Long: "Replace the whole admission policy of TENANT (or, with --cluster, the cluster row, which applies to every\n" +
			"tenant without a row of its own) with the one the flags describe; flags not given allow or force nothing,\n" +
			"except that without --allow-network the networks are '*' (bridge and any named network, not host), as by\n" +
			"default, and without --user containers run as the image's user (often root; --user 0:0 is root whatever\n" +
			"the image). A policy equal to the built-in default in force removes the row; on a cluster whose ACLs were\n" +
			"bootstrapped that default runs containers as 65534:65534, so give --user 65534:65534 to keep them non-root\n" +
			"(policy set warns when a row would run them as the image's user where they ran as another). Examples:\n" +
			"  megaflow policy set team-a --allow-network '*' --allow-network host   # also the host network\n" +
			"  megaflow policy set team-a --allow-cap NET_ADMIN                      # default networks, one capability\n" +
			"  megaflow policy set --cluster --user 65534:65534 --read-only-root --max-pids 4096\n" +
			"  megaflow policy set --cluster --user 0:0                              # root again on a cluster with ACLs\n" +
			"  megaflow policy set team-a                                            # back to the cluster row or default\n" +
			"                                                                        # (with ACLs: add --user 65534:65534)",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case cluster && len(args) == 1:
				return errs.New(errs.InvalidArgument, "policy set: give a TENANT or --cluster, not both")
			case !cluster && len(args) == 0:
				return errs.New(errs.InvalidArgument, "policy set: give a TENANT, or --cluster for the cluster row")
			}
			p := &client.AdmissionPolicy{AllowedNetworks: nets, AllowedCapabilities: caps, ReadOnlyRootFs: readOnly,
				RunAsUser: user, MaxPids: maxPids}
			if !cmd.Flags().Changed("allow-network") {
				p.AllowedNetworks = []string{admission.AnyNetwork}
			}
			if !cluster {
				p.Tenant = args[0]
			}
			if _, err := admission.Normalize(p); err != nil {
				return err // before dialling: a clear error for a typo
			}
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			var (
				index   uint64
				removed bool
			)
			inForce, known := policyInForce(ctx, c, p.Tenant, g.read())
			before := inForce.GetRunAsUser()
			if cluster {
				index, removed, err = c.SetClusterAdmissionPolicy(ctx, p)
			} else {
				index, removed, err = c.SetAdmissionPolicy(ctx, p)
			}
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"index": index, "removed": removed})
			}
			who := "tenant " + p.Tenant
			if cluster {
				who = "the cluster row"
			}
			if known && before != "" && p.RunAsUser == "" && !removed {
				fmt.Fprintf(g.stderr, "note: %s ran containers as %s; it now runs them as the image's user (often root): add --user %s to keep it\n",
					who, before, before)
			}
			if known && !cmd.Flags().Changed("allow-network") && !slices.Contains(inForce.GetAllowedNetworks(), admission.AnyNetwork) && !removed {
				fmt.Fprintf(g.stderr, "note: %s allowed the networks %s; without --allow-network it now allows '*' (bridge and any named network): give --allow-network none (or the networks) to keep it narrower\n",
					who, networks(inForce))
			}
			if removed {
				fmt.Fprintf(g.stdout, "admission policy of %s removed (it equalled the default) at index %d\n", who, index)
				return nil
			}
			fmt.Fprintf(g.stdout, "admission policy of %s set at index %d\n", who, index)
			return nil
		},
	}
	f := set.Flags()
	f.StringArrayVar(&nets, "allow-network", nil, "a network tasks may ask for beyond none: bridge, host, a Docker network's name, or '*' for bridge and every named network (repeat; not given: '*')")
	f.StringArrayVar(&caps, "allow-cap", nil, "a Linux capability tasks may add, e.g. NET_ADMIN (repeat; not given: none)")
	f.BoolVar(&readOnly, "read-only-root", false, "give every container a read-only root file system (with a writable tmpfs at /tmp)")
	f.StringVar(&user, "user", "", "run every container as this numeric uid or uid:gid, e.g. 65534:65534; 0:0 is root (not given: the image's user)")
	f.Int64Var(&maxPids, "max-pids", 0, fmt.Sprintf("most processes and threads in one container, %d to %d (0: the worker's default, 1024)", admission.MinPids, admission.MaxPids))
	f.BoolVar(&cluster, "cluster", false, "set the cluster row (every tenant without a row of its own) instead of a tenant's")

	get := &cobra.Command{
		Use:   "get [TENANT]",
		Short: "Show a tenant's effective admission policy and where it comes from (its row, the cluster row, the default)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant := "default"
			if len(args) == 1 {
				tenant = args[0]
			}
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			p, src, err := c.GetAdmissionPolicy(ctx, tenant, g.read())
			if err != nil {
				return err
			}
			if g.output == "json" {
				pv, err := protoValue(p)
				if err != nil {
					return err
				}
				return g.printJSON(map[string]any{"tenant": tenant, "source": src.String(), "policy": pv})
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "tenant\t%s\n", tenant)
			fmt.Fprintf(tw, "from\t%s\n", admission.SourceName(src, tenant))
			writePolicy(tw, p)
			return tw.Flush()
		},
	}

	list := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the admission policy rows (the cluster row first); tenants without a row use the cluster row or the default",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			ps, err := c.ListAdmissionPolicies(ctx, g.read())
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"policies": protoList(ps)})
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tNETWORKS\tCAPABILITIES\tREAD-ONLY ROOT\tUSER\tMAX PIDS\tINDEX")
			for _, p := range ps {
				name := p.GetTenant()
				if name == "" {
					name = "(cluster)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\t%s\t%d\n", name, networks(p), orDash(strings.Join(p.GetAllowedCapabilities(), ",")),
					p.GetReadOnlyRootFs(), orDash(p.GetRunAsUser()), limit(p.GetMaxPids(), func(n int64) string { return fmt.Sprint(n) }), p.GetModifyIndex())
			}
			return tw.Flush()
		},
	}
	root.AddCommand(set, get, list)
	return root
}

// policyInForce returns the policy that a `policy set` replaces (the
// caller compares its user and networks with the new row's): tenant's
// effective policy, or for the cluster row
// ("") the cluster row, else the built-in default (as tenant "default"
// sees it when it has no row). known is false when it cannot tell (a read
// failed, or tenant "default" has a row of its own).
func policyInForce(ctx context.Context, c *client.Client, tenant string, ro client.ReadOptions) (p *client.AdmissionPolicy, known bool) {
	if tenant != "" {
		p, _, err := c.GetAdmissionPolicy(ctx, tenant, ro)
		return p, err == nil
	}
	rows, err := c.ListAdmissionPolicies(ctx, ro)
	if err != nil {
		return nil, false
	}
	if len(rows) > 0 && rows[0].GetTenant() == "" {
		return rows[0], true
	}
	p, src, err := c.GetAdmissionPolicy(ctx, "default", ro)
	if err != nil || src == client.AdmissionFromTenant {
		return nil, false
	}
	return p, true
}

// writePolicy prints a policy's fields, one per line.
func writePolicy(tw *tabwriter.Writer, p *client.AdmissionPolicy) {
	fmt.Fprintf(tw, "networks\t%s\n", networks(p))
	fmt.Fprintf(tw, "capabilities\t%s\n", orDash(strings.Join(p.GetAllowedCapabilities(), ",")))
	fmt.Fprintf(tw, "read-only root\t%t\n", p.GetReadOnlyRootFs())
	user := p.GetRunAsUser()
	if user == "" {
		user = "(the image's)"
	}
	fmt.Fprintf(tw, "user\t%s\n", user)
	fmt.Fprintf(tw, "max pids\t%s\n", limit(p.GetMaxPids(), func(n int64) string { return fmt.Sprint(n) }))
}

// networks lists the networks a policy allows, "none" first.
func networks(p *client.AdmissionPolicy) string {
	return strings.Join(append([]string{"none"}, p.GetAllowedNetworks()...), ",")
}
