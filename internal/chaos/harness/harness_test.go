package harness

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/chaos/check"
	"github.com/megaflow/megaflow/internal/chaos/fault"
	"github.com/megaflow/megaflow/internal/chaos/netns"
)

// buildBinaries builds megaflow-head and megaflow-worker with the race
// detector into dir, so that a data race in either shows in its log, and
// megaflow-init beside them as make build does (static, CGO_ENABLED=0; it
// has no race build: it is small and single-threaded in effect). It
// returns the head, worker and init paths.
func buildBinaries(t *testing.T, dir string) (string, string, string) {
	t.Helper()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	mod := filepath.Dir(strings.TrimSpace(string(root)))
	var out []string
	for _, c := range []string{"megaflow-head", "megaflow-worker"} {
		bin := filepath.Join(dir, c)
		cmd := exec.Command("go", "build", "-race", "-o", bin, "./cmd/"+c)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", c, err, b)
		}
		out = append(out, bin)
	}
	initBin := filepath.Join(dir, "megaflow-init")
	cmd := exec.Command("go", "build", "-o", initBin, "./cmd/megaflow-init")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build megaflow-init: %v\n%s", err, b)
	}
	return out[0], out[1], initBin
}

// TestChaosShortProfile runs the short profile (about 2 minutes: every
// fault kind once and a few more kills) on race-built binaries and
// requires a passing verdict. Then it shows the deliberately broken build:
// the same run's input with one result recorded twice must fail.
// MEGAFLOW_CHAOS_SEED picks another seed. It skips where network
// namespaces cannot be built (not root, no iproute2), and with -short,
// except under CI=true, where it fails instead.
func TestChaosShortProfile(t *testing.T) {
	if why := netns.Available(context.Background()); why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the chaos harness cannot run: %s", why)
		}
		t.Skipf("skipped: %s; the chaos harness needs root, iproute2 and iptables", why)
	}
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("skipped with -short: the chaos short profile takes about 3 minutes")
	}
	seed := uint64(1)
	if s := os.Getenv("MEGAFLOW_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("MEGAFLOW_CHAOS_SEED %q: %v", s, err)
		}
		seed = v
	}
	bins := t.TempDir()
	headBin, workerBin, initBin := buildBinaries(t, bins)
	dir, err := os.MkdirTemp("", "megaflow-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.HeadBin, cfg.WorkerBin, cfg.InitBin, cfg.Dir, cfg.Seed = headBin, workerBin, initBin, dir, seed
	cfg.Clients = 3
	cfg.Progress = testWriter{t}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := res.Verdict
	t.Logf("seed %d: %d faults (%v), %d acknowledged ops, %d unknown, %d graphs, %d executions, %d re-executed, %d re-queued, %d overlapping (%d in a freeze), %d partitions checked",
		seed, len(res.Faults), fault.Counts(res.Schedule), v.Acknowledged, v.Unknown, v.AckedGraphs, v.Executions, v.ReExecuted, v.Requeued, v.Overlapping, v.OverlapAllowed, v.Lin.Partitions)
	if !v.Pass() {
		for _, d := range v.Details {
			t.Log(d)
		}
		t.Fatalf("the short profile failed (seed %d; logs and data kept in %s): %s", seed, dir, strings.Join(v.Failures, "; "))
	}
	defer os.RemoveAll(dir)
	if len(res.Faults) < len(fault.AllKinds) || len(fault.Counts(res.Schedule)) != len(fault.AllKinds) {
		t.Fatalf("%d faults of %d kinds injected; the short profile covers every kind", len(res.Faults), len(fault.Counts(res.Schedule)))
	}
	for _, f := range res.Faults {
		if f.Err != "" {
			t.Errorf("fault %v on %s: %s", f.Fault, f.Target, f.Err)
		}
	}
	if v.Acknowledged < 500 || v.AckedGraphs < 100 || v.Lin.Partitions < 100 {
		t.Fatalf("too little work to judge: %d ops, %d graphs, %d partitions", v.Acknowledged, v.AckedGraphs, v.Lin.Partitions)
	}
	// The lease (3 s + 1.5 s) is short enough that the profile's kills,
	// freezes and partitions (3 to 6 s) make workers lose attempts.
	if v.Requeued == 0 {
		t.Fatalf("no task lost an attempt with its worker: the faults did not exercise the lease's re-queues (lease %v, margin %v)", cfg.Lease, cfg.LeaseMargin)
	}
	out, _ := netns.Exec(ctx, "ip", "netns", "list")
	if strings.Contains(string(out), res.Prefix) {
		t.Fatalf("namespaces of %s left after the run:\n%s", res.Prefix, out)
	}

	// The deliberately broken build: a cluster that recorded one result
	// twice. The verdict of the same run must fail.
	broken := res.Input.Clone()
	check.InjectDuplicateResult(&broken)
	if bv := check.Judge(broken); bv.Pass() || !strings.Contains(strings.Join(bv.Failures, " "), "recorded twice") {
		t.Fatalf("a run with a result recorded twice passed: %v", bv.Failures)
	}
}

// testWriter sends the harness's progress lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
