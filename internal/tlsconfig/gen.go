package tlsconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"

	"github.com/megaflow/megaflow/internal/nodeid"
)

// Validity bounds for the certificates `megaflow tls` makes.
const (
	// DefaultCAValidity is a CA's lifetime unless told: 5 years.
	DefaultCAValidity = 5 * 365 * 24 * time.Hour
	// DefaultCertValidity is a role certificate's lifetime unless told:
	// 1 year.
	DefaultCertValidity = 365 * 24 * time.Hour
	// MaxValidity is the longest either may be: 10 years.
	MaxValidity = 10 * 365 * 24 * time.Hour
	// MinValidity is the shortest: 1 hour.
	MinValidity = time.Hour
	// MaxHosts bounds the host names and IP addresses of one certificate.
	MaxHosts = 64
	// clockSkew backdates NotBefore, so that a peer whose clock is a
	// little behind accepts a certificate made a moment ago.
	clockSkew = 5 * time.Minute
)

// PEM is a certificate and its private key, PEM-encoded.
type PEM struct {
	Cert []byte // one CERTIFICATE block
	Key  []byte // one EC PRIVATE KEY block (SEC 1)
}

// CARequest describes a CA for NewCA.
type CARequest struct {
	// Name is the CA's common name (default "MegaFlow CA").
	Name string
	// Validity is its lifetime, in [MinValidity, MaxValidity] (0:
	// DefaultCAValidity).
	Validity time.Duration
	// Now is the time the validity starts from (NotBefore is 5 minutes
	// earlier). Required: the caller's clock.
	Now time.Time
}

// CertRequest describes a role certificate for NewCert.
type CertRequest struct {
	// Role is what the certificate acts as. Required.
	Role Role
	// Name is its common name (default the role's name). At most 64 bytes.
	Name string
	// NodeID is the node id of the head or worker that will hold it (its
	// --node-id): the certificate names it as Role.NodeName(NodeID), and
	// the heads check a worker's stream and sandbox server against it.
	// Required for a head or a worker, refused for a client; valid as
	// nodeid.Problem says.
	NodeID string
	// Hosts are extra DNS names and IP addresses (an entry that parses
	// as an IP is one) for tools that check the address they dialled; the
	// MegaFlow daemons check the role and node names instead. No
	// wildcards, no name under a role name. At most MaxHosts.
	Hosts []string
	// Validity is its lifetime, in [MinValidity, MaxValidity] (0:
	// DefaultCertValidity); it ends no later than the CA's.
	Validity time.Duration
	// Now is the time the validity starts from. Required.
	Now time.Time
}

