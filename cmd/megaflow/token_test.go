package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/testcluster"
)

// `megaflow acl bootstrap` prints the first admin token once and refuses a
// second; `token create` prints a token's secret (--token and
// MEGAFLOW_TOKEN pass one), `token list` shows it without a secret, `token
// revoke` removes it, after which its calls are refused saying so; a
// command without a token says how to pass one; bad flags fail before
// anything is sent.
func TestCLITokens(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) { cfg.ACL = true }})
	heads := "--heads=" + strings.Join(c.GRPCAddrs(), ",")
	secretRe := regexp.MustCompile(`secret: +(mft_[0-9a-f]{64})`)
	accRe := regexp.MustCompile(`accessor: +([0-9a-f]{16})`)

	code, out, errOut := cli(t, heads, "acl", "bootstrap")
	m := secretRe.FindStringSubmatch(out)
	if code != 0 || m == nil || !strings.Contains(out, "role:     admin") || !strings.Contains(errOut, "shown this once") {
		t.Fatalf("acl bootstrap: %d %q %q", code, out, errOut)
	}
	admin := m[1]
	if code, _, errOut = cli(t, heads, "acl", "bootstrap"); code == 0 || !strings.Contains(errOut, "bootstrapped already") {
		t.Fatalf("second bootstrap: %d %q", code, errOut)
	}
	if code, _, errOut = cli(t, heads, "graphs"); code == 0 || !strings.Contains(errOut, "--token or MEGAFLOW_TOKEN") {
		t.Fatalf("graphs without a token: %d %q", code, errOut)
	}
	code, out, errOut = cli(t, heads, "--token", admin, "token", "create", "--tenant", "team-a", "--role", "read", "--ttl", "1h")
	m, acc := secretRe.FindStringSubmatch(out), accRe.FindStringSubmatch(out)
	if code != 0 || m == nil || acc == nil || !strings.Contains(out, "tenant:   team-a") {
		t.Fatalf("token create: %d %q %q", code, out, errOut)
	}
	reader, readerAcc := m[1], acc[1]
	t.Setenv("MEGAFLOW_TOKEN", admin)
	code, out, errOut = cli(t, heads, "token", "list")
	if code != 0 || !regexp.MustCompile(readerAcc+` +team-a +read +\S+ +\S+`).MatchString(out) || strings.Contains(out, "mft_") {
		t.Fatalf("token list: %d %q %q", code, out, errOut)
	}
	t.Setenv("MEGAFLOW_TOKEN", reader)
	if code, _, errOut = cli(t, heads, "quota"); code == 0 || !strings.Contains(errOut, "needs role admin; your token (accessor "+readerAcc[:8]) {
		t.Fatalf("quota ls with a read token: %d %q", code, errOut)
	}
	if code, out, errOut = cli(t, heads, "graphs"); code != 0 {
		t.Fatalf("graphs with a read token: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = cli(t, heads, "--token", admin, "token", "revoke", readerAcc); code != 0 || !strings.Contains(out, "revoked token "+readerAcc) {
		t.Fatalf("token revoke: %d %q %q", code, out, errOut)
	}
	if code, _, errOut = cli(t, heads, "graphs"); code == 0 || !strings.Contains(errOut, "not one this cluster knows") {
		t.Fatalf("graphs with the revoked token: %d %q", code, errOut)
	}
	for _, args := range [][]string{
		{"token", "create", "--role", "root"},
		{"token", "create", "--role", "read"},
		{"token", "create", "--role", "admin", "--tenant", "a"},
		{"token", "create", "--role", "read", "--tenant", "a", "--ttl", "1s"},
		{"token", "revoke"},
	} {
		if code, _, errOut := cli(t, append([]string{heads, "--token", admin}, args...)...); code != exitUsage {
			t.Errorf("%v: exit %d %q; want %d", args, code, errOut, exitUsage)
		}
	}
}
