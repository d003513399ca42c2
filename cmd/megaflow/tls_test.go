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
// loads as that role (a head's and a worker's naming their node), keys
// with mode 0600; it refuses to overwrite without --force and refuses bad
// usage with exit code 2: a head or worker without --node-id, a client
// with one, a node id the daemons would refuse, a wildcard --host.
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
		args := []string{"tls", "cert", "create", "--" + string(role), "--ca", ca, "--ca-key", caKey, "--dir", dir, "--name", name, "--host", "127.0.0.1,node.example"}
		if role != tlsconfig.RoleClient {
			args = append(args, "--node-id", name)
		}
		code, out := cli(args...)
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
		if id, err := tlsconfig.NodeOf(s.Certificate(), role); role != tlsconfig.RoleClient && (err != nil || id != name || !strings.Contains(out, role.NodeName(name))) {
			t.Fatalf("%s certificate names node %q, %v (printed %q); want %s", role, id, err, out, name)
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
		{"tls", "cert", "create", "--head", "--worker", "--node-id", "x", "--ca", ca, "--ca-key", caKey, "--dir", dir, "--name", "x"},
		{"tls", "cert", "create", "--ca", ca, "--ca-key", caKey, "--dir", dir, "--name", "x"},
		{"tls", "cert", "create", "--head", "--node-id", "x", "--ca", ca, "--dir", dir, "--name", "x"},
		{"tls", "cert", "create", "--head", "--node-id", "x", "--ca", ca, "--ca-key", caKey, "--dir", dir, "--name", "../x"},
		{"tls", "cert", "create", "--head", "--node-id", "x", "--ca", ca, "--ca-key", caKey, "--dir", dir, "--name", "x", "--validity", "1m"},
		{"tls", "cert", "create", "--worker", "--ca", ca, "--ca-key", caKey, "--dir", dir, "--name", "x"},
		{"tls", "cert", "create", "--head", "--ca", ca, "--ca-key", caKey, "--dir", dir, "--name", "x"},
		{"tls", "cert", "create", "--client", "--node-id", "x", "--ca", ca, "--ca-key", caKey, "--dir", dir, "--name", "x"},
		{"tls", "cert", "create", "--worker", "--node-id", "w/1", "--ca", ca, "--ca-key", caKey, "--dir", dir, "--name", "x"},
		{"tls", "cert", "create", "--worker", "--node-id", "x", "--ca", ca, "--ca-key", caKey, "--dir", dir, "--name", "x", "--host", "*.megaflow"},
		{"tls", "cert", "create", "--worker", "--node-id", "x", "--ca", ca, "--ca-key", caKey, "--dir", dir, "--name", "x", "--host", "w2.worker.megaflow"},
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
