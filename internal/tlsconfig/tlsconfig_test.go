package tlsconfig_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/tlsconfig/tlstest"
)

func parse(t *testing.T, p tlsconfig.PEM) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(p.Cert)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRoleOf(t *testing.T) {
	cases := []struct {
		name  string
		dns   []string
		want  tlsconfig.Role
		error string
	}{
		{"head", []string{"head.megaflow", "h1.example.com"}, tlsconfig.RoleHead, ""},
		{"worker", []string{"worker.megaflow"}, tlsconfig.RoleWorker, ""},
		{"client upper case", []string{"CLIENT.MEGAFLOW"}, tlsconfig.RoleClient, ""},
		{"none", []string{"h1.example.com"}, "", "names no MegaFlow role"},
		{"no names", nil, "", "names no MegaFlow role"},
		{"two roles", []string{"head.megaflow", "worker.megaflow"}, "", "names 2 roles"},
		{"another domain", []string{"head.nomad"}, "", "names no MegaFlow role"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tlsconfig.RoleOf(&x509.Certificate{DNSNames: tc.dns})
			if tc.error != "" {
				if err == nil || !strings.Contains(err.Error(), tc.error) {
					t.Fatalf("RoleOf(%v) = %q, %v; want error %q", tc.dns, got, err, tc.error)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("RoleOf(%v) = %q, %v; want %q", tc.dns, got, err, tc.want)
			}
		})
	}
}

