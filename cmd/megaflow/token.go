package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/acl"
	"github.com/megaflow/megaflow/internal/errs"
)

// aclCmd is `megaflow acl`: bootstrap the first admin token.
func aclCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "acl",
		Short: "API tokens on a cluster with ACLs on (megaflow-head --acl): bootstrap the first admin token",
		Args:  cobra.NoArgs,
	}
	root.AddCommand(&cobra.Command{
		Use:   "bootstrap",
		Short: "Create the cluster's first admin token and print its secret once (works once per cluster)",
		Long: "Create the first admin token of a cluster whose heads run with --acl and print its accessor and secret.\n" +
			"The secret is shown this once and is stored nowhere: keep it (e.g. export MEGAFLOW_TOKEN=<secret>). A\n" +
			"second bootstrap is refused, even after the first token was revoked: an admin makes more tokens with\n" +
			"megaflow token create. See docs/security.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			tok, secret, err := c.BootstrapACL(ctx)
			if err != nil {
				return err
			}
			return g.printToken(tok, secret)
		},
	})
	return root
}

// tokenCmd is `megaflow token`: create, list and revoke API tokens.
func tokenCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke API tokens (needs an admin token)",
		Long: "API tokens authorize calls to a cluster with ACLs on (megaflow-head --acl). A token has a role: read\n" +
			"(its tenant's graphs, tasks, logs, artifacts, sandboxes), submit (read, and submit, cancel, delete and\n" +
			"sandbox calls of its tenant), admin (everything, every tenant: quotas, policies, heads, tokens) or\n" +
			"worker (a worker's connection on a cluster without TLS). Pass one with --token or MEGAFLOW_TOKEN.\n" +
			"See docs/security.md.",
		Args: cobra.NoArgs,
	}
	var (
		tenant, role string
		ttl          time.Duration
	)
	create := &cobra.Command{
		Use:   "create --role read|submit|admin|worker [--tenant T] [--ttl D]",
		Short: "Create a token and print its accessor and secret (the secret is shown this once)",
		Long: "Create a token. read and submit tokens belong to one tenant (--tenant); admin and worker tokens to none.\n" +
			"--ttl makes it expire (1m to 43800h; 0, the default: never). Examples:\n" +
			"  megaflow token create --tenant team-a --role submit --ttl 720h\n" +
			"  megaflow token create --role worker",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := acl.ParseRole(role)
			if err != nil {
				return err
			}
			if err := acl.CheckNew(tenant, r, ttl, 0); err != nil {
				return errs.New(errs.InvalidArgument, "%v", err)
			}
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			tok, secret, err := c.CreateToken(ctx, tenant, r, ttl)
			if err != nil {
				return err
			}
			return g.printToken(tok, secret)
		},
	}
	create.Flags().StringVar(&tenant, "tenant", "", "the tenant of a read or submit token")
	create.Flags().StringVar(&role, "role", "", "read, submit, admin or worker (required)")
	create.Flags().DurationVar(&ttl, "ttl", 0, "lifetime, 1m to 43800h (0: never expires)")
	_ = create.MarkFlagRequired("role")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the tokens: accessor, tenant, role, created, expires (never a secret)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			toks, err := c.ListTokens(ctx, g.read())
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"tokens": protoList(toks)})
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ACCESSOR\tTENANT\tROLE\tCREATED\tEXPIRES")
			for _, t := range toks {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.GetAccessor(), orDash(t.GetTenant()), acl.RoleName(t.GetRole()),
					fmtNanos(t.GetCreateUnixNanos()), fmtNanos(t.GetExpireUnixNanos()))
			}
			return tw.Flush()
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke ACCESSOR",
		Short: "Revoke a token: every head refuses it once it applied the revocation",
		Long: "Revoke the token of ACCESSOR (megaflow token list shows them). Each head refuses it from the moment it\n" +
			"applies the revocation; a follower cut off from the leader refuses every token after --acl-max-staleness\n" +
			"(docs/security.md).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			index, err := c.RevokeToken(ctx, args[0])
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"accessor": args[0], "index": index})
			}
			fmt.Fprintf(g.stdout, "revoked token %s (index %d)\n", args[0], index)
			return nil
		},
	}
	root.AddCommand(create, list, revoke)
	return root
}

// printToken prints a new token and its secret.
func (g *globals) printToken(tok *client.Token, secret string) error {
	if g.output == "json" {
		return g.printJSON(map[string]any{"accessor": tok.GetAccessor(), "tenant": tok.GetTenant(), "role": acl.RoleName(tok.GetRole()),
			"expire_unix_nanos": tok.GetExpireUnixNanos(), "secret": secret})
	}
	fmt.Fprintf(g.stdout, "accessor: %s\ntenant:   %s\nrole:     %s\nexpires:  %s\nsecret:   %s\n", tok.GetAccessor(), orDash(tok.GetTenant()),
		acl.RoleName(tok.GetRole()), fmtNanos(tok.GetExpireUnixNanos()), secret)
	fmt.Fprintln(g.stderr, "The secret is shown this once and stored nowhere: keep it (export MEGAFLOW_TOKEN=<secret>).")
	return nil
}

// fmtNanos is a Unix time in nanoseconds in RFC 3339, UTC; 0 is "never".
func fmtNanos(n int64) string {
	if n == 0 {
		return "never"
	}
	return time.Unix(0, n).UTC().Format(time.RFC3339)
}
