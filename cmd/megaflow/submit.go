package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
)

func submitCmd(g *globals) *cobra.Command {
	var wait, watch bool
	var id string
	cmd := &cobra.Command{
		Use:   "submit FILE",
		Short: "Submit a graph file (YAML; - reads standard input)",
		Long: `submit reads a rollout graph from a YAML file whose keys are the fields of the
wire API's GraphSpec (see examples/), validates it and commits it. With --wait
it blocks until the graph finishes; with --watch it also shows a live
progress bar by task state (plain lines every 5 s when standard output is
not a terminal). Both end with a summary: counts by state, success rate, mean
reward, p50/p99 task time, wall time; with -o json one JSON object instead.

Exit codes: 0 the graph succeeded (or, without --wait/--watch, was
committed); 1 an error (no head answered, ...); 2 bad usage or a bad graph
file (nothing was submitted); 3 the graph failed; 4 it was cancelled; 130
interrupted while waiting (the graph keeps running).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			if args[0] == "-" {
				data, err = io.ReadAll(os.Stdin)
			} else {
				data, err = os.ReadFile(args[0])
			}
			if err != nil {
				return errs.New(errs.InvalidArgument, "%v; give a graph file (see examples/) or - for standard input", err)
			}
			spec, err := client.ParseGraphYAML(args[0], data)
			if err != nil {
				return err
			}
			if id != "" {
				spec.Id = id
			}
			wait = wait || watch
			if wait && !cmd.Flags().Changed("timeout") {
				g.timeout = 0 // a graph may run for hours: wait until it ends or Ctrl-C
			}
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := c.Submit(ctx, spec)
			if err != nil {
				return err
			}
			if !wait {
				if g.output == "json" {
					return g.printJSON(res)
				}
				verb := "submitted"
				if res.Existed {
					verb = "already submitted"
				}
				fmt.Fprintf(g.stdout, "%s graph %s (%s) at index %d\n", verb, res.GraphId, plural(len(spec.Tasks), "task"), res.Index)
				return nil
			}
			if g.output != "json" {
				verb := "submitted"
				if res.Existed {
					verb = "already submitted"
				}
				fmt.Fprintf(g.stdout, "%s graph %s (%s) at index %d\n", verb, res.GraphId, plural(len(spec.Tasks), "task"), res.Index)
			}
			return g.follow(ctx, c, res.GraphId, !watch)
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the graph finishes and print its summary; exit 3 if it failed, 4 if cancelled")
	cmd.Flags().BoolVar(&watch, "watch", false, "like --wait, with a live progress bar by task state")
	cmd.Flags().StringVar(&id, "id", "", "graph id (overrides the file's; makes resubmission idempotent)")
	return cmd
}
