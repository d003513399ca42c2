package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The embedded cluster of `megaflow up` runs graphs; submit --watch prints
// a summary that adds up, -o json one object with numbers, and the exit
// code says whether the graph succeeded.
func TestUpAndWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	lc, err := startLocal(ctx, localOptions{DataDir: filepath.Join(dir, "data"), Runtime: "process", GRPCAddr: "127.0.0.1:0",
		RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0", WorkerGossipAddr: "127.0.0.1:0", LogLevel: "debug"})
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
	if lc.runtime != "process" {
		t.Fatalf("runtime %q, want process", lc.runtime)
	}
	heads := "--heads=" + lc.head.GRPCAddr()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", `id: good
tasks:
  - {name: a, image: x, command: [sh, -c, "echo MEGAFLOW_RESULT '{\"reward\": 0.25}'"]}
  - {name: b, image: x, command: [sh, -c, "echo MEGAFLOW_RESULT '{\"reward\": 0.75}'"], depends_on: [a]}
`)
	code, out, errOut := cli(t, heads, "submit", good, "--watch")
	if code != exitOK || !strings.Contains(out, "graph good succeeded") || !strings.Contains(out, "total              2  (2 tasks submitted)") ||
		!strings.Contains(out, "mean reward          0.500") {
		t.Fatalf("submit --watch: exit %d\n%s\n%s", code, out, errOut)
	}
	bad := write("bad.yaml", `id: bad
tasks:
  - {name: a, image: x, command: [sh, -c, "exit 3"]}
  - {name: b, image: x, command: ["true"], depends_on: [a]}
`)
	code, out, errOut = cli(t, heads, "submit", bad, "--watch", "-o", "json")
	var s Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if code != exitGraphFailed || s.State != "failed" || s.Counts["failed"] != 1 || s.Counts["cancelled"] != 1 || s.Tasks != 2 ||
		s.ExitCode != exitGraphFailed || !strings.Contains(errOut, "graph bad failed") {
		t.Fatalf("failing graph: exit %d, summary %+v, stderr %q", code, s, errOut)
	}
}

// TestUpRefusesBadFlagsBeforeWriting: each bad flag of `megaflow up` is
// refused naming the flag, before the data directory is even created (a
// refused start leaves nothing behind).
func TestUpRefusesBadFlagsBeforeWriting(t *testing.T) {
	for _, tc := range []struct {
		edit func(*localOptions)
		want string
	}{
		{func(o *localOptions) { o.DataDir = "" }, "--data-dir is empty"},
		{func(o *localOptions) { o.Runtime = "bogus" }, `--runtime "bogus": want auto, docker or process`},
		{func(o *localOptions) { o.CPUMillis = -5 }, "--cpu-millis -5"},
		{func(o *localOptions) { o.MemoryBytes = -1 }, "--memory-bytes -1"},
		{func(o *localOptions) { o.PoolMax = -1 }, "--pool-max -1"},
		{func(o *localOptions) { o.MaxConcurrentStarts = -2 }, "--max-concurrent-starts -2"},
		{func(o *localOptions) { o.LogLevel = "loud" }, `--log-level: log level "loud"`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			o := localOptions{DataDir: dir, Runtime: "process", LogLevel: "info", GRPCAddr: "127.0.0.1:0",
				RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0", WorkerGossipAddr: "127.0.0.1:0"}
			tc.edit(&o)
			lc, err := startLocal(context.Background(), o)
			if err == nil {
				_ = lc.Stop(context.Background())
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("the refused start left %s behind (stat: %v)", dir, err)
			}
		})
	}
}
