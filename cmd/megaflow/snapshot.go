package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// sandboxSnapshotCmd is "megaflow sandbox snapshot ID [--name N]" and
// "megaflow sandbox snapshot rm SNAPSHOT..." (docs/sandboxes.md).
func sandboxSnapshotCmd(g *globals) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "snapshot SANDBOX",
		Short: "Snapshot a READY sandbox into an image that new sandboxes start from",
		Long: `snapshot commits a READY sandbox's container into an image on its worker (the
container is paused while its files are copied) and prints the snapshot's id
(-o json: the whole snapshot). Create sandboxes from it with
"megaflow sandbox create --from-snapshot SNAPSHOT": each starts with the
files the sandbox has now, on the same worker. A tenant holds at most
--max-snapshots of the heads (64 by default); "snapshot rm" removes one.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, done, err := g.dialSynced(cmd)
			if err != nil {
				return err
			}
			defer done()
			s, err := c.GetSandbox(ctx, args[0])
			if err != nil {
				return err
			}
			snap, err := s.Snapshot(ctx, name)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(snap)
			}
			fmt.Fprintln(g.stdout, snap.GetId())
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a name for people (at most 128 printable bytes)")
	cmd.AddCommand(&cobra.Command{
		Use:   "rm SNAPSHOT...",
		Short: "Delete snapshots: their records, then their images on their workers",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, done, err := g.dialSynced(cmd)
			if err != nil {
				return err
			}
			defer done()
			var out []any
			for _, id := range args {
				if err := c.DeleteSnapshot(ctx, id); err != nil {
					return err
				}
				if g.output == "json" {
					out = append(out, map[string]any{"id": id, "deleted": true})
					continue
				}
				fmt.Fprintf(g.stdout, "%s deleted\n", id)
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"snapshots": out})
			}
			return nil
		},
	})
	return cmd
}

// sandboxSnapshotsCmd is "megaflow sandbox snapshots": the snapshots, each
// available or not (its worker is down: "unavailable: worker w1 is down
// (...)").
func sandboxSnapshotsCmd(g *globals) *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "snapshots",
		Short: "List sandbox snapshots",
		Long: `snapshots lists the sandbox snapshots, oldest first. STATUS is "available",
or "unavailable: worker w1 is down (...)" while the worker holding the
snapshot's image is down or left: the snapshot is kept, and sandboxes can be
created from it again once that worker rejoins with the same id.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, done, err := g.dialSynced(cmd)
			if err != nil {
				return err
			}
			defer done()
			list, err := c.ListSnapshots(ctx, tenant)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"snapshots": protoList(list)})
			}
			if len(list) == 0 {
				fmt.Fprintln(g.stdout, "no snapshots")
				return nil
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSANDBOX\tWORKER\tTENANT\tSIZE\tAGE\tSTATUS")
			now := time.Now()
			for _, s := range list {
				age := now.Sub(time.Unix(0, s.GetCreateUnixNanos())).Round(time.Second)
				status := "available"
				if why := s.GetUnavailable(); why != "" {
					status = "unavailable: " + why
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.1fMB\t%s\t%s\n", s.GetId(), orDash(s.GetName()), s.GetSandboxId(), s.GetWorkerId(),
					s.GetTenant(), float64(s.GetSizeBytes())/1e6, age, status)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's (default: every tenant's)")
	return cmd
}
