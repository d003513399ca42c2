package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// ServerCredentials returns gRPC transport credentials for a server that
// requires a client certificate naming one of allowed (ServerConfig, with
// ALPN "h2"). onRefused, when set, is called with the remote address and
// the error of every handshake that fails (a plaintext client, a wrong CA,
// a certificate of a role the server takes from no one), on the
// connection's goroutine: the daemons log it, rate-limited.
func (s *Store) ServerCredentials(onRefused func(remote net.Addr, err error), allowed ...Role) credentials.TransportCredentials {
	return &serverCreds{TransportCredentials: credentials.NewTLS(s.ServerConfig([]string{"h2"}, allowed...)), onRefused: onRefused}
}

type serverCreds struct {
	credentials.TransportCredentials
	onRefused func(net.Addr, error)
}

func (c *serverCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil && c.onRefused != nil {
		c.onRefused(conn.RemoteAddr(), err)
	}
	return out, info, err
}

func (c *serverCreds) Clone() credentials.TransportCredentials {
	return &serverCreds{TransportCredentials: c.TransportCredentials.Clone(), onRefused: c.onRefused}
}

// ClientCredentials returns gRPC transport credentials that dial a server
// of role server with ClientConfig, built afresh for each connection, so
// that a reloaded certificate or CA applies to the next one.
func (s *Store) ClientCredentials(server Role) credentials.TransportCredentials {
	return s.ClientCredentialsFor(server, "")
}

// ClientCredentialsFor is ClientCredentials for a connection to one node
// (ClientConfigFor): the server's certificate must also name node id of
// role server. The heads dial a worker's sandbox server with it.
func (s *Store) ClientCredentialsFor(server Role, node string) credentials.TransportCredentials {
	return &clientCreds{s: s, server: server, node: node}
}

type clientCreds struct {
	s      *Store
	server Role
	node   string // "": any node of the role
}

func (c *clientCreds) config() *tls.Config { return c.s.ClientConfigFor(c.server, c.node) }

func (c *clientCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(c.config()).ClientHandshake(ctx, authority, conn)
}

func (c *clientCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(c.config()).ServerHandshake(conn)
}

func (c *clientCreds) Info() credentials.ProtocolInfo {
	return credentials.NewTLS(c.config()).Info()
}

func (c *clientCreds) Clone() credentials.TransportCredentials {
	return &clientCreds{s: c.s, server: c.server, node: c.node}
}

func (c *clientCreds) OverrideServerName(string) error { return nil }

// PeerCertificate returns the verified certificate of the peer of a gRPC
// call (from a server handler's or interceptor's ctx), or nil when the
// call came without TLS or without a verified certificate.
func PeerCertificate(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return info.State.VerifiedChains[0][0]
}
