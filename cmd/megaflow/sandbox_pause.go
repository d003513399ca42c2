package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
)

// sandboxPauseCmd is "megaflow sandbox pause ID" (docs/sandboxes.md,
// "Pause and resume").
func sandboxPauseCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "pause ID",
		Short: "Freeze a READY sandbox's processes until it is resumed",
		Long: `pause freezes sandbox ID's processes (docker pause: its CPU is released, its
memory, files and processes kept). It stays PAUSED until megaflow sandbox
resume: its execs and file copies are refused meanwhile, and its idle
timeout does not count (its lifetime does). Pausing a PAUSED sandbox
changes nothing. It prints "ID PAUSED" (-o json: the whole sandbox).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setPaused(g, cmd, args[0], (*client.Sandbox).Pause)
		},
	}
}

// sandboxResumeCmd is "megaflow sandbox resume ID".
func sandboxResumeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "resume ID",
		Short: "Thaw a PAUSED sandbox: READY again",
		Long: `resume thaws paused sandbox ID: it is READY again, and its idle timeout counts
afresh from now. Resuming a READY sandbox changes nothing. It prints
"ID READY" (-o json: the whole sandbox).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setPaused(g, cmd, args[0], (*client.Sandbox).Resume)
		},
	}
}

// setPaused runs pause or resume (call) on sandbox id and prints it.
func setPaused(g *globals, cmd *cobra.Command, id string, call func(*client.Sandbox, context.Context) error) error {
	ctx, c, done, err := g.dialSynced(cmd)
	if err != nil {
		return err
	}
	defer done()
	s, err := c.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	if err := call(s, ctx); err != nil {
		return err
	}
	if g.output == "json" {
		return g.printJSON(s.Info())
	}
	fmt.Fprintf(g.stdout, "%s %s\n", id, stateWord(s.Info().GetState()))
	return nil
}
