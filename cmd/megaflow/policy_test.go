package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/head"
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

// On a cluster whose ACLs were bootstrapped `policy get` names the built-in
// default for clusters with ACLs and its user 65534:65534; a refusal names
// it too; `policy set T` without --user warns that T's containers now run
// as the image's user; `policy set --cluster --user 0:0` makes root the
// cluster's; setting a tenant to the nobody default removes its row.
func TestCLIPolicyWithACL(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) { cfg.ACL = true }})
	heads := "--heads=" + strings.Join(c.GRPCAddrs(), ",")
	code, out, errOut := cli(t, heads, "acl", "bootstrap")
	m := regexp.MustCompile(`secret: +(mft_[0-9a-f]{64})`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("acl bootstrap: %d %q %q", code, out, errOut)
	}
	t.Setenv("MEGAFLOW_TOKEN", m[1])
	var getOut string
	testcluster.WaitFor(t, 30*time.Second, "policy get to show the default for clusters with ACLs (rules 7)", func() bool {
		code, getOut, _ = cli(t, heads, "policy", "get", "team-a")
		return code == 0 && regexp.MustCompile(`from +the built-in default policy for clusters with ACLs`).MatchString(getOut)
	})
	if !regexp.MustCompile(`user +65534:65534`).MatchString(getOut) {
		t.Fatalf("policy get: %q; want user 65534:65534", getOut)
	}
	file := filepath.Join(t.TempDir(), "host.yaml")
	if err := os.WriteFile(file, []byte("id: h1\ntenant: team-a\ntasks:\n  - {name: a, image: img, command: [\"true\"], network: host}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut = cli(t, heads, "submit", file); code == 0 || !strings.Contains(errOut, "the built-in default policy for clusters with ACLs") ||
		!strings.Contains(errOut, "(allowed: none)") || !strings.Contains(errOut, "megaflow policy set team-a --allow-network host --user 65534:65534") {
		t.Fatalf("submit a host graph: %d %q", code, errOut)
	}
	code, out, errOut = cli(t, heads, "policy", "set", "team-a", "--allow-cap", "NET_ADMIN")
	if code != 0 || !strings.Contains(out, "set at index") || !strings.Contains(errOut, "ran containers as 65534:65534; it now runs them as the image's user") ||
		!strings.Contains(errOut, "allowed the networks none; without --allow-network it now allows '*'") {
		t.Fatalf("policy set without --user and --allow-network: %d %q %q; want notes that the user is dropped and the networks widened", code, out, errOut)
	}
	if code, out, errOut = cli(t, heads, "policy", "set", "team-a", "--allow-network", "none", "--user", "65534:65534"); code != 0 || !strings.Contains(out, "removed") || errOut != "" {
		t.Fatalf("policy set to the default with ACLs: %d %q %q; want the row removed", code, out, errOut)
	}
	if code, out, errOut = cli(t, heads, "policy", "set", "--cluster", "--user", "0:0"); code != 0 || strings.Contains(out, "removed") {
		t.Fatalf("policy set --cluster --user 0:0: %d %q %q", code, out, errOut)
	}
	code, out, _ = cli(t, heads, "policy", "get", "team-a")
	if code != 0 || !regexp.MustCompile(`from +the cluster policy`).MatchString(out) || !regexp.MustCompile(`user +0:0`).MatchString(out) {
		t.Fatalf("policy get after --cluster --user 0:0: %d %q", code, out)
	}
}
