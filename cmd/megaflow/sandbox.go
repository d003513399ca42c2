package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
)

// sandboxCmd is "megaflow sandbox": create, exec, cp, ls, rm, snapshot,
// snapshots, set-timeout, pause, resume (docs/sandboxes.md).
func sandboxCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Create sandboxes, run commands in them, list and close them",
		Long: `A sandbox is a long-lived container of an image that commands run in one
after the other or at once: create one, exec commands in it (their output
and exit code come back as if run here), and rm it. Its files stay between
execs; pause freezes it and resume thaws it; it ends when closed, after its
lifetime, after its idle timeout, or when its worker is lost (it is never
re-created elsewhere).`,
	}
	cmd.AddCommand(sandboxCreateCmd(g), sandboxExecCmd(g), sandboxCpCmd(g), sandboxLsCmd(g), sandboxRmCmd(g))
	cmd.AddCommand(sandboxSnapshotCmd(g), sandboxSnapshotsCmd(g), sandboxSetTimeoutCmd(g), sandboxPauseCmd(g), sandboxResumeCmd(g))
	return cmd
}

// parseKVs turns repeated K=V flags into a map; flag names the flag.
func parseKVs(flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, errs.New(errs.InvalidArgument, "--%s %q: want KEY=VALUE", flag, kv)
		}
		out[k] = v
	}
	return out, nil
}

func sandboxCreateCmd(g *globals) *cobra.Command {
	var sp client.SandboxSpec
	var env, labels []string
	cmd := &cobra.Command{
		Use:   "create --image IMAGE",
		Short: "Create a sandbox and wait until it is READY",
		Long: `create creates a sandbox running IMAGE and waits (--wait) until it is READY,
then prints its id (-o json: the whole sandbox). It exits 1 when the
sandbox ended instead of becoming READY (the message says why).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sp.Image == "" && sp.FromSnapshot == "" {
				return errs.New(errs.InvalidArgument, "--image is required: name the image the sandbox runs, e.g. --image python:3.12-slim (or --from-snapshot SNAPSHOT)")
			}
			var err error
			if sp.Env, err = parseKVs("env", env); err != nil {
				return err
			}
			if sp.Labels, err = parseKVs("label", labels); err != nil {
				return err
			}
			ctx, c, done, err := g.dialSynced(cmd)
			if err != nil {
				return err
			}
			defer done()
			s, err := c.CreateSandbox(ctx, sp)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(s.Info())
			}
			if st := s.Info().GetState(); st != client.SandboxReady {
				fmt.Fprintf(g.stderr, "sandbox %s is %s (not READY within --wait %v)\n", s.ID(), stateWord(st), sp.WaitReady)
			}
			fmt.Fprintln(g.stdout, s.ID())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&sp.Image, "image", "", "container image (required unless --from-snapshot)")
	f.StringVar(&sp.FromSnapshot, "from-snapshot", "", "create it from this snapshot (snap-...; megaflow sandbox snapshots) instead of an image")
	f.StringVar(&sp.ID, "id", "", "sandbox id (sbx-[a-z0-9]+; default: a new one)")
	f.StringVar(&sp.Tenant, "tenant", "", "tenant owning the sandbox (default \"default\")")
	f.Int64Var(&sp.CPUMillis, "cpu-millis", 0, "CPU reserved and limited, in millicores (0: the task default)")
	f.Int64Var(&sp.MemoryBytes, "memory-bytes", 0, "memory reserved and limited, in bytes (0: the task default)")
	f.StringArrayVar(&env, "env", nil, "KEY=VALUE in every exec's environment (repeatable)")
	f.StringArrayVar(&labels, "label", nil, "KEY=VALUE label (repeatable)")
	f.StringVar(&sp.WorkingDir, "workdir", "", "working directory of execs without --cwd")
	f.StringVar(&sp.Network, "network", "", "container network mode (default none)")
	f.DurationVar(&sp.Lifetime, "lifetime", time.Hour, "the sandbox ends this long after creation (whole seconds, at most 168h)")
	f.DurationVar(&sp.IdleTimeout, "idle-timeout", 0, "the sandbox ends after this long without an exec (0: never)")
	f.DurationVar(&sp.WaitReady, "wait", 2*time.Minute, "wait this long for READY (0: do not wait)")
	return cmd
}

func sandboxExecCmd(g *globals) *cobra.Command {
	var o client.ExecOptions
	var env []string
	var stdin bool
	cmd := &cobra.Command{
		Use:   "exec ID -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox; its exit code is megaflow's",
		Long: `exec runs COMMAND in sandbox ID and writes its stdout and stderr here as
they come; megaflow then exits with the command's exit code (124 when it was
killed at --exec-timeout). With -i, megaflow's stdin (at most 16 MiB) is the
command's. -o json prints {exit_code, stdout, stderr, timed_out, truncated}
instead. An exec is never retried: when the head or the worker does not
answer, megaflow exits 1 and the command may or may not have run.
The global --timeout does not apply unless given.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.Env, err = parseKVs("env", env); err != nil {
				return err
			}
			if stdin {
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), spec.SandboxMaxStdin+1))
				if err != nil {
					return err
				}
				o.Stdin = b
			}
			if f := cmd.Flag("timeout"); f == nil || !f.Changed {
				g.timeout = 0
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
			var res *client.ExecResult
			if g.output == "json" {
				res, err = s.Exec(ctx, args[1:], o)
			} else {
				res, err = s.ExecStream(ctx, args[1:], o, g.stdout, g.stderr)
			}
			if err != nil {
				return err
			}
			if g.output == "json" {
				if err := g.printJSON(map[string]any{"exit_code": res.ExitCode, "stdout": string(res.Stdout), "stderr": string(res.Stderr),
					"timed_out": res.TimedOut, "truncated": res.Truncated, "reason": res.Reason}); err != nil {
					return err
				}
			}
			if res.Truncated && g.output != "json" {
				fmt.Fprintln(g.stderr, "megaflow: output truncated: each stream keeps its first 16 MiB")
			}
			switch {
			case res.TimedOut:
				return &codeError{code: 124, msg: fmt.Sprintf("the command timed out after %v and was killed", o.Timeout)}
			case res.ExitCode != 0:
				code := res.ExitCode
				if code < 0 || code > 255 {
					code = exitError
				}
				return &codeError{code: code} // no message: the command's own output says it
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&env, "env", nil, "KEY=VALUE added to the command's environment (repeatable)")
	f.StringVar(&o.Cwd, "cwd", "", "working directory (default: the sandbox's)")
	f.BoolVarP(&stdin, "stdin", "i", false, "pass megaflow's stdin to the command")
	f.DurationVar(&o.Timeout, "exec-timeout", 10*time.Minute, "kill the command (and its process group) after this long")
	return cmd
}

