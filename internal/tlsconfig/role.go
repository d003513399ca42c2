// Package tlsconfig owns MegaFlow's mutual TLS: the roles a certificate
// names (head, worker, client), the certificates `megaflow tls` makes, the
// files a daemon loads and reloads on SIGHUP (Store), the tls.Configs and
// gRPC credentials built from them, and which role may call which gRPC
// service. It imports only the standard library, gRPC and the leaf
// packages errs and nodeid, so the client library, the head, the worker
// and cmd/ may all import it.
//
// A certificate names its role the way Nomad's server.<region>.nomad names
// do: one DNS name <role>.megaflow ("head.megaflow", "worker.megaflow",
// "client.megaflow"), beside any host names and IP addresses it is given.
// A dialer verifies the server's certificate against that name, not the
// address it dialled, and a server checks the role of the client's, so a
// worker certificate cannot act as a head and a client certificate cannot
// open a worker stream. A head or worker certificate also names its node,
// <id>.<role>.megaflow ("w1.worker.megaflow"; node.go), so that the heads
// can check that a worker stream's hello and a worker's sandbox server
// are the worker the certificate was made for. The cluster is the CA:
// each cluster has its own, and a certificate signed by another cluster's
// CA is refused.
package tlsconfig

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// Role is what a certificate may act as.
type Role string

// The roles. A head certificate serves the heads' gRPC API and Raft and
// dials other heads and the workers' sandbox servers; a worker certificate
// opens a worker's stream to the leader and serves its sandboxes; a
// client certificate calls the client API (the CLI, the Go and Python
// clients).
const (
	RoleHead   Role = "head"
	RoleWorker Role = "worker"
	RoleClient Role = "client"
)

// Domain is the DNS suffix of the role names: a role's certificate holds
// the DNS name <role>.Domain.
const Domain = "megaflow"

// Roles lists every role, in a fixed order.
var Roles = []Role{RoleHead, RoleWorker, RoleClient}

// ParseRole returns the role named s ("head", "worker" or "client").
// Errors name the accepted values.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("unknown role %q: want head, worker or client", s)
}

// ServerName returns the DNS name a certificate of role r holds, e.g.
// "head.megaflow": dialers set it as tls.Config.ServerName.
func (r Role) ServerName() string { return string(r) + "." + Domain }

// RoleOf returns the role named by cert's DNS names. Errors: cert names
// no role (not made by `megaflow tls cert create`), or more than one
// (a certificate acts as one role only).
func RoleOf(cert *x509.Certificate) (Role, error) {
	if cert == nil {
		return "", errors.New("no certificate")
	}
	var found []Role
	for _, name := range cert.DNSNames {
		for _, r := range Roles {
			if strings.EqualFold(name, r.ServerName()) {
				found = append(found, r)
			}
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("certificate %q names no MegaFlow role (a DNS name head.%s, worker.%s or client.%s); make one with megaflow tls cert create",
			cert.Subject.CommonName, Domain, Domain, Domain)
	case 1:
		return found[0], nil
	default:
		return "", fmt.Errorf("certificate %q names %d roles %v; a certificate must name one", cert.Subject.CommonName, len(found), found)
	}
}

// CheckRole returns nil when cert names one of the roles in allowed, and
// otherwise an error saying which role it has and which were wanted.
func CheckRole(cert *x509.Certificate, allowed ...Role) error {
	r, err := RoleOf(cert)
	if err != nil {
		return err
	}
	for _, a := range allowed {
		if r == a {
			return nil
		}
	}
	return fmt.Errorf("certificate %q is a %s certificate; this needs %s", cert.Subject.CommonName, r, joinRoles(allowed))
}

func joinRoles(rs []Role) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = "a " + string(r)
	}
	return strings.Join(parts, " or ") + " certificate"
}

// The gRPC services of the heads and workers, as they appear in a full
// method name "/<service>/<method>".
const (
	serviceMegaflow      = "megaflow.v1.MegaflowService"
	serviceOperator      = "megaflow.v1.OperatorService"
	serviceSandbox       = "megaflow.v1.SandboxService"
	serviceWorker        = "megaflow.v1.WorkerService"
	serviceSandboxWorker = "megaflow.v1.SandboxWorkerService"
	serviceHealth        = "grpc.health.v1.Health"
	serviceReflection    = "grpc.reflection."
	methodClusterStatus  = "/" + serviceMegaflow + "/ClusterStatus"
)

// MethodRoles returns the roles that may call the gRPC method fullMethod
// ("/megaflow.v1.WorkerService/Connect") on a head or a worker: the client
// API (MegaflowService, OperatorService, SandboxService) takes client
// certificates and head certificates (a follower forwards writes to the
// leader with its own); the worker stream takes worker certificates; a
// worker's SandboxWorkerService takes head certificates (the heads relay
// sandbox calls); health checks, reflection and the client API's
// ClusterStatus take any role (a worker whose leader went silent asks the
// other heads who leads: worker/stream.go). A method of any other service
// gets none.
func MethodRoles(fullMethod string) []Role {
	if fullMethod == methodClusterStatus {
		return Roles
	}
	svc := strings.TrimPrefix(fullMethod, "/")
	if i := strings.LastIndexByte(svc, '/'); i >= 0 {
		svc = svc[:i]
	}
	switch {
	case svc == serviceMegaflow, svc == serviceOperator, svc == serviceSandbox:
		return []Role{RoleClient, RoleHead}
	case svc == serviceWorker:
		return []Role{RoleWorker}
	case svc == serviceSandboxWorker:
		return []Role{RoleHead}
	case svc == serviceHealth, strings.HasPrefix(svc, serviceReflection):
		return Roles
	}
	return nil
}

// Authorize returns nil when a peer whose certificate is cert may call
// fullMethod (MethodRoles), and otherwise an error naming the role it has
// and the roles the method takes.
func Authorize(fullMethod string, cert *x509.Certificate) error {
	allowed := MethodRoles(fullMethod)
	if len(allowed) == 0 {
		return fmt.Errorf("method %s is not served over TLS to any role", fullMethod)
	}
	if err := CheckRole(cert, allowed...); err != nil {
		return fmt.Errorf("%s: %w", fullMethod, err)
	}
	return nil
}
