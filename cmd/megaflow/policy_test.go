package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/testcluster"
)

// `megaflow policy`: a host-network graph is refused by the default
// policy with the command that allows it; `policy set` with that command
// allows it; `policy get` says where a tenant's policy comes from; `policy
// ls` lists the rows; setting the default removes a row; bad flags fail
// before anything is sent.
func TestCLIPolicy(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	heads := "--heads=" + strings.Join(c.GRPCAddrs(), ",")
	file := filepath.Join(t.TempDir(), "host.yaml")
	if err := os.WriteFile(file, []byte("id: h1\ntenant: team-a\ntasks:\n  - {name: a, image: img, command: [\"true\"], network: host}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := cli(t, heads, "submit", file)
	if code == 0 || !strings.Contains(errOut, `network "host" is not allowed by the built-in default policy`) ||
		!strings.Contains(errOut, "megaflow policy set team-a --allow-network '*' --allow-network host") {
		t.Fatalf("submit a host graph: %d %q", code, errOut)
	}
	code, out, errOut := cli(t, heads, "policy", "get", "team-a")
	if code != 0 || !regexp.MustCompile(`from +the built-in default policy`).MatchString(out) || !regexp.MustCompile(`networks +none,\*`).MatchString(out) {
		t.Fatalf("policy get: %d %q %q", code, out, errOut)
	}
	code, out, errOut = cli(t, heads, "policy", "set", "team-a", "--allow-network", "*", "--allow-network", "host", "--allow-cap", "CAP_NET_ADMIN")
	if code != 0 || !strings.Contains(out, "admission policy of tenant team-a set at index") {
		t.Fatalf("policy set: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = cli(t, heads, "submit", file); code != 0 {
		t.Fatalf("submit once allowed: %d %q %q", code, out, errOut)
	}
	code, out, errOut = cli(t, heads, "policy", "set", "--cluster", "--user", "65534:65534", "--read-only-root", "--max-pids", "4096")
	if code != 0 || !strings.Contains(out, "admission policy of the cluster row set") {
		t.Fatalf("policy set --cluster: %d %q %q", code, out, errOut)
	}
	code, out, _ = cli(t, heads, "policy", "get", "team-b")
	if code != 0 || !regexp.MustCompile(`from +the cluster policy`).MatchString(out) || !regexp.MustCompile(`user +65534:65534`).MatchString(out) {
		t.Fatalf("policy get team-b: %d %q", code, out)
	}
	code, out, _ = cli(t, heads, "policy", "ls")
	if code != 0 || !regexp.MustCompile(`(?s)\(cluster\) +none,\* +- +true +65534:65534 +4096.*team-a +none,\*,host +NET_ADMIN +false +- +-`).MatchString(out) {
		t.Fatalf("policy ls: %d %q", code, out)
	}
	code, out, _ = cli(t, heads, "policy", "set", "team-a")
	if code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("policy set team-a (the default): %d %q", code, out)
	}
	for _, args := range [][]string{
		{"policy", "set"},
		{"policy", "set", "team-a", "--cluster"},
		{"policy", "set", "team-a", "--user", "root"},
		{"policy", "set", "team-a", "--max-pids", "-1"},
		{"policy", "set", "team-a", "--allow-network", "container:x"},
	} {
		if code, _, errOut := cli(t, append([]string{heads}, args...)...); code == 0 || errOut == "" {
			t.Fatalf("%v: %d %q; want an error", args, code, errOut)
		}
	}
}