func sandboxLsCmd(g *globals) *cobra.Command {
	var f client.SandboxFilter
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List sandboxes, oldest first (live ones unless --all)",
		Long: `ls lists one page of sandboxes, oldest first: at most --limit (1 to 1000),
then a line "(more: --page-token TOKEN)" when there are more; pass it back
to continue. -o json prints {"sandboxes": [...], "next_page_token": ""}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, done, err := g.dialSynced(cmd)
			if err != nil {
				return err
			}
			defer done()
			list, next, err := c.ListSandboxesPage(ctx, f)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"sandboxes": protoList(list), "next_page_token": next})
			}
			if len(list) == 0 {
				fmt.Fprintln(g.stdout, "no sandboxes")
				return nil
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tWORKER\tIMAGE\tAGE\tREASON")
			now := time.Now()
			for _, s := range list {
				age := now.Sub(time.Unix(0, s.GetCreateUnixNanos())).Round(time.Second)
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.GetId(), stateWord(s.GetState()), orDash(s.GetWorkerId()),
					s.GetImage(), age, orDash(s.GetReason()))
			}
			if next != "" {
				fmt.Fprintf(tw, "(more: --page-token %s)\n", next)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&f.Tenant, "tenant", "", "only this tenant's (default: every tenant's)")
	cmd.Flags().BoolVar(&f.All, "all", false, "include ended sandboxes")
	cmd.Flags().Int32Var(&f.PageSize, "limit", 100, "at most this many (1 to 1000)")
	cmd.Flags().StringVar(&f.PageToken, "page-token", "", "continue a previous listing")
	return cmd
}

func sandboxRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID...",
		Short: "Close sandboxes: their containers are stopped and removed",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, done, err := g.dialSynced(cmd)
			if err != nil {
				return err
			}
			defer done()
			var out []any
			for _, id := range args {
				s, err := c.GetSandbox(ctx, id)
				if err != nil {
					return err
				}
				if err := s.Close(ctx); err != nil {
					return err
				}
				if g.output == "json" {
					out = append(out, s.Info())
					continue
				}
				fmt.Fprintf(g.stdout, "%s %s\n", id, stateWord(s.Info().GetState()))
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"sandboxes": out})
			}
			return nil
		},
	}
}

// stateWord is a sandbox state's short name: READY, CLOSED...
func stateWord(s client.SandboxState) string {
	return strings.TrimPrefix(s.String(), "SANDBOX_STATE_")
}
