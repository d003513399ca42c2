package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/testcluster"
)

// The CLI on archived graphs: megaflow graphs leaves them out, --all
// lists them with the ARCHIVED column, status says the graph is
// archived, tasks says its tasks are no longer kept, delete removes the
// summary.
func TestCLIArchivedGraph(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) {
		cfg.GraphRetention, cfg.ArchiveSweepInterval = time.Second, 20*time.Millisecond
	}})
	heads := "--heads=" + strings.Join(c.GRPCAddrs(), ",")
	file := filepath.Join(t.TempDir(), "g.yaml")
	if err := os.WriteFile(file, []byte("id: g1\ntasks:\n  - {name: a, image: img, command: [\"true\"]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := cli(t, heads, "submit", file); code != 0 {
		t.Fatalf("submit: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := cli(t, heads, "cancel", "g1"); code != 0 { // no worker: it ends cancelled
		t.Fatalf("cancel: %d %q %q", code, out, errOut)
	}
	testcluster.WaitFor(t, 30*time.Second, "g1 archived", func() bool {
		code, out, _ := cli(t, heads, "status", "g1")
		return code == 0 && strings.Contains(out, "archived ")
	})
	code, out, _ := cli(t, heads, "status", "g1")
	if !strings.Contains(out, "cancelled") || !strings.Contains(out, "no longer kept") {
		t.Fatalf("status of an archived graph: %d %q", code, out)
	}
	if code, out, _ := cli(t, heads, "graphs"); code != 0 || strings.Contains(out, "g1") {
		t.Fatalf("graphs: %d %q; want no g1 (archived)", code, out)
	}
	code, out, _ = cli(t, heads, "graphs", "--all")
	if code != 0 || !strings.Contains(out, "ARCHIVED") || !regexp.MustCompile(`(?m)^g1 .*cancelled.* [0-9.]+m?s$`).MatchString(out) {
		t.Fatalf("graphs --all: %d %q; want g1 with the time since it was archived", code, out)
	}
	code, out, errOut := cli(t, heads, "tasks", "g1")
	if code == 0 || !strings.Contains(errOut, "was archived at") || !strings.Contains(errOut, "--graph-retention") {
		t.Fatalf("tasks of an archived graph: %d %q %q", code, out, errOut)
	}
	// Cancelling an archived graph cancels nothing, as for any finished
	// graph.
	if code, out, errOut := cli(t, heads, "cancel", "g1"); code != 0 {
		t.Fatalf("cancel of an archived graph: %d %q %q; want success, nothing cancelled", code, out, errOut)
	}
	// A script retrying its submit with --wait gets the archived graph's
	// summary and its exit code (4: cancelled), not an error.
	code, out, errOut = cli(t, heads, "submit", file, "--wait")
	if code != 4 || !strings.Contains(out, "graph g1 cancelled") || !strings.Contains(out, "no longer kept") || strings.Contains(errOut, "was archived at") {
		t.Fatalf("submit --wait of an archived graph: %d %q %q; want its summary and exit 4 (cancelled)", code, out, errOut)
	}
	if code, out, errOut := cli(t, heads, "delete", "g1"); code != 0 || !strings.Contains(out, "deleted graph g1: 0 tasks") {
		t.Fatalf("delete of an archived graph: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := cli(t, heads, "status", "g1"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Fatalf("status after delete: %d %q %q", code, out, errOut)
	}
}
