package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/version"
)

// TestClusterAndWorkersShowVersions: the head advertises its build by
// gossip and the worker in its WorkerInfo; megaflow cluster and megaflow
// workers show them in a VERSION column, and megaflow --version prints the
// same build.
func TestClusterAndWorkersShowVersions(t *testing.T) {
	t.Parallel() // it waits for a local cluster (see internal/testcluster)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lc, err := startLocal(ctx, localOptions{DataDir: filepath.Join(t.TempDir(), "data"), Runtime: "process", GRPCAddr: "127.0.0.1:0",
		RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0", WorkerGossipAddr: "127.0.0.1:0", LogLevel: "info"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		if err := lc.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	want := version.Get().Short()
	heads := "--heads=" + lc.head.GRPCAddr()
	// cell returns the cell under header (tabwriter aligns it) of the row
	// whose first cell starts with id (megaflow up names its worker
	// local-<hash of the data dir>-<random>).
	cell := func(out, header, id string) string {
		at := -1
		for _, l := range strings.Split(out, "\n") {
			if i := strings.Index(l, header); i >= 0 && at < 0 {
				at = i
				continue
			}
			if f := strings.Fields(l); at >= 0 && len(f) > 0 && strings.HasPrefix(f[0], id) && len(l) > at {
				return strings.Fields(l[at:])[0]
			}
		}
		return ""
	}
	column := func(out, id string) string { return cell(out, "VERSION", id) }
	rules := strconv.FormatUint(fsm.RulesCurrent, 10)
	var out, errOut string
	var code int
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out, errOut = cli(t, heads, "cluster")
		// The rules version too: the one in force (the leader commits it
		// right after its election), and the highest the head applies.
		if code == exitOK && column(out, "local-head") == want &&
			strings.Contains(out, "rules "+rules+"\n") && cell(out, "RULES", "local-head") == rules {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("megaflow cluster: exit %d, head version %q, want %q, and rules %s in force and in the RULES column\n%s\n%s",
				code, column(out, "local-head"), want, rules, out, errOut)
		}
		time.Sleep(100 * time.Millisecond)
	}

	for {
		code, out, errOut = cli(t, heads, "workers")
		if code == exitOK && column(out, "local-") == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("megaflow workers: exit %d, worker version %q, want %q\n%s\n%s", code, column(out, "local-"), want, out, errOut)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The worker's lease as the leader holds it (issue 18).
	if !strings.Contains(out, "LEASE") || !strings.Contains(out, "expires in") {
		t.Errorf("megaflow workers shows no lease state:\n%s", out)
	}
	code, out, _ = cli(t, "--version")
	if code != exitOK || out != "megaflow "+version.Get().String()+"\n" {
		t.Errorf("megaflow --version: exit %d, %q", code, out)
	}
}
