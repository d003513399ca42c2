package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// Files names the three PEM files of a TLS setting (--tls-ca, --tls-cert,
// --tls-key). All empty: TLS is off.
type Files struct {
	// CA is the cluster's CA certificate: peers' certificates must be
	// signed by it.
	CA string
	// Cert is this process's certificate, signed by CA.
	Cert string
	// Key is Cert's private key.
	Key string
}

// Enabled reports whether any file is named.
func (f Files) Enabled() bool { return f != Files{} }

// Validate returns nil when all three files are named or none is, and
// otherwise an error naming the flags that are missing.
func (f Files) Validate() error {
	if !f.Enabled() {
		return nil
	}
	var missing []string
	for _, x := range []struct{ v, flag string }{{f.CA, "--tls-ca"}, {f.Cert, "--tls-cert"}, {f.Key, "--tls-key"}} {
		if x.v == "" {
			missing = append(missing, x.flag)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("TLS needs --tls-ca, --tls-cert and --tls-key together: %s missing", strings.Join(missing, ", "))
	}
	return nil
}

// material is one loaded set of files; never modified once stored.
type material struct {
	cert tls.Certificate
	leaf *x509.Certificate
	role Role
	pool *x509.CertPool
}

// Store holds a process's TLS material, loaded from Files, and builds the
// tls.Configs of its connections from whatever it holds at each
// handshake, so that Reload (on SIGHUP) changes the certificate and the CA
// of every later connection while open connections go on. Safe for
// concurrent use.
type Store struct {
	files   Files
	allowed []Role
	cur     atomic.Pointer[material]
}

// Load reads files and returns a Store holding them. The certificate must
// name one of the roles in allowed (a head loads a head certificate).
// Errors: a file missing or unreadable, a certificate or key that does not
// parse or does not match, a CA file with no certificate, a certificate
// not signed by the CA, expired, or of another role; each names the file
// and what to do.
func Load(files Files, allowed ...Role) (*Store, error) {
	if err := files.Validate(); err != nil {
		return nil, err
	}
	if !files.Enabled() {
		return nil, errors.New("no TLS files given")
	}
	s := &Store{files: files, allowed: allowed}
	m, err := s.read(time.Now())
	if err != nil {
		return nil, err
	}
	s.cur.Store(m)
	return s, nil
}

// Reload reads the files again and, when they are good (as Load checks
// them), uses them for every later handshake. On an error the Store keeps
// what it held. The megaflow-head and megaflow-worker commands call it on
// SIGHUP.
func (s *Store) Reload() error {
	m, err := s.read(time.Now())
	if err != nil {
		return err
	}
	s.cur.Store(m)
	return nil
}

// Role returns the role of the certificate the Store holds.
func (s *Store) Role() Role { return s.cur.Load().role }

// Certificate returns the certificate the Store holds (for logs: subject,
// expiry). Callers must not modify it.
func (s *Store) Certificate() *x509.Certificate { return s.cur.Load().leaf }

// Files returns the files the Store reads.
func (s *Store) Files() Files { return s.files }

func (s *Store) read(now time.Time) (*material, error) {
	f := s.files
	caPEM, err := readBounded(f.CA)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", f.CA)
	}
	pair, err := ReadPEM(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", f.Cert, f.Key, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("--tls-cert %s: %w", f.Cert, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("--tls-cert %s is not valid under --tls-ca %s: %w", f.Cert, f.CA, err)
	}
	role, err := RoleOf(leaf)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s: %w", f.Cert, err)
	}
	if len(s.allowed) > 0 {
		if err := CheckRole(leaf, s.allowed...); err != nil {
			return nil, fmt.Errorf("--tls-cert %s: %w (megaflow tls cert create --%s)", f.Cert, err, s.allowed[0])
		}
	}
	return &material{cert: cert, leaf: leaf, role: role, pool: pool}, nil
}

// ServerConfig returns the tls.Config of a listener that requires a
// client certificate signed by the CA and naming one of the roles in
// allowed, offers nextProtos by ALPN (gRPC needs "h2"), and, at each
// handshake, uses what the Store holds then.
func (s *Store) ServerConfig(nextProtos []string, allowed ...Role) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := s.cur.Load()
			return &tls.Config{
				MinVersion:       tls.VersionTLS13,
				Certificates:     []tls.Certificate{m.cert},
				ClientAuth:       tls.RequireAndVerifyClientCert,
				ClientCAs:        m.pool,
				NextProtos:       nextProtos,
				VerifyConnection: checkPeer(allowed, ""),
			}, nil
		},
	}
}

// ClientConfig returns the tls.Config for one connection to a server of
// role server: it presents the Store's certificate, verifies the server's
// against the CA and the role's name (server.ServerName(), whatever
// address was dialled), and checks that it names that role. Call it per
// connection: it holds what the Store holds now.
func (s *Store) ClientConfig(server Role) *tls.Config { return s.ClientConfigFor(server, "") }

// ClientConfigFor is ClientConfig for a connection to one node: it also
// checks that the server's certificate names node id of role server
// (CheckNode), so that a head dialling worker w1's sandbox address talks
// to w1 and no other worker. node "": any node of the role.
func (s *Store) ClientConfigFor(server Role, node string) *tls.Config {
	m := s.cur.Load()
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{m.cert},
		RootCAs:          m.pool,
		ServerName:       server.ServerName(),
		VerifyConnection: checkPeer([]Role{server}, node),
	}
}

// checkPeer returns a tls.Config.VerifyConnection that refuses a peer
// whose certificate names none of allowed or, when node is set, does not
// name that node of allowed[0].
func checkPeer(allowed []Role, node string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("megaflow: the peer presented no certificate")
		}
		if err := CheckRole(cs.PeerCertificates[0], allowed...); err != nil {
			return fmt.Errorf("megaflow: refused the peer: %w", err)
		}
		if node != "" {
			if err := CheckNode(cs.PeerCertificates[0], allowed[0], node); err != nil {
				return fmt.Errorf("megaflow: refused the peer: %w", err)
			}
		}
		return nil
	}
}

// ReloadOn calls Reload each time a value arrives on signals (the daemons
// pass SIGHUP from signal.Notify), logging the new certificate or the
// error (the old material is kept then), until ctx ends. done, when not
// nil, receives Reload's result after each try (tests). The daemons run
// it on a goroutine of their own that their RunE waits for.
func (s *Store) ReloadOn(ctx context.Context, signals <-chan os.Signal, logger *slog.Logger, done chan<- error) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-signals:
		}
		err := s.Reload()
		if err != nil {
			logger.Error("TLS reload failed; keeping the certificates loaded before", "err", err)
		} else {
			c := s.Certificate()
			logger.Info("TLS certificates reloaded; new connections use them", "cert", s.files.Cert,
				"subject", c.Subject.CommonName, "role", s.Role(), "not_after", c.NotAfter.UTC().Format(time.RFC3339))
		}
		if done != nil {
			select {
			case done <- err:
			case <-ctx.Done():
				return
			}
		}
	}
}
