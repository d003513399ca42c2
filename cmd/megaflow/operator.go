package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

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
whole snapshot is written and its SHA-256 matches the head's (a temporary
file is renamed); FILE.sha256 then holds that checksum in sha256sum's format
('sha256sum -c FILE.sha256' in FILE's directory checks it), and restore
checks it. Large tables may need a longer --timeout (0: none).`,
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
			if err := writeChecksum(path, info.GetSha256()); err != nil {
				return fmt.Errorf("snapshot save: %s is saved but its checksum file is not (%w); 'sha256sum %s > %s' writes it", path, err, filepath.Base(path), filepath.Base(path)+checksumSuffix)
			}
			if g.output == "json" {
				return g.printJSON(info)
			}
			fmt.Fprintf(g.stdout, "saved %s: %s\n", path, describeSnapshot(info))
			return nil
		},
	}
	var force, yes, noVerify bool
	restore := &cobra.Command{
		Use:   "restore FILE",
		Short: "Replace the whole task table with a snapshot FILE (disaster recovery)",
		Long: `Replace the cluster's whole task table with a snapshot that
'megaflow operator snapshot save' wrote: every head takes it, and the cluster
takes the snapshot's cluster id. When FILE.sha256 (written by save) is there,
FILE's SHA-256 must match it (--no-verify skips this check); then the leader
checks the whole file before anything changes. Meant for recovery into a
fresh cluster: a table holding graphs is replaced only with --force. Needs
--yes.`,
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
			if !noVerify {
				if err := verifyChecksum(args[0], f); err != nil {
					return err
				}
			}
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
	restore.Flags().BoolVar(&noVerify, "no-verify", false, "restore even if FILE does not match FILE.sha256")
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
	return fmt.Sprintf("index %d, %d graphs (%d archived), %d tasks, %d workers, rules %d, cluster %s, %s, sha256 %s",
		i.GetIndex(), i.GetGraphs(), i.GetArchivedGraphs(), i.GetTasks(), i.GetWorkers(), i.GetRules(), orDash(i.GetClusterId()),
		size, i.GetSha256())
}

// checksumSuffix names the checksum file save writes beside a snapshot.
const checksumSuffix = ".sha256"

// writeChecksum writes path+checksumSuffix, in sha256sum's format (the hex
// SHA-256, two spaces, path's base name), through a temporary file renamed
// into place.
func writeChecksum(path, sha string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+checksumSuffix+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if _, err := fmt.Fprintf(tmp, "%s  %s\n", sha, filepath.Base(path)); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path+checksumSuffix)
}

// verifyChecksum checks the snapshot f (opened from path) against
// path+checksumSuffix when that file exists, and seeks f back to its
// start. No checksum file: nil. Errors: InvalidArgument for a checksum file
// that is not one SHA-256 in sha256sum's format or that does not match;
// f's read error.
func verifyChecksum(path string, f io.ReadSeeker) error {
	sumPath := path + checksumSuffix
	raw, err := os.ReadFile(sumPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return errs.New(errs.InvalidArgument, "snapshot restore: %v", err)
	}
	fields := strings.Fields(string(raw))
	if len(raw) > 4096 || len(fields) == 0 || len(fields) > 2 || len(fields[0]) != 2*sha256.Size || strings.Trim(fields[0], "0123456789abcdefABCDEF") != "" {
		return errs.New(errs.InvalidArgument, "snapshot restore: %s is not a checksum file (want one line: 64 hex digits, two spaces, the file name); fix or remove it, or pass --no-verify", sumPath)
	}
	want := strings.ToLower(fields[0])
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("snapshot restore: reading %s: %w", path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("snapshot restore: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return errs.New(errs.InvalidArgument, "snapshot restore: %s has SHA-256 %s but %s says %s: the file changed or was damaged after it was saved; "+
			"restore another backup, or pass --no-verify to restore it anyway (the leader still checks that it is a whole snapshot)", path, got, sumPath, want)
	}
	return nil
}
