package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/version"
)

// Exit codes: 0 success, 1 an error, 2 bad usage or input (nothing was
// changed); submit --wait/--watch and demo add 3 (the graph failed), 4
// (cancelled) and 130 (interrupted while waiting), see watch.go.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// globals are the flags every subcommand shares.
type globals struct {
	heads   string
	output  string
	timeout time.Duration
	stale   bool
	tls     tlsconfig.Files
	// token is the API token secret (--token, MEGAFLOW_TOKEN); empty: none.
	token  string
	stdout io.Writer
	stderr io.Writer
	// signalled reports whether the command was interrupted (Ctrl-C).
	signalled func() bool
}

// interrupted reports whether a signal ended the command's context.
func (g *globals) interrupted() bool { return g.signalled != nil && g.signalled() }

// run executes the CLI with args and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdout, stderr)
}

// runContext is run under ctx: the command stops when ctx ends (main's
// ends on SIGINT or SIGTERM).
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr, signalled: func() bool { return ctx.Err() != nil }}
	root := &cobra.Command{
		Use:           "megaflow",
		Short:         "MegaFlow command-line client",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Get().String(),
	}
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	defHeads := os.Getenv(client.EnvHeads)
	if defHeads == "" {
		defHeads = "127.0.0.1:7070"
	}
	root.PersistentFlags().StringVar(&g.heads, "heads", defHeads, "comma-separated gRPC addresses of heads (env "+client.EnvHeads+")")
	root.PersistentFlags().StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	root.PersistentFlags().DurationVar(&g.timeout, "timeout", 30*time.Second, "give up after this long (0: never; submit --wait waits without limit unless this is given)")
	root.PersistentFlags().BoolVar(&g.stale, "stale", false, "read from whichever head answers, even without a leader (default: read through the leader)")
	root.PersistentFlags().StringVar(&g.tls.CA, "tls-ca", os.Getenv("MEGAFLOW_TLS_CA"), "CA certificate (PEM) of a cluster with TLS on, with --tls-cert and --tls-key (env MEGAFLOW_TLS_CA)")
	root.PersistentFlags().StringVar(&g.tls.Cert, "tls-cert", os.Getenv("MEGAFLOW_TLS_CERT"), "client certificate (PEM, from megaflow tls cert create --client; env MEGAFLOW_TLS_CERT)")
	root.PersistentFlags().StringVar(&g.tls.Key, "tls-key", os.Getenv("MEGAFLOW_TLS_KEY"), "the private key of --tls-cert (PEM; env MEGAFLOW_TLS_KEY)")
	root.PersistentFlags().StringVar(&g.token, "token", os.Getenv(client.EnvToken), "API token secret of a cluster with ACLs on (env "+client.EnvToken+"; docs/security.md)")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(args)
	root.AddCommand(upCmd(g), demoCmd(g), submitCmd(g), clusterCmd(g), workersCmd(g), graphsCmd(g), tasksCmd(g), statusCmd(g), cancelCmd(g), quotaCmd(g), limitsCmd(g), policyCmd(g), aclCmd(g), tokenCmd(g))
	root.AddCommand(logsCmd(g), artifactsCmd(g), deleteCmd(g), servicesCmd(g), poolCmd(g), sandboxCmd(g), operatorCmd(g), tlsCmd(g))
	// Flag errors are bad usage; cobra's argument-count and unknown-command
	// errors carry no type, so their text is what identifies them.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return errs.New(errs.InvalidArgument, "%v", err)
	})
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ce *codeError
	if !errors.As(err, &ce) || ce.msg != "" {
		fmt.Fprintln(stderr, "megaflow:", err)
	}
	switch {
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, errs.ErrInvalidArgument), strings.HasPrefix(err.Error(), "unknown command"),
		strings.Contains(err.Error(), "arg(s)"):
		return exitUsage
	}
	return exitError
}

// codeError carries a specific exit code out of a command.
type codeError struct {
	code int
	msg  string
}

func (e *codeError) Error() string { return e.msg }

// dial connects to the heads named by --heads with the --timeout context.
func (g *globals) dial(cmd *cobra.Command) (context.Context, *client.Client, func(), error) {
	if g.output != "table" && g.output != "json" {
		return nil, nil, nil, errs.New(errs.InvalidArgument, "--output %q: want table or json", g.output)
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	if g.timeout > 0 {
		ctx, cancel = context.WithTimeout(cmd.Context(), g.timeout)
	}
	var heads []string
	for _, h := range strings.Split(g.heads, ",") {
		if h = strings.TrimSpace(h); h != "" {
			heads = append(heads, h)
		}
	}
	var opts []client.Option
	if g.tls.Enabled() {
		cfg, err := client.TLSConfig(g.tls.CA, g.tls.Cert, g.tls.Key)
		if err == nil {
			err = g.tls.Validate()
		}
		if err != nil {
			cancel()
			return nil, nil, nil, errs.New(errs.InvalidArgument, "%v", err)
		}
		opts = append(opts, client.WithTLS(cfg))
	}
	if g.token != "" {
		opts = append(opts, client.WithToken(g.token))
	}
	c, err := client.Dial(ctx, heads, opts...)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, c, func() { c.Close(); cancel() }, nil
}

// dialSynced is dial for the commands whose reads take no --stale option
// of their own (sandboxes, snapshots, logs, artifacts): unless --stale, it
// first raises the client's session index to the leader's
// (client.SyncSession), so that what a command reads through any head is
// never older than a write an earlier command made.
func (g *globals) dialSynced(cmd *cobra.Command) (context.Context, *client.Client, func(), error) {
	ctx, c, done, err := g.dial(cmd)
	if err != nil || g.stale {
		return ctx, c, done, err
	}
	if err := c.SyncSession(ctx); err != nil {
		done()
		return nil, nil, nil, err
	}
	return ctx, c, done, nil
}

// printJSON writes v as one JSON document: protobuf messages with the
// field names of the .proto and 64-bit integers as JSON numbers
// (protoValue), anything else through encoding/json.
func (g *globals) printJSON(v any) error {
	if m, ok := v.(proto.Message); ok {
		pv, err := protoValue(m)
		if err != nil {
			return err
		}
		v = pv
	}
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// read returns the read options of the --stale flag: linearizable reads
// through the leader by default, so what the CLI prints is never older than
// a write another command made.
func (g *globals) read() client.ReadOptions {
	return client.ReadOptions{RequireLeader: !g.stale}
}
