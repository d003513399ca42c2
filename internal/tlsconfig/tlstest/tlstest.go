// Package tlstest makes throwaway certificate sets for tests and
// benchmarks: a cluster CA with one certificate of each role, written to a
// directory as `megaflow tls` would write them. Only tests and bench/
// import it.
package tlstest

import (
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
// (over existing ones), and returns their Files with the CA.
func (s *Set) Issue(t testing.TB, role tlsconfig.Role, name string) tlsconfig.Files {
	t.Helper()
	p, err := tlsconfig.NewCert(s.CA, tlsconfig.CertRequest{Role: role, Name: name, Hosts: []string{"127.0.0.1", "localhost"}, Now: time.Now()})
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