func TestCheckNode(t *testing.T) {
	W, H := tlsconfig.RoleWorker, tlsconfig.RoleHead
	cases := []struct {
		name  string
		dns   []string
		role  tlsconfig.Role
		id    string
		error string // "": accepted
	}{
		{"its own", []string{"worker.megaflow", "w1.worker.megaflow"}, W, "w1", ""},
		{"dotted id", []string{"worker.megaflow", "rack1.w1.worker.megaflow"}, W, "rack1.w1", ""},
		{"suffix in another case", []string{"WORKER.MEGAFLOW", "w1.Worker.Megaflow"}, W, "w1", ""},
		{"head", []string{"head.megaflow", "h1.head.megaflow"}, H, "h1", ""},
		{"another worker's", []string{"worker.megaflow", "w2.worker.megaflow"}, W, "w1", "is worker w2's (w2.worker.megaflow), not worker w1's"},
		{"id in another case", []string{"worker.megaflow", "W1.worker.megaflow"}, W, "w1", "is worker W1's"},
		{"made before node ids", []string{"worker.megaflow"}, W, "w1", "names no worker id (no DNS name w1.worker.megaflow)"},
		{"the reissue command", []string{"worker.megaflow"}, W, "w1", "megaflow tls cert create --worker --node-id w1"},
		{"a head's node name", []string{"worker.megaflow", "w1.head.megaflow"}, W, "w1", "names no worker id"},
		{"a wildcard", []string{"worker.megaflow", "*.worker.megaflow"}, W, "w1", "is worker *'s"},
		{"a prefix of the id", []string{"worker.megaflow", "w.worker.megaflow"}, W, "w1", "is worker w's"},
		{"the id under another name", []string{"worker.megaflow", "w1.worker.megaflow.example"}, W, "w1", "names no worker id"},
		{"no dot before the role", []string{"worker.megaflow", "w1worker.megaflow"}, W, "w1", "names no worker id"},
		{"two ids", []string{"worker.megaflow", "w1.worker.megaflow", "w2.worker.megaflow"}, W, "w1", "names 2 worker ids"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tlsconfig.CheckNode(&x509.Certificate{DNSNames: tc.dns}, tc.role, tc.id)
			if tc.error == "" {
				if err != nil {
					t.Fatalf("CheckNode(%v, %s, %s) = %v; want nil", tc.dns, tc.role, tc.id, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.error) {
				t.Fatalf("CheckNode(%v, %s, %s) = %v; want error %q", tc.dns, tc.role, tc.id, err, tc.error)
			}
		})
	}
}

func TestAuthorize(t *testing.T) {
	const (
		submit  = "/megaflow.v1.MegaflowService/SubmitGraph"
		quota   = "/megaflow.v1.OperatorService/SnapshotSave"
		sandbox = "/megaflow.v1.SandboxService/CreateSandbox"
		connect = "/megaflow.v1.WorkerService/Connect"
		exec    = "/megaflow.v1.SandboxWorkerService/Exec"
		health  = "/grpc.health.v1.Health/Check"
		refl    = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
		unknown = "/other.Service/Do"
		status  = "/megaflow.v1.MegaflowService/ClusterStatus"
	)
	cases := []struct {
		method string
		role   tlsconfig.Role
		ok     bool
	}{
		{submit, tlsconfig.RoleClient, true},
		{submit, tlsconfig.RoleHead, true}, // a follower forwarding
		{submit, tlsconfig.RoleWorker, false},
		{quota, tlsconfig.RoleClient, true},
		{quota, tlsconfig.RoleWorker, false},
		{sandbox, tlsconfig.RoleClient, true},
		{sandbox, tlsconfig.RoleWorker, false},
		{connect, tlsconfig.RoleWorker, true},
		{connect, tlsconfig.RoleClient, false},
		{connect, tlsconfig.RoleHead, false},
		{exec, tlsconfig.RoleHead, true},
		{exec, tlsconfig.RoleClient, false},
		{exec, tlsconfig.RoleWorker, false},
		{health, tlsconfig.RoleWorker, true},
		{health, tlsconfig.RoleClient, true},
		{refl, tlsconfig.RoleClient, true},
		{status, tlsconfig.RoleWorker, true}, // a worker asking who leads
		{status, tlsconfig.RoleClient, true},
		{unknown, tlsconfig.RoleHead, false},
		{"", tlsconfig.RoleHead, false},
	}
	for _, tc := range cases {
		err := tlsconfig.Authorize(tc.method, &x509.Certificate{DNSNames: []string{tc.role.ServerName()}})
		if (err == nil) != tc.ok {
			t.Errorf("Authorize(%q, %s) = %v; want ok %v", tc.method, tc.role, err, tc.ok)
		}
	}
}

func TestFilesValidate(t *testing.T) {
	cases := []struct {
		f       tlsconfig.Files
		missing string
	}{
		{tlsconfig.Files{}, ""},
		{tlsconfig.Files{CA: "a", Cert: "b", Key: "c"}, ""},
		{tlsconfig.Files{CA: "a"}, "--tls-cert, --tls-key missing"},
		{tlsconfig.Files{Cert: "b", Key: "c"}, "--tls-ca missing"},
		{tlsconfig.Files{CA: "a", Cert: "b"}, "--tls-key missing"},
	}
	for _, tc := range cases {
		err := tc.f.Validate()
		if (err == nil) != (tc.missing == "") || err != nil && !strings.Contains(err.Error(), tc.missing) {
			t.Errorf("%+v.Validate() = %v; want %q", tc.f, err, tc.missing)
		}
	}
}

func TestNewCertChecks(t *testing.T) {
	now := time.Now()
	ca, err := tlsconfig.NewCA(tlsconfig.CARequest{Now: now, Validity: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := tlsconfig.NewCert(ca, tlsconfig.CertRequest{Role: tlsconfig.RoleWorker, Name: "w1", NodeID: "w1", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	many := make([]string, tlsconfig.MaxHosts+1)
	for i := range many {
		many[i] = "h.example"
	}
	cases := []struct {
		name  string
		ca    tlsconfig.PEM
		req   tlsconfig.CertRequest
		error string
	}{
		{"unknown role", ca, tlsconfig.CertRequest{Role: "admin", Now: now}, "unknown role"},
		{"no time", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleHead, NodeID: "h1"}, "no current time"},
		{"too long", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleHead, NodeID: "h1", Now: now, Validity: 11 * 365 * 24 * time.Hour}, "must be in"},
		{"too short", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleHead, NodeID: "h1", Now: now, Validity: time.Minute}, "must be in"},
		{"too many hosts", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleHead, NodeID: "h1", Now: now, Hosts: many}, "at most"},
		{"role name as host", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleWorker, NodeID: "w1", Now: now, Hosts: []string{"head.megaflow"}}, "is a role name"},
		{"node name as host", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleWorker, NodeID: "w1", Now: now, Hosts: []string{"w2.Worker.megaflow"}}, "under the role name worker.megaflow"},
		{"wildcard host", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleWorker, NodeID: "w1", Now: now, Hosts: []string{"*.megaflow"}}, "is a wildcard"},
		{"wildcard worker host", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleWorker, NodeID: "w1", Now: now, Hosts: []string{"*.worker.megaflow"}}, "is a wildcard"},
		{"empty host", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleWorker, NodeID: "w1", Now: now, Hosts: []string{" "}}, "empty entry"},
		{"long name", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleWorker, NodeID: "w1", Now: now, Name: strings.Repeat("x", 65)}, "at most 64"},
		{"worker without node id", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleWorker, Now: now}, "pass --node-id"},
		{"head without node id", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleHead, Now: now}, "pass --node-id"},
		{"client with node id", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleClient, NodeID: "c1", Now: now}, "names no node"},
		{"node id with a slash", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleWorker, NodeID: "w/1", Now: now}, "has '/' at byte 1"},
		{"node id with a wildcard", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleWorker, NodeID: "*", Now: now}, "has '*' at byte 0"},
		{"node id starting with a dot", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleWorker, NodeID: ".w1", Now: now}, "must start with a letter or digit"},
		{"node id too long", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleHead, NodeID: strings.Repeat("h", 65), Now: now}, "the limit is 64"},
		{"leaf as CA", leaf, tlsconfig.CertRequest{Role: tlsconfig.RoleHead, NodeID: "h1", Now: now}, "not a CA"},
		{"expired CA", ca, tlsconfig.CertRequest{Role: tlsconfig.RoleHead, NodeID: "h1", Now: now.Add(72 * time.Hour)}, "expired"},
		{"key of another", tlsconfig.PEM{Cert: ca.Cert, Key: leaf.Key}, tlsconfig.CertRequest{Role: tlsconfig.RoleHead, NodeID: "h1", Now: now}, "does not belong"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tlsconfig.NewCert(tc.ca, tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.error) {
				t.Fatalf("NewCert = %v; want error %q", err, tc.error)
			}
		})
	}
	// What a good one holds: the role's name, the node's, the hosts,
	// bounded by the CA.
	p, err := tlsconfig.NewCert(ca, tlsconfig.CertRequest{Role: tlsconfig.RoleHead, Name: "h1", NodeID: "h1", Hosts: []string{"10.0.0.1", "h1.example"}, Now: now, Validity: 365 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c, cac := parse(t, p), parse(t, ca)
	if r, err := tlsconfig.RoleOf(c); err != nil || r != tlsconfig.RoleHead {
		t.Errorf("role %q, %v", r, err)
	}
	if len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(net.ParseIP("10.0.0.1")) || strings.Join(c.DNSNames, " ") != "head.megaflow h1.head.megaflow h1.example" {
		t.Errorf("names %v %v", c.DNSNames, c.IPAddresses)
	}
	if id, err := tlsconfig.NodeOf(c, tlsconfig.RoleHead); err != nil || id != "h1" {
		t.Errorf("NodeOf = %q, %v; want h1", id, err)
	}
	if !c.NotAfter.Equal(cac.NotAfter) {
		t.Errorf("NotAfter %s, want the CA's %s", c.NotAfter, cac.NotAfter)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool(cac), DNSName: "head.megaflow", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("verify: %v", err)
	}
	cl, _ := tlsconfig.NewCert(ca, tlsconfig.CertRequest{Role: tlsconfig.RoleClient, Now: now})
	if _, err := parse(t, cl).Verify(x509.VerifyOptions{Roots: pool(cac), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a client certificate verifies for server auth")
	}
}

func pool(c *x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c)
	return p
}

func TestWriteFilesRefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "a.pem"), filepath.Join(dir, "a-key.pem")
	first := tlsconfig.PEM{Cert: []byte("c1"), Key: []byte("k1")}
	if err := tlsconfig.WriteFiles(cert, key, first, false); err != nil {
		t.Fatal(err)
	}
	for path, mode := range map[string]os.FileMode{cert: 0o644, key: 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v, mode %v; want %v", path, err, fi.Mode().Perm(), mode)
		}
	}
	err := tlsconfig.WriteFiles(cert, key, tlsconfig.PEM{Cert: []byte("c2"), Key: []byte("k2")}, false)
	if err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second write: %v; want a refusal naming --force", err)
	}
	// Only the key there: still refused, and the cert is not written.
	_ = os.Remove(cert)
	if err := tlsconfig.WriteFiles(cert, key, tlsconfig.PEM{Cert: []byte("c2"), Key: []byte("k2")}, false); err == nil {
		t.Fatal("overwrote an existing key")
	}
	if _, err := os.Stat(cert); err == nil {
		t.Error("a refused write wrote the certificate")
	}
	if err := tlsconfig.WriteFiles(cert, key, tlsconfig.PEM{Cert: []byte("c2"), Key: []byte("k2")}, true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(key); string(b) != "k2" {
		t.Errorf("--force wrote %q", b)
	}
}

