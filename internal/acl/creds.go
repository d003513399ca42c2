package acl

import (
	"context"

	"google.golang.org/grpc/credentials"
)

// Credentials returns gRPC per-call credentials that send secret as a
// bearer token (MetadataKey), for the client library and the worker's
// stream to the heads. They are sent over plaintext connections too: a
// cluster without TLS trusts its network (docs/security.md).
func Credentials(secret string) credentials.PerRPCCredentials {
	return tokenCreds{md: map[string]string{MetadataKey: "Bearer " + secret}}
}

type tokenCreds struct{ md map[string]string }

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return t.md, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: false,
// so that a token works on a cluster without TLS.
func (t tokenCreds) RequireTransportSecurity() bool { return false }
