package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/internal/errs"
)

// sandboxSetTimeoutCmd is "megaflow sandbox set-timeout ID DURATION"
// (docs/sandboxes.md).
func sandboxSetTimeoutCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "set-timeout ID DURATION",
		Short: "Make a live sandbox end DURATION from now (longer or shorter)",
		Long: `set-timeout sets when a live sandbox ends (EXPIRED): DURATION from now, in
whole seconds (e.g. 30m, 2h), sooner or later than before. A sandbox lives
at most 7 days from its creation. It prints the sandbox's id and its new
lifetime from creation (-o json: the whole sandbox).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := time.ParseDuration(args[1])
			if err != nil {
				return errs.New(errs.InvalidArgument, "DURATION %q: %v; give e.g. 30m or 2h", args[1], err)
			}
			ctx, c, done, err := g.dialSynced(cmd)
			if err != nil {
				return err
			}
			defer done()
			s, err := c.GetSandbox(ctx, args[0])
			if err != nil {
				return err
			}
			if err := s.SetTimeout(ctx, d); err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(s.Info())
			}
			info := s.Info()
			end := time.Unix(0, info.GetCreateUnixNanos()).Add(time.Duration(info.GetLifetimeSeconds()) * time.Second)
			fmt.Fprintf(g.stdout, "%s ends at %s (lifetime %v)\n", s.ID(), end.UTC().Format(time.RFC3339),
				time.Duration(info.GetLifetimeSeconds())*time.Second)
			return nil
		},
	}
}