func TestLoadChecks(t *testing.T) {
	set := tlstest.New(t, t.TempDir())
	other := tlstest.New(t, t.TempDir())
	head := set.Issue(t, tlsconfig.RoleHead, "h1")
	worker := set.Issue(t, tlsconfig.RoleWorker, "w1")
	foreign := other.Issue(t, tlsconfig.RoleHead, "h9")
	cases := []struct {
		name    string
		files   tlsconfig.Files
		allowed []tlsconfig.Role
		error   string
	}{
		{"head as head", head, []tlsconfig.Role{tlsconfig.RoleHead}, ""},
		{"worker as head", worker, []tlsconfig.Role{tlsconfig.RoleHead}, "is a worker certificate"},
		{"another CA", tlsconfig.Files{CA: head.CA, Cert: foreign.Cert, Key: foreign.Key}, nil, "not valid under --tls-ca"},
		{"key of another", tlsconfig.Files{CA: head.CA, Cert: head.Cert, Key: worker.Key}, nil, "--tls-key"},
		{"missing CA", tlsconfig.Files{CA: head.CA + ".none", Cert: head.Cert, Key: head.Key}, nil, "--tls-ca"},
		{"CA is not PEM", tlsconfig.Files{CA: head.Key + "x", Cert: head.Cert, Key: head.Key}, nil, "--tls-ca"},
		{"partial", tlsconfig.Files{CA: head.CA}, nil, "missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tlsconfig.Load(tc.files, tc.allowed...)
			if tc.error == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.error) {
				t.Fatalf("Load = %v; want error %q", err, tc.error)
			}
		})
	}
}

