package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/testcluster"
)

// `megaflow operator snapshot save` writes FILE and FILE.sha256 (sha256sum's
// format, matching FILE); restore checks FILE against FILE.sha256 before
// sending anything, refuses a mismatch unless --no-verify, and restores a
// file without a checksum file as before.
func TestSnapshotSaveThenRestore(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	heads := "--heads=" + strings.Join(c.GRPCAddrs(), ",")
	dir := t.TempDir()
	graph := filepath.Join(dir, "g.yaml")
	if err := os.WriteFile(graph, []byte("id: g1\ntasks:\n  - {name: a, image: img, command: [\"true\"]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := cli(t, heads, "submit", graph); code != 0 {
		t.Fatalf("submit: %d %q %q", code, out, errOut)
	}

	file := filepath.Join(dir, "backup.snap")
	code, out, errOut := cli(t, heads, "operator", "snapshot", "save", file)
	if code != 0 || !strings.Contains(out, "saved "+file+": ") || !strings.Contains(out, "1 graphs") {
		t.Fatalf("save: %d %q %q", code, out, errOut)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	sidecar, err := os.ReadFile(file + ".sha256")
	if want := hexSum + "  backup.snap\n"; err != nil || string(sidecar) != want {
		t.Fatalf("backup.snap.sha256: %q, %v; want %q", sidecar, err, want)
	}
	if !strings.Contains(out, "sha256 "+hexSum) {
		t.Fatalf("save printed %q; want the file's sha256 %s", out, hexSum)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) != 0 {
		t.Fatalf("save left temporary files: %v", left)
	}

	// The checksum file and the snapshot disagree: refused before anything is sent.
	zeros := strings.Repeat("0", 64)
	if err := os.WriteFile(file+".sha256", []byte(zeros+"  backup.snap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = cli(t, heads, "operator", "snapshot", "restore", "--yes", "--force", file)
	if code != exitUsage || !strings.Contains(errOut, "has SHA-256 "+hexSum+" but "+file+".sha256 says "+zeros) || !strings.Contains(errOut, "--no-verify") {
		t.Fatalf("restore with a wrong checksum file: %d %q; want exit %d naming both checksums and --no-verify", code, errOut, exitUsage)
	}
	if err := os.WriteFile(file+".sha256", []byte("not a checksum\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = cli(t, heads, "operator", "snapshot", "restore", "--yes", "--force", file)
	if code != exitUsage || !strings.Contains(errOut, "is not a checksum file") {
		t.Fatalf("restore with a malformed checksum file: %d %q", code, errOut)
	}
	code, out, errOut = cli(t, heads, "operator", "snapshot", "restore", "--yes", "--force", "--no-verify", file)
	if code != 0 || !strings.Contains(out, "restored "+file+": ") || !strings.Contains(out, "sha256 "+hexSum) {
		t.Fatalf("restore --no-verify: %d %q %q", code, out, errOut)
	}

	// The checksum file as save wrote it: checked, then restored.
	if err := os.WriteFile(file+".sha256", sidecar, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = cli(t, heads, "operator", "snapshot", "restore", "--yes", "--force", file)
	if code != 0 || !strings.Contains(out, "restored "+file+": ") || !strings.Contains(out, "1 graphs") {
		t.Fatalf("restore: %d %q %q", code, out, errOut)
	}
	code, out, _ = cli(t, heads, "tasks", "g1")
	if code != 0 || !strings.Contains(out, "g1/a") {
		t.Fatalf("tasks after restore: %d %q", code, out)
	}

	// A snapshot damaged after it was saved: the checksum file catches it.
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = cli(t, heads, "operator", "snapshot", "restore", "--yes", "--force", file)
	if code != exitUsage || !strings.Contains(errOut, "changed or was damaged after it was saved") {
		t.Fatalf("restore of a damaged file: %d %q", code, errOut)
	}

	// No checksum file (a snapshot from an older CLI): restored unchecked.
	if err := os.Remove(file + ".sha256"); err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut = cli(t, heads, "operator", "snapshot", "restore", "--yes", "--force", file); code != 0 {
		t.Fatalf("restore without a checksum file: %d %q %q", code, out, errOut)
	}
}
