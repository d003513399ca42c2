package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
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
	t.Parallel() // it waits for a local cluster (see internal/testcluster)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	lc, err := startLocal(ctx, localOptions{DataDir: filepath.Join(dir, "data"), Runtime: "process", GRPCAddr: "127.0.0.1:0",
		RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0", WorkerGossipAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", LogLevel: "debug"})
	if err != nil {
		t.Fatal(err)
	}
	// --http-addr: the head serves /readyz and the dashboard, and the
	// description says where.
	var desc strings.Builder
	lc.describe(&desc)
	if a := lc.head.HTTPAddr(); a == "" || !strings.Contains(desc.String(), "dashboard: http://"+a+"/") {
		t.Fatalf("HTTP address %q; description:\n%s", a, desc.String())
	}
	if resp, err := http.Get("http://" + lc.head.HTTPAddr() + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: %v, %v", resp, err)
	} else {
		resp.Body.Close()
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
		{func(o *localOptions) { w := -time.Second; o.MaxQueueWait = &w }, "--max-queue-wait -1s"},
		{func(o *localOptions) { o.LogLevel = "loud" }, `--log-level: log level "loud"`},
		{func(o *localOptions) { o.HTTPAddr = "8080" }, `--http-addr "8080" is not host:port`},
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

// occupyTCPAndUDP listens on one port of 127.0.0.1 by TCP and by UDP, as a
// gossip member (or another program) would, until the test ends, and
// returns the address.
func occupyTCPAndUDP(t *testing.T) string {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		u, err := net.ListenPacket("udp", l.Addr().String())
		if err != nil {
			l.Close() // its UDP twin is taken: try another port
			continue
		}
		t.Cleanup(func() { l.Close(); u.Close() })
		return l.Addr().String()
	}
	t.Fatal("no port of 127.0.0.1 free by both TCP and UDP in 20 tries")
	return ""
}

// TestUpNamesTheFlagOfAnAddressInUse: `megaflow up` on a gossip address
// that another process holds (by TCP and UDP) fails saying so and naming
// the flag to change, as it does for the gRPC address. memberlist's bind
// error does not unwrap to syscall.EADDRINUSE (internal/gossip puts it
// back), so before, the gossip cases said only that the head (or the
// worker) did not start.
func TestUpNamesTheFlagOfAnAddressInUse(t *testing.T) {
	for _, tc := range []struct {
		flag string
		set  func(o *localOptions, addr string)
	}{
		{"--grpc-addr", func(o *localOptions, addr string) { o.GRPCAddr = addr }},
		{"--gossip-addr", func(o *localOptions, addr string) { o.GossipAddr = addr }},
		{"--worker-gossip-addr", func(o *localOptions, addr string) { o.WorkerGossipAddr = addr }},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			addr := occupyTCPAndUDP(t)
			o := localOptions{DataDir: filepath.Join(t.TempDir(), "data"), Runtime: "process", LogLevel: "debug", GRPCAddr: "127.0.0.1:0",
				RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0", WorkerGossipAddr: "127.0.0.1:0"}
			tc.set(&o, addr)
			lc, err := startLocal(ctx, o)
			if err == nil {
				sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer scancel()
				_ = lc.Stop(sctx)
				t.Fatalf("started with %s %s, which another process holds", tc.flag, addr)
			}
			msg := err.Error()
			if !strings.Contains(msg, "another process listens there") || !strings.Contains(msg, tc.flag) || !strings.Contains(msg, addr) {
				t.Fatalf("%s %s in use: %v\nwant the address, \"another process listens there\" and the flag %s", tc.flag, addr, err, tc.flag)
			}
		})
	}
}