// handshake runs a TLS handshake between a server holding srv (taking
// allowed) and a client holding cli that dials node (of role want; "":
// any), and returns the client's and the server's errors. The client
// reads after its handshake, as TLS 1.3 reports the server's refusal of
// its certificate then.
func handshake(t *testing.T, srv, cli *tlsconfig.Store, want tlsconfig.Role, node string, plaintext bool, allowed ...tlsconfig.Role) (clientErr, serverErr error) {
	t.Helper()
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		_ = b.SetDeadline(time.Now().Add(10 * time.Second))
		s := tls.Server(b, srv.ServerConfig(nil, allowed...))
		err := s.Handshake()
		if err == nil {
			_, err = s.Write([]byte("x"))
		}
		_ = s.Close()
		done <- err
	}()
	_ = a.SetDeadline(time.Now().Add(10 * time.Second))
	if plaintext {
		_, _ = a.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		_ = a.Close()
		return nil, <-done
	}
	c := tls.Client(a, cli.ClientConfigFor(want, node))
	clientErr = c.Handshake()
	if clientErr == nil {
		var buf [1]byte
		_, clientErr = c.Read(buf[:])
	}
	_ = c.Close()
	return clientErr, <-done
}

// tcpPair returns the two ends of a loopback TCP connection (buffered,
// unlike net.Pipe, so that each side's TLS writes do not wait for the
// other's reads).
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

