package tlsconfig

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// NodeName returns the DNS name that ties a certificate of role r to the
// node id: "<id>.<role>.megaflow", e.g. "w1.worker.megaflow". `megaflow
// tls cert create --head|--worker --node-id ID` puts it in the
// certificate beside the role name (ServerName): the role name says what
// the certificate may act as, the node name which node it speaks for.
func (r Role) NodeName(id string) string { return id + "." + r.ServerName() }

// NodeOf returns the node id cert names for role r (the <id> of a DNS name
// <id>.<role>.megaflow), or "" when it names none: a certificate made
// before certificates named their node, or a client certificate. Errors:
// it names more than one (a certificate speaks for one node).
func NodeOf(cert *x509.Certificate, r Role) (string, error) {
	if cert == nil {
		return "", errors.New("no certificate")
	}
	var ids []string
	for _, name := range cert.DNSNames {
		if id, ok := under(name, r.ServerName()); ok {
			ids = append(ids, id)
		}
	}
	switch len(ids) {
	case 0:
		return "", nil
	case 1:
		return ids[0], nil
	default:
		return "", fmt.Errorf("certificate %q names %d %s ids %v; a certificate must name one", cert.Subject.CommonName, len(ids), r, ids)
	}
}

// CheckNode returns nil when cert names node id of role r (the DNS name
// r.NodeName(id); the id is compared byte for byte, as node ids are), and
// otherwise an error saying which id it names, or that it names none, and
// how to make the right certificate. It does not check the role: callers
// check that first (CheckRole, or the handshake).
func CheckNode(cert *x509.Certificate, r Role, id string) error {
	got, err := NodeOf(cert, r)
	if err != nil {
		return err
	}
	switch {
	case got == "":
		return fmt.Errorf("certificate %q names no %s id (no DNS name %s): it was made before certificates named their node; reissue it with megaflow tls cert create --%s --node-id %s",
			cert.Subject.CommonName, r, r.NodeName(id), r, id)
	case got != id:
		return fmt.Errorf("certificate %q is %s %s's (%s), not %s %s's: give %s %s a certificate of its own (megaflow tls cert create --%s --node-id %s)",
			cert.Subject.CommonName, r, got, r.NodeName(got), r, id, r, id, r, id)
	}
	return nil
}

// under returns what comes before "."+parent in name, and whether name
// ends so (the parent compared without case, as DNS names are).
func under(name, parent string) (string, bool) {
	n := len(name) - len(parent) - 1
	if n <= 0 || name[n] != '.' || !strings.EqualFold(name[n+1:], parent) {
		return "", false
	}
	return name[:n], true
}
