package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/daemonconfig"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// syncBuffer is a bytes.Buffer safe for the logger and the test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunsWithTheProcessRuntime(t *testing.T) {
	var out syncBuffer
	cmd := newCommand(&out)
	cmd.SetArgs([]string{"--node-id", "w1", "--data-dir", t.TempDir(), "--gossip-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--heads", "127.0.0.1:1", "--runtime", "process", "--cpu-millis", "2000", "--memory-bytes", "1073741824",
		"--labels", "zone=a, disk=ssd", "--log-level", "debug"})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("megaflow-worker: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"megaflow-worker w1: runtime process; offering 2000 millicores, 1 GiB memory, 0 GPUs; at most 4 starts at once",
		"the process runtime isolates nothing",
		"worker stopped",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node-id", "w1"}, `required flag(s) "data-dir" not set`},
		{[]string{"--node-id", "w1", "--data-dir", "/tmp/x", "--runtime", "rkt", "--join", "127.0.0.1:1"}, `--runtime "rkt": want docker or process`},
		{[]string{"--node-id", "w1", "--data-dir", "/tmp/x", "--labels", "novalue"}, `--labels: "novalue" is not k=v`},
		{[]string{"--node-id", "w1", "--data-dir", "/tmp/x", "--runtime", "process"}, "--join and --heads are both empty"},
		{[]string{"--node-id", "w1", "--data-dir", "/tmp/x", "--log-format", "xml"}, `log format "xml"`},
		{[]string{"--node-id", "w1", "--data-dir", "/tmp/x", "--cpu-millis", "-1"}, "must not be negative"},
	} {
		var out syncBuffer
		cmd := newCommand(&out)
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(tc.args)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestParseLabels(t *testing.T) {
	got, err := parseLabels(" a=1 ,b=, c = x ")
	if err != nil || len(got) != 3 || got["a"] != "1" || got["b"] != "" || got["c"] != "x" {
		t.Errorf("parseLabels = %v, %v", got, err)
	}
	if _, err := parseLabels("a=1,a=2"); err == nil {
		t.Error("duplicate label accepted")
	}
	if _, err := parseLabels("=x"); err == nil {
		t.Error("empty key accepted")
	}
	if got, _ := parseLabels(""); len(got) != 0 {
		t.Errorf("empty labels = %v", got)
	}
}

// The example in deploy/config shows every setting, and the worker takes
// them.
func TestConfigExample(t *testing.T) {
	if err := daemonconfig.CheckExample(newCommand(io.Discard).Flags(), filepath.Join("..", "..", "deploy", "config", "worker.yaml")); err != nil {
		t.Fatal(err)
	}
}

// A worker runs from a --config file, required flags included, and a flag
// on the command line wins over the file; a bad key stops it before it
// starts, naming the key.
func TestRunsFromAConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "worker.yaml")
	conf := "node-id: w1\ndata-dir: " + dir + "\ngossip-addr: 127.0.0.1:0\nhttp-addr: 127.0.0.1:0\nheads: [127.0.0.1:1]\n" +
		"runtime: process\ncpu-millis: 1000\nmemory-bytes: 1073741824\nlabels: {zone: a}\n"
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	cmd := newCommand(&out)
	cmd.SetArgs([]string{"--config", path, "--cpu-millis", "3000"})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("megaflow-worker --config: %v\n%s", err, out.String())
	}
	if want := "megaflow-worker w1: runtime process; offering 3000 millicores, 1 GiB memory"; !strings.Contains(out.String(), want) {
		t.Fatalf("output lacks %q:\n%s", want, out.String())
	}

	if err := os.WriteFile(path, []byte(conf+"cpu_millis: 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out = syncBuffer{}
	cmd = newCommand(&out)
	cmd.SetArgs([]string{"--config", path})
	cmd.SetErr(io.Discard)
	err := cmd.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), `key "cpu_millis": not a setting`) {
		t.Fatalf("a bad key: %v; want it named", err)
	}
}
