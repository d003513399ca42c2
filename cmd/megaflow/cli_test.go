package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// cli runs the CLI in process and returns its exit code and output.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCLIAgainstACluster(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	heads := "--heads=" + strings.Join(c.GRPCAddrs(), ",")
	dir := t.TempDir()
	file := filepath.Join(dir, "g.yaml")
	if err := os.WriteFile(file, []byte("id: g1\ntasks:\n  - {name: a, image: img, command: [\"true\"]}\n  - {name: b, image: img, command: [\"true\"], depends_on: [a]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli(t, heads, "submit", file)
	if code != 0 || !strings.Contains(out, "submitted graph g1 (2 tasks)") {
		t.Fatalf("submit: %d %q %q", code, out, errOut)
	}
	code, out, _ = cli(t, heads, "submit", file)
	if code != 0 || !strings.Contains(out, "already submitted graph g1") {
		t.Fatalf("resubmit: %d %q", code, out)
	}
	code, out, _ = cli(t, heads, "tasks", "g1")
	if code != 0 || !strings.Contains(out, "g1/a") || !strings.Contains(out, "queued") || !strings.Contains(out, "pending") {
		t.Fatalf("tasks: %d %q", code, out)
	}
	code, out, _ = cli(t, heads, "status", "g1", "-o", "json")
	if code != 0 || !strings.Contains(out, `"task_count"`) {
		t.Fatalf("status json: %d %q", code, out)
	}
	code, out, _ = cli(t, heads, "cluster")
	if code != 0 || strings.Count(out, "voter") != 3 || !strings.Contains(out, "leader h") || !regexp.MustCompile(`(?m)^cluster [0-9a-f]{16}  rules [0-9]+$`).MatchString(out) {
		t.Fatalf("cluster: %d %q", code, out)
	}
	// No worker: watching gives up at --timeout and says the graph runs on.
	code, _, errOut = cli(t, heads, "--timeout=1s", "submit", file, "--watch")
	if code != 1 || !strings.Contains(errOut, "stopped waiting after --timeout; graph g1 keeps running") {
		t.Fatalf("submit --watch --timeout 1s: %d %q", code, errOut)
	}
	// Waiting again for a graph already submitted: status --wait.
	code, _, errOut = cli(t, heads, "--timeout=1s", "status", "g1", "--wait")
	if code != 1 || !strings.Contains(errOut, "stopped waiting after --timeout; graph g1 keeps running (megaflow status g1 --wait waits again)") {
		t.Fatalf("status --wait --timeout 1s: %d %q", code, errOut)
	}
	code, out, _ = cli(t, heads, "cancel", "g1")
	if code != 0 || !strings.Contains(out, "cancelled 2 tasks of g1") {
		t.Fatalf("cancel: %d %q", code, out)
	}
	code, out, errOut = cli(t, heads, "status", "g1", "--wait")
	if code != exitGraphCancelled || !strings.Contains(out, "cancelled") || !strings.Contains(errOut, "graph g1 cancelled") {
		t.Fatalf("status --wait of the cancelled graph: %d %q %q; want exit %d with the summary", code, out, errOut, exitGraphCancelled)
	}
	// The listing shows the cancelled tasks: a cancelled graph does not
	// read as a success.
	code, out, _ = cli(t, heads, "graphs")
	if code != 0 || !strings.Contains(out, "CANCELLED") || !regexp.MustCompile(`(?m)^g1 +\S+ +cancelled +2 +0 +0 +2 +- `).MatchString(out) {
		t.Fatalf("graphs: %d %q; want g1 with its 2 cancelled tasks", code, out)
	}
	svc := filepath.Join(dir, "svc.yaml")
	if err := os.WriteFile(svc, []byte("id: g2\ntasks:\n  - {name: srv, kind: service, service: {name: model/qwen-7b}, image: img, command: [serve]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut = cli(t, heads, "submit", svc); code != 0 {
		t.Fatalf("submit service: %d %q %q", code, out, errOut)
	}
	code, out, _ = cli(t, heads, "services")
	if code != 0 || !strings.Contains(out, "SERVICE") || !regexp.MustCompile(`model/qwen-7b +0/1 +- +g2/srv`).MatchString(out) {
		t.Fatalf("services: %d %q", code, out)
	}
	code, out, errOut = cli(t, heads, "services", "model//x")
	if code == 0 || !strings.Contains(errOut, `service name: "model//x" has an empty part`) {
		t.Fatalf("services model//x: %d %q %q", code, out, errOut)
	}
	code, out, errOut = cli(t, heads, "quota", "set", "team-a", "--max-running", "3", "--gpus", "2")
	if code != 0 || !strings.Contains(out, "quota of tenant team-a set at index") {
		t.Fatalf("quota set: %d %q %q", code, out, errOut)
	}
	code, out, _ = cli(t, heads, "quota", "set", "--cluster", "--max-running", "100")
	if code != 0 || !strings.Contains(out, "quota of the cluster set") {
		t.Fatalf("quota set --cluster: %d %q", code, out)
	}
	code, out, _ = cli(t, heads, "quota")
	if code != 0 || !strings.Contains(out, "team-a") || !strings.Contains(out, "0/3") || !strings.Contains(out, "0/100") {
		t.Fatalf("quota: %d %q", code, out)
	}
	// Setting one limit keeps the others (issue 18: --cpu-millis alone
	// dropped team-a's max-running and GPU limits).
	if code, out, errOut = cli(t, heads, "quota", "set", "team-a", "--cpu-millis", "500"); code != 0 {
		t.Fatalf("quota set --cpu-millis: %d %q %q", code, out, errOut)
	}
	code, out, _ = cli(t, heads, "quota")
	if code != 0 || !regexp.MustCompile(`(?m)^team-a +0/3 +0\.0/0\.5 +0/- +0/2$`).MatchString(out) {
		t.Fatalf("quota after setting only --cpu-millis: %d %q; want team-a's other limits kept (0/3 running, 0/2 GPUs)", code, out)
	}
	code, out, _ = cli(t, heads, "limits")
	if code != 0 || !strings.Contains(out, "api rate limit") || !strings.Contains(out, "none") || !strings.Contains(out, "100") {
		t.Fatalf("limits: %d %q", code, out)
	}
	code, _, errOut = cli(t, heads, "quota", "set")
	if code != exitUsage || !strings.Contains(errOut, "give a TENANT") {
		t.Fatalf("quota set without tenant: %d %q", code, errOut)
	}
	code, _, errOut = cli(t, heads, "quota", "set", "x", "--max-running", "-1")
	if code != exitUsage || !strings.Contains(errOut, "max_running -1 is negative") {
		t.Fatalf("negative quota: %d %q", code, errOut)
	}
	code, _, errOut = cli(t, heads, "status", "nope")
	if code != exitError || !strings.Contains(errOut, `graph "nope" not found`) {
		t.Fatalf("status of unknown graph: %d %q", code, errOut)
	}

	// Bad input: exit 2, the file and line named, nothing sent.
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("id: g2\ntasks:\n  - name: a\n    image: img\n    comand: [\"true\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = cli(t, heads, "submit", bad)
	if code != exitUsage || !strings.Contains(errOut, "bad.yaml:5: tasks[0].comand: unknown field") {
		t.Fatalf("bad file: %d %q", code, errOut)
	}
	code, _, errOut = cli(t, heads, "tasks", "--state", "sleeping")
	if code != exitUsage || !strings.Contains(errOut, "--state") {
		t.Fatalf("bad flag value: %d %q", code, errOut)
	}
	code, _, _ = cli(t, heads, "frobnicate")
	if code != exitUsage {
		t.Fatalf("unknown command: exit %d, want %d", code, exitUsage)
	}
}

// status --watch of a graph that was stuck before the watch began says
// why on its progress line: the reason came with an event before the
// watch, so it is read from the queued task's row (a new-user trial saw
// only "queued 1").
func TestStatusWatchSaysWhyAGraphStuckBeforeIsQueued(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	c.AddWorker(testcluster.WorkerOptions{Runtime: fake.New(nil), Capacity: worker.Capacity{CPUMillis: 2000, MemoryBytes: 1 << 30}})
	heads := "--heads=" + strings.Join(c.GRPCAddrs(), ",")
	file := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(file, []byte("id: big\ntasks:\n  - {name: a, image: img, command: [\"true\"], resources: {cpu_millis: 4000}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := cli(t, heads, "submit", file); code != 0 {
		t.Fatalf("submit: %d %q %q", code, out, errOut)
	}
	testcluster.WaitFor(t, 10*time.Second, "big/a's queueing reason", func() bool {
		_, out, _ := cli(t, heads, "tasks", "big")
		return strings.Contains(out, "has 4 cores")
	})
	code, out, errOut := cli(t, heads, "--timeout=1s", "status", "big", "--watch")
	if code != 1 || !strings.Contains(out, "queued 1  (queued: no worker") || !strings.Contains(out, "has 4 cores (the largest has 2 cores)") {
		t.Fatalf("status --watch: %d %q %q; want the queueing reason on the progress line", code, out, errOut)
	}
	// A wait without the progress line says it when it gives up.
	code, _, errOut = cli(t, heads, "--timeout=1s", "status", "big", "--wait")
	if code != 1 || !strings.Contains(errOut, "graph big keeps running  (queued: no worker") || !strings.Contains(errOut, "has 4 cores") {
		t.Fatalf("status --wait --timeout 1s: %d %q; want the queueing reason in the message", code, errOut)
	}
	// Nor does a plain status leave it out.
	code, out, errOut = cli(t, heads, "status", "big")
	if code != 0 || !strings.Contains(out, "\nqueued: no worker") || !strings.Contains(out, "has 4 cores") {
		t.Fatalf("status: %d %q %q; want the queueing reason", code, out, errOut)
	}
}
