package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/shellbox"
	"github.com/megaflow/megaflow/internal/testbin"
	"github.com/megaflow/megaflow/worker"
)

// build copies megaflow-sh (internal/testbin: static, as make build builds it) into a fresh
// directory with one link per program, as the demo images hold it, and
// returns the directory: the only PATH the tests give it.
func build(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(testbin.Path(t, "megaflow-sh"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, shellbox.Program), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range append([]string{"sh"}, shellbox.Tools()...) {
		if err := os.Symlink(shellbox.Program, filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// demoTools returns the shell commands the demo's mock model asks the
// agent to run (examples/demo/model.go's tools), read from the source so
// that a new command there is checked here.
func demoTools(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("../../examples/demo/model.go")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)var tools = \[\]string\{(.*?)\n\}`).FindSubmatch(src)
	if block == nil {
		t.Fatal("examples/demo/model.go: no `var tools = []string{...}`: update this test to where the demo's tool commands are")
	}
	var cmds []string
	for _, m := range regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`).FindAllSubmatch(block[1], -1) {
		cmds = append(cmds, strings.ReplaceAll(string(m[1]), `\"`, `"`))
	}
	if len(cmds) < 3 {
		t.Fatalf("examples/demo/model.go: found %d tool commands, want several", len(cmds))
	}
	return cmds
}

// TestDemoToolCommands runs every command the demo's agent replays with
// megaflow-sh alone on PATH, in a workspace laid out by megaflow-agent
// setup, and wants each to succeed with output.
func TestDemoToolCommands(t *testing.T) {
	bin := build(t)
	work := t.TempDir()
	agent := exec.Command(testbin.Path(t, "megaflow-agent"), "setup", "--dir", work, "--repo", "o/r")
	if out, err := agent.CombinedOutput(); err != nil {
		t.Fatalf("megaflow-agent setup: %v\n%s", err, out)
	}
	for _, c := range demoTools(t) {
		cmd := exec.Command(filepath.Join(bin, "sh"), "-c", c)
		cmd.Dir, cmd.Env = work, []string{"PATH=" + bin}
		out, err := cmd.CombinedOutput()
		if err != nil || len(out) == 0 {
			t.Errorf("sh -c %q: %v, output %q: want status 0 and output", c, err, out)
		}
	}
}

// TestPoolKeeperStopsOnTERM runs the worker's idle process of a warm
// container (worker.DefaultPoolKeeper) with megaflow-sh as sh and sleep,
// as docker stop does to it: SIGTERM must end it at once with status 0.
func TestPoolKeeperStopsOnTERM(t *testing.T) {
	bin := build(t)
	k := worker.DefaultPoolKeeper
	if len(k) != 3 || k[0] != "sh" || k[1] != "-c" || !strings.HasPrefix(k[2], `trap "exit 0" TERM;`) {
		t.Fatalf("DefaultPoolKeeper %q: want sh -c 'trap \"exit 0\" TERM; ...': update this test", k)
	}
	// "ready" once the trap is set, so the signal cannot come before it.
	script := strings.Replace(k[2], ";", "; echo ready;", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, k[0]), k[1], script)
	cmd.Env = []string{"PATH=" + bin}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("keeper printed %q, %v; want ready", line, err)
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		t.Fatalf("keeper after SIGTERM: %v; want status 0", err)
	case err != nil:
		t.Fatal(err)
	case time.Since(start) > 2*time.Second:
		t.Errorf("keeper took %v to stop; want well under 2 s", time.Since(start))
	}
}
