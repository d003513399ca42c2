package shellbox

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// repo lays out the files megaflow-agent's setup writes, under dir/repo.
func repo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"repo/README":       "repository o/r\n",
		"repo/core.py":      "def apply(x):\n    # TODO: handle None\n    return x + 1\n",
		"repo/util.py":      "def helper(y):\n    return y * 2\n",
		"repo/sub/deep.txt": "a (literal) b\nplain\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// sh runs script with the shell in dir and returns its status and output.
func sh(t *testing.T, dir, script string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code := Main(ctx, []string{"sh", "-c", script}, dir, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb}, nil)
	return code, out.String(), errb.String()
}

func TestTools(t *testing.T) {
	dir := repo(t)
	for _, tc := range []struct {
		script, want string
		code         int
	}{
		{"find repo -type f | head -20", "repo/README\nrepo/core.py\nrepo/sub/deep.txt\nrepo/util.py\n", 0},
		{"find repo -maxdepth 1 -type d", "repo\nrepo/sub\n", 0},
		{"find . -name '*.py'", "./repo/core.py\n./repo/util.py\n", 0},
		{"grep -rn def repo | head -5", "repo/core.py:1:def apply(x):\nrepo/util.py:1:def helper(y):\n", 0},
		{"grep -rn TODO repo | head -3", "repo/core.py:2:    # TODO: handle None\n", 0},
		{"grep -c return repo/core.py repo/util.py", "repo/core.py:1\nrepo/util.py:1\n", 0},
		{"grep '(literal)' repo/sub/deep.txt", "a (literal) b\n", 0},
		{"grep -E 'pl(ai)n' repo/sub/deep.txt", "plain\n", 0},
		{"grep 'a\\(pp\\)ly' repo/core.py", "def apply(x):\n", 0},
		{"grep -iv DEF repo/util.py", "    return y * 2\n", 0},
		{"grep -l None -r repo", "repo/core.py\n", 0},
		{"grep nothing repo/core.py", "", 1},
		{"grep x nowhere", "", 2},
		{"wc -l repo/*.py", "      3 repo/core.py\n      2 repo/util.py\n      5 total\n", 0},
		{"wc -l < repo/core.py", "3\n", 0},
		{"cat repo/README", "repository o/r\n", 0},
		{"echo '# fix' >> repo/patch.diff && cat repo/patch.diff | wc -l", "1\n", 0},
		{"head -n 1 repo/core.py; head -2 repo/util.py | tail -1", "def apply(x):\n    return y * 2\n", 0},
		{"tail -n 1 repo/core.py", "    return x + 1\n", 0},
		{"ls repo", "README\ncore.py\npatch.diff\nsub\nutil.py\n", 0},
		{"cd repo && ls -d sub && ls sub", "sub\ndeep.txt\n", 0},
		{"mkdir -p a/b && touch a/b/f && ls a/b && rm -r a && ls a", "f\n", 2},
		{"sleep 0.01 && sleep 0 & wait; echo done", "done\n", 0},
		{"true && ! false && echo ok", "ok\n", 0},
		{"ls -z", "", 2},
	} {
		code, out, errs := sh(t, dir, tc.script)
		if code != tc.code || out != tc.want {
			t.Errorf("%s: status %d, output %q (stderr %q); want %d, %q", tc.script, code, out, errs, tc.code, tc.want)
		}
	}
}

func TestLsLong(t *testing.T) {
	dir := repo(t)
	code, out, errs := sh(t, dir, "ls -la repo")
	if code != 0 {
		t.Fatalf("ls -la: status %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "total ") || len(lines) != 1+2+4 {
		t.Fatalf("ls -la repo:\n%s\nwant a total line, . and .., and 4 entries", out)
	}
	for i, want := range map[int]string{1: "drwx", 3: "-rw-r--r--"} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %q: want mode %s", lines[i], want)
		}
	}
	if !strings.HasSuffix(lines[3], " README") || !strings.Contains(lines[3], " 15 ") {
		t.Errorf("line %q: want README's size 15 and its name", lines[3])
	}
}

func TestModeString(t *testing.T) {
	for m, want := range map[os.FileMode]string{
		0o644:                  "-rw-r--r--",
		os.ModeDir | 0o755:     "drwxr-xr-x",
		os.ModeSymlink | 0o777: "lrwxrwxrwx",
		os.ModeSetuid | 0o755:  "-rwsr-xr-x",
		os.ModeDir | os.ModeSticky | 0o1777&^0o1000 | 0o777: "drwxrwxrwt",
		os.ModeSetgid | 0o644:                               "-rw-r-Sr--",
	} {
		if got := modeString(m); got != want {
			t.Errorf("modeString(%v) = %s, want %s", m, got, want)
		}
	}
}

func TestBasicToGo(t *testing.T) {
	for in, want := range map[string]string{
		`def`:        `def`,
		`a(b)`:       `a\(b\)`,
		`a\(b\)`:     `a(b)`,
		`x\|y`:       `x|y`,
		`a+?{1}`:     `a\+\?\{1\}`,
		`a\{2\}\.\*`: `a{2}\.\*`,
	} {
		if got := basicToGo(in); got != want {
			t.Errorf("basicToGo(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGetoptErrorsNameTheOption(t *testing.T) {
	dir := t.TempDir()
	for script, want := range map[string]string{
		"head -n":        "head: option -n needs a value",
		"wc -q x":        "wc: unknown option -q (this wc knows -l -w -c -m)",
		"sleep":          "sleep: missing operand",
		"sleep 1y":       `sleep: invalid time interval "1y"`,
		"find . -size 1": "find: unknown primary -size",
	} {
		code, _, errs := sh(t, dir, script)
		if code != 2 || !strings.Contains(errs, want) {
			t.Errorf("%s: status %d, stderr %q; want 2 and %q", script, code, errs, want)
		}
	}
}

// TestTrapEndsTheScript: a trapped signal stops what runs (a sleep in the
// background included) and the trap's action sets the status; an
// untrapped one exits 128+n; a signal trapped with "" is ignored.
func TestTrapEndsTheScript(t *testing.T) {
	for _, tc := range []struct {
		script string
		sigs   []os.Signal
		code   int
		out    string
	}{
		{`trap "exit 0" TERM; echo ready; while :; do sleep 3600 & wait; done`, []os.Signal{syscall.SIGTERM}, 0, "ready\n"},
		{`trap 'echo bye; exit 3' INT; echo ready; sleep 3600`, []os.Signal{syscall.SIGINT}, 3, "ready\nbye\n"},
		{`trap 'exit 4' SIGTERM 15; echo ready; sleep infinity`, []os.Signal{syscall.SIGTERM}, 4, "ready\n"},
		{`echo ready; sleep 3600`, []os.Signal{syscall.SIGTERM}, 143, "ready\n"},
		{`trap "" HUP; trap "exit 5" TERM; echo ready; sleep 3600`, []os.Signal{syscall.SIGHUP, syscall.SIGTERM}, 5, "ready\n"},
	} {
		sig := make(chan os.Signal)
		pr, pw, _ := os.Pipe()
		var out bytes.Buffer
		done := make(chan int, 1)
		go func() {
			done <- Main(context.Background(), []string{"sh", "-c", tc.script}, t.TempDir(), IO{Stdout: pw, Stderr: os.Stderr}, sig)
			pw.Close()
		}()
		br := bufio.NewReader(pr)
		if line, err := br.ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("%s: read %q, %v; want ready", tc.script, line, err)
		}
		out.WriteString("ready\n")
		for _, s := range tc.sigs {
			select {
			case sig <- s:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: the shell did not take signal %v within 5 s", tc.script, s)
			}
		}
		var code int
		select {
		case code = <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: still running 5 s after %v", tc.script, tc.sigs)
		}
		rest, _ := io.ReadAll(br)
		out.Write(rest)
		if code != tc.code || out.String() != tc.out {
			t.Errorf("%s: status %d, output %q; want %d, %q", tc.script, code, out.String(), tc.code, tc.out)
		}
	}
}

func TestMainDispatch(t *testing.T) {
	var out, errb bytes.Buffer
	stdio := IO{Stdout: &out, Stderr: &errb}
	if code := Main(context.Background(), []string{"/bin/megaflow-sh", "--list"}, "", stdio, nil); code != 0 || !strings.HasPrefix(out.String(), "sh\ncat\n") {
		t.Errorf("--list: status %d, output %q", code, out.String())
	}
	out.Reset()
	if code := Main(context.Background(), []string{"/bin/echo", "a", "b"}, "", stdio, nil); code != 0 || out.String() != "a b\n" {
		t.Errorf("echo a b: status %d, output %q", code, out.String())
	}
	out.Reset()
	if code := Main(context.Background(), []string{"megaflow-sh", "-c", "echo $1", "x", "y"}, "", stdio, nil); code != 0 || out.String() != "y\n" {
		t.Errorf("megaflow-sh -c 'echo $1' x y: status %d, output %q", code, out.String())
	}
	if code := Main(context.Background(), []string{"vi"}, "", stdio, nil); code != 127 || !strings.Contains(errb.String(), `no program "vi"`) {
		t.Errorf("vi: status %d, stderr %q; want 127 and a note", code, errb.String())
	}
}
