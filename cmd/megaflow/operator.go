package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
)

// operatorCmd is `megaflow operator snapshot save|restore FILE`: backups of
// the task table (docs/operations.md).
func operatorCmd(g *globals) *cobra.Command {
	op := &cobra.Command{Use: "operator", Short: "Operate the cluster: backups of the task table"}
	snap := &cobra.Command{Use: "snapshot", Short: "Save the task table to a file, or restore it from one"}
	save := &cobra.Command{
		Use:   "save FILE",
		Short: "Save a snapshot of the whole task table to FILE",
		Long: `Save a snapshot of the whole task table (graphs, tasks, results, workers,
quotas, the cluster id and rules version) as the leader holds it once
everything committed before the call is applied. FILE appears only once the
whole snapshot is written (a temporary file is renamed). Large tables may
need a longer --timeout (0: none).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			path := args[0]
			tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
			if err != nil {
				return errs.New(errs.InvalidArgument, "snapshot save: %v", err)
			}
			defer os.Remove(tmp.Name())
			defer tmp.Close()
			info, err := c.SnapshotSave(ctx, tmp)
			if err != nil {
				return err
			}
			if err := tmp.Sync(); err != nil {
				return fmt.Errorf("snapshot save: %w", err)
			}
			if err := tmp.Close(); err != nil {
				return fmt.Errorf("snapshot save: %w", err)
			}
			if err := os.Rename(tmp.Name(), path); err != nil {
				return fmt.Errorf("snapshot save: %w", err)
			}
			if g.output == "json" {
				return g.printJSON(info)
			}
			fmt.Fprintf(g.stdout, "saved %s: %s\n", path, describeSnapshot(info))
			return nil
		},
	}
	var force, yes bool
	restore := &cobra.Command{
		Use:   "restore FILE",
		Short: "Replace the whole task table with a snapshot FILE (disaster recovery)",
		Long: `Replace the cluster's whole task table with a snapshot that
'megaflow operator snapshot save' wrote: every head takes it, and the cluster
takes the snapshot's cluster id. The leader checks the whole file before
anything changes. Meant for recovery into a fresh cluster: a table holding
graphs is replaced only with --force. Needs --yes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !yes {
				return errs.New(errs.InvalidArgument, "snapshot restore replaces the cluster's whole table: pass --yes to go ahead")
			}
			f, err := os.Open(args[0])
			if err != nil {
				return errs.New(errs.InvalidArgument, "snapshot restore: %v", err)
			}
			defer f.Close()
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			info, err := c.SnapshotRestore(ctx, f, force)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(info)
			}
			fmt.Fprintf(g.stdout, "restored %s: %s\n", args[0], describeSnapshot(info))
			return nil
		},
	}
	restore.Flags().BoolVar(&force, "force", false, "replace a table that holds graphs")
	restore.Flags().BoolVar(&yes, "yes", false, "confirm: the whole table is replaced")
	snap.AddCommand(save, restore)
	op.AddCommand(snap)
	return op
}

// describeSnapshot is one line about a snapshot for people.
func describeSnapshot(i *client.SnapshotInfo) string {
	size := fmt.Sprintf("%d bytes", i.GetSizeBytes())
	if i.GetSizeBytes() >= 1024 {
		size = bytesIEC(int64(i.GetSizeBytes())) + "B"
	}
	return fmt.Sprintf("index %d, %d graphs, %d tasks, %d workers, rules %d, cluster %s, %s, sha256 %s",
		i.GetIndex(), i.GetGraphs(), i.GetTasks(), i.GetWorkers(), i.GetRules(), orDash(i.GetClusterId()),
		size, i.GetSha256())
}
