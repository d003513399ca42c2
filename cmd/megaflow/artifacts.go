package main

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
)

// logsCmd is `megaflow logs TASK [-f] [--attempt N]`.
func logsCmd(g *globals) *cobra.Command {
	var follow bool
	var attempt uint32
	cmd := &cobra.Command{
		Use:   "logs TASK",
		Short: "Print a task's output (stdout and stderr) from the artifact store",
		Long: `Print the combined stdout and stderr of a task's attempt (default: the
current one), as stored in the artifact store while it ran. With -f, keep
printing as new output lands until the attempt ended and its log is complete.
TASK is <graph id>/<task name>.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if follow && !cmd.Flags().Changed("timeout") {
				g.timeout = 0 // a task may run for hours: follow until it ends or Ctrl-C
			}
			ctx, c, done, err := g.dialSynced(cmd)
			if err != nil {
				return err
			}
			defer done()
			for ch, err := range c.Logs(ctx, args[0], client.LogsOptions{Attempt: attempt, Follow: follow}) {
				if err != nil {
					return err
				}
				if _, err := g.stdout.Write(ch.Data); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing until the attempt ended and its log is complete")
	cmd.Flags().Uint32Var(&attempt, "attempt", 0, "attempt number (1-based); 0: the current attempt")
	return cmd
}

// artifactsCmd is `megaflow artifacts ls|get`.
func artifactsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "artifacts",
		Short: "List and download a task's output files from the artifact store",
	}
	cmd.AddCommand(artifactsLsCmd(g), artifactsGetCmd(g))
	return cmd
}

func artifactsLsCmd(g *globals) *cobra.Command {
	var attempt uint32
	cmd := &cobra.Command{
		Use:   "ls TASK",
		Short: "List the output files of a task's attempt with sizes and SHA-256",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, done, err := g.dialSynced(cmd)
			if err != nil {
				return err
			}
			defer done()
			list, err := c.Artifacts(ctx, args[0], attempt)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(list)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PATH\tSIZE\tTYPE\tSHA256")
			for _, f := range list.Files {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Path, bytesIEC(f.Size), f.ContentType, f.Sha256)
			}
			fmt.Fprintf(tw, "(log)\t%s\t%d chunks\t\n", bytesIEC(list.LogBytes), list.LogChunks)
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, n := range list.Notes {
				fmt.Fprintln(g.stderr, "note:", n)
			}
			return nil
		},
	}
	cmd.Flags().Uint32Var(&attempt, "attempt", 0, "attempt number (1-based); 0: the current attempt")
	return cmd
}

func artifactsGetCmd(g *globals) *cobra.Command {
	var attempt uint32
	var dir string
	cmd := &cobra.Command{
		Use:   "get TASK [PATH] -o DIR",
		Short: "Download a task's output files (all, or PATH) into DIR, checking SHA-256",
		Long: `Download the output files of a task's attempt (default: the current one)
into DIR, each under its path relative to the task's output directory. With
PATH, only that file (result.json is a result too large for the task table).
Every file is checked against the SHA-256 its manifest lists; a file that does
not match is not kept. Here -o names the directory, not the output format.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return errs.New(errs.InvalidArgument, "-o DIR is required: the directory to write the files into")
			}
			ctx, c, done, err := g.dialSynced(cmd)
			if err != nil {
				return err
			}
			defer done()
			var paths []string
			if len(args) == 2 {
				paths = []string{args[1]}
			} else {
				list, err := c.Artifacts(ctx, args[0], attempt)
				if err != nil {
					return err
				}
				for _, f := range list.Files {
					paths = append(paths, f.Path)
				}
				if len(paths) == 0 {
					fmt.Fprintf(g.stderr, "%s has no output files to download (its task declares no output_paths, or they matched nothing); its log: megaflow logs %s\n",
						args[0], args[0])
					return nil
				}
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			root, err := os.OpenRoot(dir)
			if err != nil {
				return err
			}
			defer root.Close()
			for _, p := range paths {
				f, err := getOne(ctx, c, root, args[0], attempt, p)
				if err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "%s\t%s\tsha256 %s ok\n", filepath.Join(dir, filepath.FromSlash(f.Path)), bytesIEC(f.Size), f.Sha256)
			}
			return nil
		},
	}
	cmd.Flags().Uint32Var(&attempt, "attempt", 0, "attempt number (1-based); 0: the current attempt")
	// Named "output" so that it shadows the global --output (format) here.
	cmd.Flags().StringVarP(&dir, "output", "o", "", "directory to write the files into (created if missing)")
	return cmd
}

// getOne downloads one file into root through a temporary file that is
// renamed into place only once its checksum matched. root keeps every
// path (from the heads) inside DIR.
func getOne(ctx context.Context, c *client.Client, root *os.Root, task string, attempt uint32, p string) (*client.ArtifactFile, error) {
	clean := path.Clean(p)
	if clean != p || path.IsAbs(p) || clean == ".." || strings.HasPrefix(clean, "../") {
		return nil, errs.New(errs.InvalidArgument, "artifact path %q must be relative and clean, as artifacts ls prints it", p)
	}
	local := filepath.FromSlash(p)
	if d := filepath.Dir(local); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	tmp := local + ".megaflow-partial"
	out, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	f, err := c.GetArtifact(ctx, task, attempt, p, out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		root.Remove(tmp)
		return nil, err
	}
	if err := root.Rename(tmp, local); err != nil {
		return nil, err
	}
	return f, nil
}

// deleteCmd is `megaflow delete GRAPH`.
func deleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete GRAPH",
		Short: "Delete a finished graph: its artifacts, then its tasks and the graph",
		Long: `delete removes a finished graph for good: its artifacts from the store,
then its tasks and the graph from the table. An archived graph (past the
head's --graph-retention) loses its artifacts and its summary. Its id is
free again afterwards.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, done, err := g.dialSynced(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := c.DeleteGraph(ctx, args[0])
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(res)
			}
			fmt.Fprintf(g.stdout, "deleted graph %s: %s, %s, at index %d\n", args[0], plural(int(res.Tasks), "task"),
				plural(int(res.Artifacts), "stored object"), res.Index)
			return nil
		},
	}
}
