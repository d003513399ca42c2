package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
)

// sandboxCpCmd is "megaflow sandbox cp": a directory (or a file) into or
// out of a sandbox as a tar stream (client.UploadDir, client.DownloadDir).
func sandboxCpCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a directory or a file into or out of a sandbox",
		Long: `cp copies between this machine and a sandbox; exactly one of SRC and DST is
ID:PATH, PATH absolute in the sandbox:

  megaflow sandbox cp ./repo sbx-x1:/work/repo     the contents of ./repo into /work/repo (created)
  megaflow sandbox cp ./main.py sbx-x1:/work       a file into /work, as /work/main.py
  megaflow sandbox cp sbx-x1:/work/out ./out       the contents of /work/out into ./out (created)
  megaflow sandbox cp sbx-x1:/work/log.txt .       a file into ., as ./log.txt

Files, directories and symbolic links are copied (devices and FIFOs are
refused); a tar stream is at most 256 MiB; nothing is written outside the
destination. A copy is not retried: when the head or the worker does not
answer, megaflow exits 1 and part of it may have been written. -o json
prints {"sandbox", "direction", "path", "local", "bytes"}.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcID, srcPath, srcRemote := splitSandboxPath(args[0])
			dstID, dstPath, dstRemote := splitSandboxPath(args[1])
			if srcRemote == dstRemote {
				return errs.New(errs.InvalidArgument, "cp %s %s: exactly one of SRC and DST must be ID:PATH (a sandbox path), the other a local path", args[0], args[1])
			}
			id, remote, local, direction := srcID, srcPath, args[1], "download"
			if dstRemote {
				id, remote, local, direction = dstID, dstPath, args[0], "upload"
			}
			if err := spec.CheckSandboxPath(id, remote); err != nil {
				return err
			}
			if direction == "upload" {
				if _, err := os.Lstat(local); err != nil {
					return errs.New(errs.InvalidArgument, "cp: %v", err)
				}
			}
			ctx, c, done, err := g.dialSynced(cmd)
			if err != nil {
				return err
			}
			defer done()
			s, err := c.GetSandbox(ctx, id)
			if err != nil {
				return err
			}
			var n int64
			if direction == "upload" {
				n, err = s.UploadDir(ctx, local, remote)
			} else {
				n, err = s.DownloadDir(ctx, remote, local)
			}
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"sandbox": id, "direction": direction, "path": remote, "local": local, "bytes": n})
			}
			fmt.Fprintf(g.stderr, "%s %s %s:%s (%d bytes of tar)\n", direction, local, id, remote, n)
			return nil
		},
	}
}

// splitSandboxPath splits "ID:PATH" into its sandbox id and path; remote
// is false for a local path (no ":" after a sandbox id).
func splitSandboxPath(arg string) (id, path string, remote bool) {
	id, path, ok := strings.Cut(arg, ":")
	if !ok || !strings.HasPrefix(id, spec.SandboxIDPrefix) {
		return "", arg, false
	}
	return id, path, true
}