func TestHandshakeChecksRolesAndCA(t *testing.T) {
	set := tlstest.New(t, t.TempDir())
	other := tlstest.New(t, t.TempDir())
	head := set.Store(t, tlsconfig.RoleHead, "h1")
	head2 := set.Store(t, tlsconfig.RoleHead, "h2")
	worker := set.Store(t, tlsconfig.RoleWorker, "w1")
	cli := set.Store(t, tlsconfig.RoleClient, "c1")
	foreignHead := other.Store(t, tlsconfig.RoleHead, "h9")
	H, W, C := tlsconfig.RoleHead, tlsconfig.RoleWorker, tlsconfig.RoleClient
	cases := []struct {
		name      string
		srv, cli  *tlsconfig.Store
		want      tlsconfig.Role // the role the client expects of the server
		allowed   []tlsconfig.Role
		plaintext bool
		ok        bool
	}{
		{"head to head (raft, forwarding)", head, head2, H, []tlsconfig.Role{H}, false, true},
		{"worker as a head to raft", head, worker, H, []tlsconfig.Role{H}, false, false},
		{"client as a head to raft", head, cli, H, []tlsconfig.Role{H}, false, false},
		{"worker server posing as a head", worker, head, H, []tlsconfig.Role{H}, false, false},
		{"head dials a worker's sandboxes", worker, head, W, []tlsconfig.Role{H}, false, true},
		{"client dials a worker's sandboxes", worker, cli, W, []tlsconfig.Role{H}, false, false},
		{"client to the API", head, cli, H, []tlsconfig.Role{H, W, C}, false, true},
		{"another cluster's head", head, foreignHead, H, []tlsconfig.Role{H}, false, false},
		{"a server of another cluster", foreignHead, head, H, []tlsconfig.Role{H}, false, false},
		{"plaintext", head, nil, H, []tlsconfig.Role{H, W, C}, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ce, se := handshake(t, tc.srv, tc.cli, tc.want, "", tc.plaintext, tc.allowed...)
			if tc.ok && (ce != nil || se != nil) {
				t.Fatalf("refused: client %v, server %v", ce, se)
			}
			if !tc.ok && se == nil {
				t.Fatalf("server accepted (client: %v)", ce)
			}
		})
	}
}

// A head dialling worker w1's sandbox server refuses a server whose
// certificate is another worker's, or names no worker.
func TestHandshakeChecksNode(t *testing.T) {
	set := tlstest.New(t, t.TempDir())
	head := set.Store(t, tlsconfig.RoleHead, "h1")
	w1 := set.Store(t, tlsconfig.RoleWorker, "w1")
	w2 := set.Store(t, tlsconfig.RoleWorker, "w2")
	old, err := tlsconfig.Load(set.IssueWithoutNode(t, tlsconfig.RoleWorker, "old"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		srv   *tlsconfig.Store
		node  string
		error string // of the client; "": accepted
	}{
		{"w1 is w1", w1, "w1", ""},
		{"any worker", w2, "", ""},
		{"w2 posing as w1", w2, "w1", "is worker w2's (w2.worker.megaflow), not worker w1's"},
		{"a certificate without a node", old, "w1", "names no worker id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ce, se := handshake(t, tc.srv, head, tlsconfig.RoleWorker, tc.node, false, tlsconfig.RoleHead)
			if tc.error == "" {
				if ce != nil || se != nil {
					t.Fatalf("refused: client %v, server %v", ce, se)
				}
				return
			}
			if ce == nil || !strings.Contains(ce.Error(), tc.error) {
				t.Fatalf("client: %v; want %q", ce, tc.error)
			}
		})
	}
}

