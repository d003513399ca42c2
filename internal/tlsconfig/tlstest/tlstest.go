// Package tlstest makes throwaway certificate sets for tests and
// benchmarks: a cluster CA with one certificate of each role, written to a
// directory as `megaflow tls` would write them. Only tests and bench/
// import it.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/tlsconfig"
)

// Set is a CA and one certificate per name, as files under Dir.
type Set struct {
	// Dir holds ca.pem, ca-key.pem and <name>.pem, <name>-key.pem.
	Dir string
	// CA is the CA's PEM.
	CA tlsconfig.PEM
}

// New writes a new CA to dir and returns its Set. It fails t on an error.
func New(t testing.TB, dir string) *Set {
	t.Helper()
	ca, err := tlsconfig.NewCA(tlsconfig.CARequest{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := tlsconfig.WriteFiles(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"), ca, false); err != nil {
		t.Fatal(err)
	}
	return &Set{Dir: dir, CA: ca}
}

// Issue writes <name>.pem and <name>-key.pem of role, signed by the CA
// (over existing ones), and returns their Files with the CA. A head or
// worker certificate names name as its node id: pass the node id of the
// head or worker that will hold it ("h1", "w1").
func (s *Set) Issue(t testing.TB, role tlsconfig.Role, name string) tlsconfig.Files {
	t.Helper()
	req := tlsconfig.CertRequest{Role: role, Name: name, Hosts: []string{"127.0.0.1", "localhost"}, Now: time.Now()}
	if role != tlsconfig.RoleClient {
		req.NodeID = name
	}
	return s.write(t, name, req)
}

// IssueFor is Issue with the node id apart from the file name: a
// certificate of node id written as <name>.pem (a worker given another
// worker's certificate).
func (s *Set) IssueFor(t testing.TB, role tlsconfig.Role, name, id string) tlsconfig.Files {
	t.Helper()
	return s.write(t, name, tlsconfig.CertRequest{Role: role, Name: name, NodeID: id, Hosts: []string{"127.0.0.1", "localhost"}, Now: time.Now()})
}

func (s *Set) write(t testing.TB, name string, req tlsconfig.CertRequest) tlsconfig.Files {
	t.Helper()
	p, err := tlsconfig.NewCert(s.CA, req)
	if err != nil {
		t.Fatal(err)
	}
	f := s.Files(name)
	if err := tlsconfig.WriteFiles(f.Cert, f.Key, p, true); err != nil {
		t.Fatal(err)
	}
	return f
}

// Files returns the Files of certificate name under the Set's CA.
func (s *Set) Files(name string) tlsconfig.Files {
	return tlsconfig.Files{CA: filepath.Join(s.Dir, "ca.pem"), Cert: filepath.Join(s.Dir, name+".pem"), Key: filepath.Join(s.Dir, name+"-key.pem")}
}

// Store issues a certificate of role and loads it. It fails t on an
// error.
func (s *Set) Store(t testing.TB, role tlsconfig.Role, name string) *tlsconfig.Store {
	t.Helper()
	st, err := tlsconfig.Load(s.Issue(t, role, name))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// IssueWithoutNode writes <name>.pem and <name>-key.pem of role as
// `megaflow tls cert create` made them before certificates named their
// node (the role name alone), and returns their Files: for tests of the
// refusal that tells the operator to reissue them.
func (s *Set) IssueWithoutNode(t testing.TB, role tlsconfig.Role, name string) tlsconfig.Files {
	t.Helper()
	ca, err := tls.X509KeyPair(s.CA.Cert, s.CA.Key)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{role.ServerName(), "localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	f := s.Files(name)
	p := tlsconfig.PEM{Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})}
	if err := tlsconfig.WriteFiles(f.Cert, f.Key, p, true); err != nil {
		t.Fatal(err)
	}
	return f
}