// NewCA makes a self-signed ECDSA P-256 CA certificate and key. Errors:
// a validity out of bounds, a zero Now, or the system's randomness failing.
func NewCA(req CARequest) (PEM, error) {
	if req.Name == "" {
		req.Name = "MegaFlow CA"
	}
	validity, err := checkValidity(req.Validity, DefaultCAValidity, req.Now)
	if err != nil {
		return PEM{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEM{}, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return PEM{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: req.Name, Organization: []string{"MegaFlow"}},
		NotBefore:             req.Now.Add(-clockSkew),
		NotAfter:              req.Now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return PEM{}, fmt.Errorf("sign CA certificate: %w", err)
	}
	return encode(der, key)
}

// NewCert makes an ECDSA P-256 certificate for req.Role signed by the CA
// in ca (as NewCA returns it). A head or worker certificate may serve and
// dial (server and client auth); a client certificate may only dial.
// Errors: an unknown role, a missing or invalid node id (or one given for
// a client), a name or hosts out of bounds, a wildcard host or one under a
// role name, a validity out of bounds, a CA that does not parse, is not a
// CA, or has expired.
func NewCert(ca PEM, req CertRequest) (PEM, error) {
	if _, err := ParseRole(string(req.Role)); err != nil {
		return PEM{}, err
	}
	if req.Name == "" {
		req.Name = string(req.Role)
	}
	if len(req.Name) > 64 {
		return PEM{}, fmt.Errorf("name %q: at most 64 bytes", req.Name)
	}
	switch {
	case req.Role == RoleClient && req.NodeID != "":
		return PEM{}, fmt.Errorf("node id %q: a client certificate names no node; --node-id is for --head and --worker", req.NodeID)
	case req.Role != RoleClient && req.NodeID == "":
		return PEM{}, fmt.Errorf("a %s certificate needs the node id of the %s that will hold it: pass --node-id, the same as that %s's --node-id", req.Role, req.Role, req.Role)
	case req.Role != RoleClient:
		if p := nodeid.Problem(req.NodeID); p != "" {
			return PEM{}, fmt.Errorf("node id %q %s", req.NodeID, p)
		}
	}
	if len(req.Hosts) > MaxHosts {
		return PEM{}, fmt.Errorf("%d hosts: at most %d", len(req.Hosts), MaxHosts)
	}
	validity, err := checkValidity(req.Validity, DefaultCertValidity, req.Now)
	if err != nil {
		return PEM{}, err
	}
	caCert, caKey, err := parsePair(ca)
	if err != nil {
		return PEM{}, fmt.Errorf("CA: %w", err)
	}
	if !caCert.IsCA {
		return PEM{}, fmt.Errorf("CA: certificate %q is not a CA certificate (make one with megaflow tls ca create)", caCert.Subject.CommonName)
	}
	if !req.Now.Before(caCert.NotAfter) {
		return PEM{}, fmt.Errorf("CA: certificate %q expired at %s; make a new CA", caCert.Subject.CommonName, caCert.NotAfter.UTC().Format(time.RFC3339))
	}
	notAfter := req.Now.Add(validity)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: req.Name, Organization: []string{"MegaFlow"}, OrganizationalUnit: []string{string(req.Role)}},
		NotBefore:   req.Now.Add(-clockSkew),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		DNSNames:    []string{req.Role.ServerName()},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if req.Role != RoleClient {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames = append(tmpl.DNSNames, req.Role.NodeName(req.NodeID))
	}
	for _, h := range req.Hosts {
		h = strings.TrimSpace(h)
		switch {
		case h == "":
			return PEM{}, errors.New("hosts: an empty entry")
		case net.ParseIP(h) != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(h))
		case strings.Contains(h, "*"):
			return PEM{}, fmt.Errorf("hosts: %q is a wildcard; list each name instead (a wildcard certificate passes for every name it matches, other machines' included)", h)
		default:
			for _, r := range Roles {
				if strings.EqualFold(h, r.ServerName()) {
					return PEM{}, fmt.Errorf("hosts: %q is a role name; the role comes from --%s", h, req.Role)
				}
				if _, ok := under(h, r.ServerName()); ok {
					return PEM{}, fmt.Errorf("hosts: %q is under the role name %s; the node's name comes from --node-id", h, r.ServerName())
				}
			}
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return PEM{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEM{}, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return PEM{}, fmt.Errorf("sign certificate: %w", err)
	}
	return encode(der, key)
}

// checkValidity returns v, or def when v is 0, after checking its bounds
// and that now is set.
func checkValidity(v, def time.Duration, now time.Time) (time.Duration, error) {
	if now.IsZero() {
		return 0, errors.New("no current time given")
	}
	if v == 0 {
		v = def
	}
	if v < MinValidity || v > MaxValidity {
		return 0, fmt.Errorf("validity %s: must be in [%s, %s]", v, MinValidity, MaxValidity)
	}
	return v, nil
}

// newSerial returns a random 128-bit serial number.
func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return n, nil
}

func encode(der []byte, key *ecdsa.PrivateKey) (PEM, error) {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return PEM{}, fmt.Errorf("encode key: %w", err)
	}
	return PEM{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	}, nil
}

// parsePair parses a PEM certificate and its private key and checks that
// they belong together.
func parsePair(p PEM) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(p.Cert)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, errors.New("no PEM CERTIFICATE block in the certificate file")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parse certificate: %w", err)
	}
	kb, _ := pem.Decode(p.Key)
	if kb == nil {
		return nil, nil, errors.New("no PEM block in the key file")
	}
	var key *ecdsa.PrivateKey
	switch kb.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	case "PRIVATE KEY":
		k, perr := x509.ParsePKCS8PrivateKey(kb.Bytes)
		err = perr
		if perr == nil {
			var ok bool
			if key, ok = k.(*ecdsa.PrivateKey); !ok {
				err = errors.New("the key is not an ECDSA key")
			}
		}
	default:
		err = fmt.Errorf("PEM block %q is not a private key", kb.Type)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("parse key: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, errors.New("the key does not belong to the certificate")
	}
	return cert, key, nil
}