func TestReloadSwapsCertificate(t *testing.T) {
	set := tlstest.New(t, t.TempDir())
	s := set.Store(t, tlsconfig.RoleHead, "h1")
	first := s.Certificate().SerialNumber
	// A bad file: Reload fails and keeps the old material.
	f := set.Files("h1")
	if err := os.WriteFile(f.Cert, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("Reload of a garbage certificate succeeded")
	}
	if s.Certificate().SerialNumber.Cmp(first) != 0 {
		t.Fatal("a failed Reload changed the certificate")
	}
	// A worker certificate in a head's place: refused too.
	w := set.Issue(t, tlsconfig.RoleWorker, "w1")
	s2, err := tlsconfig.Load(f, tlsconfig.RoleHead)
	if err == nil {
		t.Fatalf("loaded garbage: %v", s2)
	}
	copyFile(t, w.Cert, f.Cert)
	copyFile(t, w.Key, f.Key)
	if err := s.Reload(); err != nil {
		t.Fatalf("Reload of a worker certificate by a Store with no role bound: %v", err)
	}
	h, err := tlsconfig.Load(set.Issue(t, tlsconfig.RoleHead, "h2"), tlsconfig.RoleHead)
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, w.Cert, set.Files("h2").Cert)
	copyFile(t, w.Key, set.Files("h2").Key)
	if err := h.Reload(); err == nil || !strings.Contains(err.Error(), "worker certificate") {
		t.Fatalf("head Store reloaded a worker certificate: %v", err)
	}
	// A new head certificate: the next handshake presents it.
	set.Issue(t, tlsconfig.RoleHead, "h1")
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if s.Certificate().SerialNumber.Cmp(first) == 0 {
		t.Fatal("Reload kept the old certificate")
	}
	peer := set.Store(t, tlsconfig.RoleHead, "h3")
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	got := make(chan *x509.Certificate, 1)
	go func() {
		c := tls.Client(a, peer.ClientConfig(tlsconfig.RoleHead))
		_ = c.Handshake()
		got <- c.ConnectionState().PeerCertificates[0]
		_ = c.Close()
	}()
	srv := tls.Server(b, s.ServerConfig(nil, tlsconfig.RoleHead))
	_ = srv.Handshake()
	if c := <-got; c.SerialNumber.Cmp(s.Certificate().SerialNumber) != 0 {
		t.Fatalf("the handshake after Reload presented serial %s, want %s", c.SerialNumber, s.Certificate().SerialNumber)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestReloadOnSignal(t *testing.T) {
	set := tlstest.New(t, t.TempDir())
	s := set.Store(t, tlsconfig.RoleWorker, "w1")
	before := s.Certificate().SerialNumber
	logger := slog.New(slog.DiscardHandler)

	// The loop, driven by a channel.
	sig := make(chan os.Signal, 1)
	done := make(chan error)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); s.ReloadOn(ctx, sig, logger, done) }()
	set.Issue(t, tlsconfig.RoleWorker, "w1")
	sig <- syscall.SIGHUP
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reload within 10s")
	}
	cancel()
	<-stopped
	mid := s.Certificate().SerialNumber
	if mid.Cmp(before) == 0 {
		t.Fatal("ReloadOn did not swap the certificate")
	}

	// The real signal, sent to this process.
	stop := tlsconfig.ReloadOnSIGHUP(s, logger)
	defer stop()
	set.Issue(t, tlsconfig.RoleWorker, "w1")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Certificate().SerialNumber.Cmp(mid) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("SIGHUP did not reload the certificate within 10s")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
}

// RefusalLogger logs the first refusal at once, counts the ones within
// the interval, and reports that count on the next line.
func TestRefusalLoggerRateLimits(t *testing.T) {
	var buf strings.Builder
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	now := time.Unix(1000, 0)
	log := tlsconfig.RefusalLogger(logger, "grpc :7070", func() time.Time { return now }, 10*time.Second)
	addr := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 5555}
	refusal := errors.New("tls: first record does not look like a TLS handshake")
	steps := []struct {
		advance time.Duration
		lines   int
	}{{0, 1}, {time.Second, 1}, {5 * time.Second, 1}, {5 * time.Second, 2}, {time.Second, 2}, {20 * time.Second, 3}}
	for i, s := range steps {
		now = now.Add(s.advance)
		log(addr, refusal)
		if got := strings.Count(buf.String(), "refused a connection"); got != s.lines {
			t.Fatalf("step %d: %d lines, want %d:\n%s", i, got, s.lines, buf.String())
		}
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	for i, want := range []string{"refused_since_last_line=0", "refused_since_last_line=2", "refused_since_last_line=1"} {
		if !strings.Contains(lines[i], want) || !strings.Contains(lines[i], "remote=10.0.0.9:5555") || !strings.Contains(lines[i], "first record") {
			t.Errorf("line %d: %s; want %s, the remote address and the error", i, lines[i], want)
		}
	}
}
