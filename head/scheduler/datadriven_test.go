package scheduler

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rewrite regenerates the expected output of scenario files:
//
//	go test ./head/scheduler -rewrite
var rewrite = flag.Bool("rewrite", false, "rewrite the expected output in testdata/*.txt")

// A scenario file is a list of blocks in the style of etcd-io/raft's
// datadriven tests:
//
//	# comments and blank lines between blocks are kept
//	command arg key=value ...
//	----
//	expected output, up to a blank line or the end of the file
//
// The output must have no blank line of its own.
type block struct {
	pre  []string // comment and blank lines before the command
	line int      // line number of the command, from 1
	cmd  string
	want string
}

func parseBlocks(t *testing.T, path string) (blocks []block, tail []string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	var pre []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			continue
		}
		b := block{pre: pre, line: i + 1, cmd: l}
		pre = nil
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: %q is not followed by ----", path, i+1, l)
		}
		i += 2
		var out []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			out = append(out, lines[i])
		}
		b.want = strings.Join(out, "\n")
		blocks = append(blocks, b)
	}
	return blocks, pre
}

// runScenario runs every block of path through do, comparing or, with
// -rewrite, regenerating the expected output.
func runScenario(t *testing.T, path string, do func(cmd string) (string, error)) {
	blocks, tail := parseBlocks(t, path)
	var out strings.Builder
	for _, b := range blocks {
		got, err := do(b.cmd)
		if err != nil {
			// A script error is output too, so that a scenario can show one.
			got = "error: " + err.Error()
		}
		got = strings.TrimRight(got, "\n")
		if strings.Contains(got, "\n\n") {
			t.Fatalf("%s:%d: output has a blank line:\n%s", path, b.line, got)
		}
		if !*rewrite && got != b.want {
			t.Errorf("%s:%d: %s\n--- want\n%s\n--- got\n%s", path, b.line, b.cmd, b.want, got)
		}
		for _, l := range b.pre {
			out.WriteString(l + "\n")
		}
		out.WriteString(b.cmd + "\n----\n")
		if got != "" {
			out.WriteString(got + "\n")
		}
		out.WriteString("\n")
	}
	for _, l := range tail {
		out.WriteString(l + "\n")
	}
	if *rewrite {
		s := strings.TrimRight(out.String(), "\n") + "\n"
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			s := newSim()
			runScenario(t, f, s.do)
		})
	}
}

// args splits "cmd a b k=v" into its positional arguments and key=value
// pairs (a value may itself hold '=', as in labels=zone=a).
func args(fields []string) (pos []string, kv map[string]string) {
	kv = map[string]string{}
	for _, f := range fields {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, f)
		}
	}
	return pos, kv
}

func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }
