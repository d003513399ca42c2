package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/testbin"
)

func TestFrom(t *testing.T) {
	const sha = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
	vcs := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/megaflow/megaflow", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: sha}, {Key: "vcs.time", Value: "2026-11-30T08:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	tagged := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.5.0"}}
	for _, tc := range []struct {
		name                   string
		bi                     *debug.BuildInfo
		ldVersion, ldCommit, d string
		want                   Info
		short, str             string
	}{
		{"ldflags win over build info", vcs, "v0.5.0", "abc", "2026-12-01T10:00:00Z",
			Info{Version: "v0.5.0", Commit: "abc", Date: "2026-12-01T10:00:00Z", Go: "go1.26.8", Modified: true},
			"v0.5.0", "v0.5.0 (commit abc with local changes, built 2026-12-01T10:00:00Z, go1.26.8)"},
		{"VCS stamp only", vcs, "", "", "",
			Info{Version: Devel, Commit: sha, Date: "2026-11-30T08:00:00Z", Go: "go1.26.8", Modified: true},
			"(devel)+1a2b3c4d5e6f", "(devel) (commit 1a2b3c4d5e6f with local changes, built 2026-11-30T08:00:00Z, go1.26.8)"},
		{"go install of a tag", tagged, "", "", "", Info{Version: "v0.5.0", Go: "go1.26.8"}, "v0.5.0", "v0.5.0 (go1.26.8)"},
		{"dirty describe", nil, "v0.5.0-2-gabc-dirty", "abc", "",
			Info{Version: "v0.5.0-2-gabc-dirty", Commit: "abc", Go: runtime.Version(), Modified: true},
			"v0.5.0-2-gabc-dirty", "v0.5.0-2-gabc-dirty (commit abc, " + runtime.Version() + ")"},
		{"nothing known", nil, "", "", "", Info{Version: Devel, Go: runtime.Version()}, Devel, "(devel) (" + runtime.Version() + ")"},
	} {
		got := from(tc.bi, tc.ldVersion, tc.ldCommit, tc.d)
		if got != tc.want || got.Short() != tc.short || got.String() != tc.str {
			t.Errorf("%s: got %+v, %q, %q; want %+v, %q, %q", tc.name, got, got.Short(), got.String(), tc.want, tc.short, tc.str)
		}
	}
}

// TestEveryBinaryPrintsItsVersion builds every binary of cmd/ in one go
// build with the Makefile's -X flags and wants --version to print the
// binary's name and the values set, and megaflow-head's the FSM rules
// version it applies (which fsm.ErrRulesTooNew's message points to).
// Under `make test` ($MEGAFLOW_BIN_DIR set) it checks make build's
// binaries instead, stamped by the Makefile itself.
func TestEveryBinaryPrintsItsVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("links every binary (a minute on 2 cores)")
	}
	cmds, err := filepath.Glob("../../cmd/*/main.go")
	if err != nil || len(cmds) < 5 {
		t.Fatalf("cmd/*/main.go: %v, %d binaries", err, len(cmds))
	}
	if dir := os.Getenv(testbin.EnvDir); dir != "" {
		checkBuiltVersions(t, dir, cmds)
		return
	}
	dir := t.TempDir()
	const pkg = "github.com/megaflow/megaflow/internal/version"
	ld := "-X " + pkg + ".version=v9.8.7 -X " + pkg + ".commit=0123456789abcdef -X " + pkg + ".date=2026-12-01T10:00:00Z"
	b := exec.Command("go", "build", "-ldflags", ld, "-o", dir+"/", "./cmd/...")
	b.Dir = "../.."
	if out, err := b.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/...: %v\n%s", err, out)
	}
	for _, c := range cmds {
		name := filepath.Base(filepath.Dir(c))
		out, err := exec.Command(filepath.Join(dir, name), "--version").CombinedOutput()
		want := name + " v9.8.7 (commit 0123456789ab, built 2026-12-01T10:00:00Z, " + runtime.Version() + ")"
		if name == "megaflow-head" { // the FSM rules it applies (head/fsm.RulesCurrent)
			want += ", rules " + strconv.FormatUint(fsm.RulesCurrent, 10)
		}
		want += "\n"
		if err != nil || string(out) != want {
			t.Errorf("%s --version: %v, %q; want %q", name, err, out, want)
		}
	}
}

// checkBuiltVersions checks the binaries `make build` put in dir (what
// `make test` hands the tests, internal/testbin), stamped with the
// Makefile's -X flags: each command of cmds found there prints its name,
// a version, a commit and an RFC 3339 build date, and those `make build`
// builds (the Makefile's CMDS; at least five must be there) this
// checkout's commit. Another target's binary (make bench-build's
// megaflow-bench) may be from an earlier commit.
func checkBuiltVersions(t *testing.T, dir string, cmds []string) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil || len(head) < 12 {
		t.Skipf("git rev-parse HEAD: %v: cannot tell the commit make build stamped", err)
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CMDS\s*:=\s*(.+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no CMDS := line, the commands make build builds")
	}
	built := map[string]bool{}
	for _, c := range strings.Fields(string(m[1])) {
		built[c] = true
	}
	found := 0
	for _, c := range cmds {
		name := filepath.Base(filepath.Dir(c))
		bin := filepath.Join(dir, name)
		if _, err := os.Stat(bin); err != nil {
			continue
		}
		commit := `[0-9a-f]{12}`
		if built[name] {
			found++
			commit = string(head[:12])
		}
		out, err := exec.Command(bin, "--version").CombinedOutput()
		rules := ""
		if name == "megaflow-head" {
			rules = ", rules " + strconv.FormatUint(fsm.RulesCurrent, 10)
		}
		want := regexp.MustCompile("^" + regexp.QuoteMeta(name) + ` v\S+ \(commit ` + commit +
			`( with local changes)?, built \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, ` + regexp.QuoteMeta(runtime.Version()) + `\)` +
			regexp.QuoteMeta(rules) + "\n$")
		if err != nil || !want.Match(out) {
			t.Errorf("%s --version: %v, %q; want %s", bin, err, out, want)
		}
	}
	if found < 5 {
		t.Errorf("%s holds %d of the commands of cmd/; want at least 5: run make build", dir, found)
	}
}
