package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"time"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/tlsconfig"
)

// WithTLS makes the client dial the heads over mutual TLS with cfg, as
// TLSConfig returns it (its certificate, the cluster's CA, and the role
// name head.megaflow the heads' certificates are checked against). Nil,
// the default, is plaintext. A head with TLS on refuses a plaintext
// client; the client then fails with FailedPrecondition saying so rather
// than retrying.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) { o.tls = cfg }
}

// TLSConfig reads the CA certificate, the client's certificate and its
// key (PEM files, as `megaflow tls cert create --client` writes them) and
// returns the config for WithTLS. A head certificate works too (the heads
// take both on the client API). Errors: a file missing, not PEM, a key
// that does not match, a certificate not signed by the CA or of a
// worker; each names the file.
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	s, err := tlsconfig.Load(tlsconfig.Files{CA: caFile, Cert: certFile, Key: keyFile}, tlsconfig.RoleClient, tlsconfig.RoleHead)
	if err != nil {
		return nil, errs.New(errs.InvalidArgument, "client: %v", err)
	}
	return s.ClientConfig(tlsconfig.RoleHead), nil
}

// probeTimeout bounds diagnoseTLS's dial, handshake and read.
const probeTimeout = time.Second

// diagnoseTLS is called once per head address after the head did not
// answer (Unavailable). It dials addr itself to find out whether TLS is
// the cause, and returns the error to fail with then
// (FailedPrecondition: retrying cannot help), or nil when it is not (or
// cannot tell). cfg is the client's TLS config, nil for plaintext.
func diagnoseTLS(ctx context.Context, addr string, cfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil // down, not misconfigured
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(probeTimeout))
	if cfg == nil {
		// Does the head speak TLS? Any certificate will do to find out.
		c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}) //nolint:gosec // a probe: nothing is sent
		if err := c.HandshakeContext(ctx); err != nil && !isRemoteAlert(err) {
			return nil
		}
		return errs.New(errs.FailedPrecondition,
			"client: the head at %s requires TLS: pass --tls-ca/--tls-cert/--tls-key (client.WithTLS in Go)", addr)
	}
	pc := cfg.Clone()
	pc.NextProtos = []string{"h2"}
	c := tls.Client(raw, pc)
	err = c.HandshakeContext(ctx)
	var rh tls.RecordHeaderError
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	switch {
	case errors.As(err, &rh):
		return errs.New(errs.FailedPrecondition,
			"client: the head at %s does not speak TLS (started without --tls-ca/--tls-cert/--tls-key?): drop the TLS settings or turn TLS on at the head", addr)
	case errors.As(err, &cv), errors.As(err, &ua):
		return errs.New(errs.FailedPrecondition,
			"client: the head at %s has a certificate this client does not accept (another cluster's CA, or not a head certificate): %v", addr, err)
	case err != nil && isRemoteAlert(err):
		return errs.New(errs.FailedPrecondition,
			"client: the head at %s refused this client's certificate: %v (signed by another CA, or a worker certificate)", addr, err)
	case err != nil:
		return errs.New(errs.FailedPrecondition, "client: TLS with the head at %s failed: %v", addr, err)
	}
	// TLS 1.3: the head checks the client's certificate after the
	// client's side of the handshake is done; a refusal arrives as an
	// alert on the first read.
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil && isRemoteAlert(err) {
		return errs.New(errs.FailedPrecondition,
			"client: the head at %s refused this client's certificate: %v (signed by another CA, or a worker certificate)", addr, err)
	}
	return nil
}

// isRemoteAlert reports whether err is a TLS alert the peer sent.
func isRemoteAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}
