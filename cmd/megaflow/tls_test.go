package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/tlsconfig"
)

// megaflow tls makes a working set: a CA, one certificate per role that
// loads as that role, keys with mode 0600; it refuses to overwrite
// without --force and refuses bad usage with exit code 2.
func TestTLSCommands(t *testing.T) {
	dir := t.TempDir()
	cli := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := cli("tls", "ca", "create", "--dir", dir); code != 0 {
		t.Fatalf("ca create: %d %s", code, out)
	}
	ca, caKey := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	for _, role := range tlsconfig.Roles {
		name := string(role) + "1"
		code, out := cli("tls", "cert", "create", "--"+string(role), "--ca", ca, "--ca-key", caKey, "--dir", dir, "--name", name, "--host", "127.0.0.1,node.example")
		if code != 0 {
			t.Fatalf("cert create --%s: %d %s", role, code, out)
		}
		s, err := tlsconfig.Load(tlsconfig.Files{CA: ca, Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem")}, role)
		if err != nil {
			t.Fatalf("load the %s certificate: %v", role, err)
		}
		if s.Role() != role {
			t.Fatalf("%s certificate has role %s", role, s.Role())
		}
		if fi, err := os.Stat(filepath.Join(dir, name+"-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("key mode: %v %v", fi.Mode(), err)
		}
	}
	before, _ := os.ReadFile(ca)
	if code, out := cli("tls", "ca", "create", "--dir", dir); code != 1 || !strings.Contains(out, "--force") {
		t.Fatalf("second ca create: %d %s; want a refusal naming --force", code, out)
	}
	if after, _ := os.ReadFile(ca); !bytes.Equal(before, after) {
		t.Fatal("a refused ca create changed ca.pem")
	}
	if code, out := cli("tls", "ca", "create", "--dir", dir, "--force"); code != 0 {
		t.Fatalf("ca create --force: %d %s", code, out)
	}
	for _, args := range [][]string{
		{"tls", "cert", "create", "--head", "--worker", "--ca", ca, "--ca-key", caKey, "--dir", dir, "--name", "x"},
		{"tls", "cert", "create", "--ca", ca, "--ca-key", caKey, "--dir", dir, "--name", "x"},
		{"tls", "cert", "create", "--head", "--ca", ca, "--dir", dir, "--name", "x"},
		{"tls", "cert", "create", "--head", "--ca", ca, "--ca-key", caKey, "--dir", dir, "--name", "../x"},
		{"tls", "cert", "create", "--head", "--ca", ca, "--ca-key", caKey, "--dir", dir, "--name", "x", "--validity", "1m"},
		{"tls", "ca", "create"},
		{"up", "--tls-ca", ca, "--tls-cert", ca, "--tls-key", caKey}, // the local cluster has no TLS
	} {
		if code, out := cli(args...); code != 2 {
			t.Errorf("%v: exit %d (%s); want 2", args, code, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.pem")); err == nil {
		t.Error("a refused cert create wrote x.pem")
	}
	code, out := cli("tls", "gossip-key")
	if code != 0 {
		t.Fatalf("gossip-key: %d %s", code, out)
	}
	// The key it prints is what --gossip-key takes.
	if len(strings.TrimSpace(out)) != 44 {
		t.Fatalf("gossip-key printed %q", out)
	}
}
