package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
)

func submitCmd(g *globals) *cobra.Command {
	var wait bool
	var id string
	cmd := &cobra.Command{
		Use:   "submit FILE",
		Short: "Submit a graph file (YAML; - reads standard input)",
		Long: `submit reads a rollout graph from a YAML file whose keys are the fields of the
wire API's GraphSpec (see examples/), validates it and commits it. With --wait
it blocks until the graph finishes; the exit code says whether it succeeded
(0 succeeded, 1 failed or cancelled).`,
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
				return err
			}
			spec, err := client.ParseGraphYAML(args[0], data)
			if err != nil {
				return err
			}
			if id != "" {
				spec.Id = id
			}
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
				fmt.Fprintf(g.stdout, "%s graph %s (%d tasks) at index %d\n", verb, res.GraphId, len(spec.Tasks), res.Index)
				return nil
			}
			gr, err := c.Wait(ctx, res.GraphId)
			if err != nil {
				return err
			}
			if g.output == "json" {
				if err := g.printJSON(gr); err != nil {
					return err
				}
			} else {
				cn := gr.Counts
				fmt.Fprintf(g.stdout, "graph %s %s: %d tasks, %d succeeded, %d failed, %d timed out, %d cancelled\n",
					gr.Id, graphState(gr.State), gr.TaskCount, cn.GetSucceeded(), cn.GetFailed(), cn.GetTimedOut(), cn.GetCancelled())
			}
			if gr.State != client.GraphSucceeded {
				return &codeError{code: exitError, msg: fmt.Sprintf("graph %s %s", gr.Id, graphState(gr.State))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the graph finishes; exit 1 unless it succeeded")
	cmd.Flags().StringVar(&id, "id", "", "graph id (overrides the file's; makes resubmission idempotent)")
	return cmd
}
