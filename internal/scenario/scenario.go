// Package scenario runs datadriven scenario files for tests, in the style
// of etcd-io/raft's: each block is a command line, a "----" line and the
// expected output, up to a blank line or the end of the file; comment and
// blank lines between blocks are kept. head/scheduler's placement
// scenarios and head's leader scenarios use it. Only tests import it.
package scenario

import (
	"os"
	"strings"
	"testing"
)

// block is one command of a scenario and its expected output.
type block struct {
	pre  []string // comment and blank lines before the command
	line int      // line number of the command, from 1
	cmd  string
	want string
}

func parse(t *testing.T, path string) (blocks []block, tail []string) {
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

// Run runs every block of the file at path through do and compares its
// output with the block's; with rewrite, it writes the file back with the
// outputs do gave instead. An error from do is output too ("error: ..."),
// so a scenario can show one. An output may not hold a blank line.
func Run(t *testing.T, path string, rewrite bool, do func(cmd string) (string, error)) {
	t.Helper()
	blocks, tail := parse(t, path)
	var out strings.Builder
	for _, b := range blocks {
		got, err := do(b.cmd)
		if err != nil {
			got = "error: " + err.Error()
		}
		got = strings.TrimRight(got, "\n")
		if strings.Contains(got, "\n\n") {
			t.Fatalf("%s:%d: output has a blank line:\n%s", path, b.line, got)
		}
		if !rewrite && got != b.want {
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
	if rewrite {
		s := strings.TrimRight(out.String(), "\n") + "\n"
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Args splits a command's fields after its name into positional arguments
// and key=value pairs (a value may itself hold '=', as in labels=zone=a).
func Args(fields []string) (pos []string, kv map[string]string) {
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
