package harness

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/chaos/check"
	"github.com/megaflow/megaflow/internal/chaos/fault"
)

func TestParseExecution(t *testing.T) {
	for _, tc := range []struct {
		line string
		want check.Execution
		ok   bool
	}{
		{"start 2 w1 1700000000000000000", check.Execution{Attempt: 2, Worker: "w1", At: 1700000000000000000}, true},
		{"end 1 w3 17", check.Execution{Attempt: 1, Worker: "w3", End: true, At: 17}, true},
		{"stop 3 w2 18", check.Execution{Attempt: 3, Worker: "w2", End: true, Stopped: true, At: 18}, true},
		{"start  w1 17", check.Execution{}, false}, // the attempt missing
		{"begin 1 w1 17", check.Execution{}, false},
		{"start 1 w1 noon", check.Execution{}, false},
		{"", check.Execution{}, false},
	} {
		got, ok := parseExecution(tc.line)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseExecution(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

func TestReadExecutionsAndScanLogs(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, body string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("hosts/w1/exec/c0-1__t0", "start 1 w1 10\nend 1 w1 20\n")
	write("hosts/w2/exec/c0-1__t0", "start 2 w2 30\n")
	write("hosts/w2/exec/junk", "start 1 w2 1\n")
	got, err := readExecutions(filepath.Join(dir, "hosts"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]check.Execution{"c0-1/t0": {{Attempt: 1, Worker: "w1", At: 10}, {Attempt: 1, Worker: "w1", End: true, At: 20}, {Attempt: 2, Worker: "w2", At: 30}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("readExecutions = %+v, want %+v", got, want)
	}

	write("logs/h1.log", "level=INFO msg=ok\npanic: runtime error: index out of range\n")
	write("logs/w1.log", "level=WARN msg=\"recovered a panic in a handler\"\n==================\nWARNING: DATA RACE\n")
	write("logs/h2.log", "fatal error: concurrent map writes\n")
	if p := scanLogs(filepath.Join(dir, "logs")); len(p) != 3 {
		t.Fatalf("scanLogs found %d problems, want 3 (a panic, a race, a fatal error; not a log line naming a panic): %q", len(p), p)
	}
}

// TestKnownRaftPipelineHang recognises the goroutine dump of a head whose
// shutdown hung in hashicorp/raft's pipeline replication (as the short
// profile saw it after isolate-leader), and nothing else.
func TestKnownRaftPipelineHang(t *testing.T) {
	dir := t.TempDir()
	hang := "level=INFO msg=x\nSIGQUIT: quit\ngoroutine 1 [sync.WaitGroup.Wait]:\ngithub.com/hashicorp/raft.(*raftState).waitShutdown(...)\n" +
		"goroutine 326 [select]:\ngithub.com/hashicorp/raft.(*netPipeline).AppendEntries(0xc0)\n" +
		"goroutine 340 [select]:\ngithub.com/hashicorp/raft.(*netPipeline).decodeResponses(0xc0)\n"
	other := "SIGQUIT: quit\ngoroutine 1 [chan receive]:\ngithub.com/megaflow/megaflow/head.(*Head).Shutdown()\n"
	for _, tc := range []struct {
		name, log string
		want      bool
	}{{"pipeline deadlock", hang, true}, {"another hang", other, false}, {"no dump", "level=INFO\n", false}} {
		p := filepath.Join(dir, tc.name)
		if err := os.WriteFile(p, []byte(tc.log), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := knownRaftPipelineHang(p); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if knownRaftPipelineHang(filepath.Join(dir, "missing")) {
		t.Error("a missing log was recognised")
	}
}

// TestFreezesAreWorkerFreezesInUnixTime: the verdict's freeze windows are
// the freeze-worker faults, moved from run offsets to Unix ns.
func TestFreezesAreWorkerFreezesInUnixTime(t *testing.T) {
	start := time.Unix(1000, 0)
	got := freezes([]Injected{
		{Fault: fault.Fault{Kind: fault.FreezeWorker}, Target: "w2", Start: 5e9, End: 9e9},
		{Fault: fault.Fault{Kind: fault.FreezeHead}, Target: "h1 (leader)", Start: 10e9, End: 12e9},
		{Fault: fault.Fault{Kind: fault.KillWorker}, Target: "w1", Start: 13e9, End: 15e9},
	}, start)
	want := []check.Freeze{{Worker: "w2", From: 1005e9, To: 1009e9}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("freezes = %+v, want %+v", got, want)
	}
}
