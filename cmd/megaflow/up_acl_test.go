package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// `megaflow up --acl`: the local cluster comes up with ACLs on (its worker
// connects with the worker token it made), a command without a token is
// refused, one with the admin token runs a graph to the end, and a restart
// on the same data directory reuses the kept tokens.
func TestUpACL(t *testing.T) {
	t.Parallel() // it waits for a local cluster (see internal/testcluster)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	opts := localOptions{DataDir: filepath.Join(dir, "data"), Runtime: "process", GRPCAddr: "127.0.0.1:0",
		RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0", WorkerGossipAddr: "127.0.0.1:0", LogLevel: "debug", ACL: true}
	graph := filepath.Join(dir, "g.yaml")
	if err := os.WriteFile(graph, []byte("id: g1\ntasks:\n  - {name: a, image: x, command: [\"true\"]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var first string
	for round := range 2 {
		lc, err := startLocal(ctx, opts)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var desc strings.Builder
		lc.describe(&desc)
		if lc.adminToken == "" || !strings.Contains(desc.String(), "export MEGAFLOW_TOKEN="+lc.adminToken) {
			t.Fatalf("round %d: describe %q", round, desc.String())
		}
		if round == 0 {
			first = lc.adminToken
		} else if lc.adminToken != first {
			t.Errorf("the restart made a new admin token")
		}
		heads := "--heads=" + lc.head.GRPCAddr()
		if code, _, errOut := cli(t, heads, "graphs"); code == exitOK || !strings.Contains(errOut, "--token or MEGAFLOW_TOKEN") {
			t.Errorf("round %d: graphs without a token: %d %q", round, code, errOut)
		}
		if code, out, errOut := cli(t, heads, "--token", lc.adminToken, "submit", graph, "--watch"); code != exitOK || !strings.Contains(out, "graph g1 succeeded") {
			t.Errorf("round %d: submit --watch: %d %q %q", round, code, out, errOut)
		}
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := lc.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		scancel()
	}
	if fi, err := os.Stat(filepath.Join(opts.DataDir, "acl-tokens.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("tokens file: %v %v", fi, err)
	}
}
