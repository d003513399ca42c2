package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func servicesCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "services [NAME]",
		Short: "List services (tasks of kind service) with their ready endpoints",
		Long: `services lists the services that have a task of kind service that has not
ended, with their ready endpoints (http://host:port) and the tasks serving
them. Tasks that name a service in uses_services receive the same endpoints
in MEGAFLOW_SERVICE_<NAME>. With NAME, only that service.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			services, err := c.ListServices(ctx, name, g.read())
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"services": protoList(services)})
			}
			if len(services) == 0 {
				if name != "" {
					fmt.Fprintf(g.stdout, "no task serves %q\n", name)
				} else {
					fmt.Fprintln(g.stdout, "no services")
				}
				return nil
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SERVICE\tREADY\tENDPOINTS\tTASKS")
			for _, s := range services {
				urls := make([]string, len(s.GetEndpoints()))
				for i, e := range s.GetEndpoints() {
					urls[i] = e.GetUrl()
				}
				fmt.Fprintf(tw, "%s\t%d/%d\t%s\t%s\n", s.GetName(), len(urls), len(s.GetTaskIds()),
					orDash(strings.Join(urls, ",")), strings.Join(s.GetTaskIds(), ","))
			}
			return tw.Flush()
		},
	}
}
