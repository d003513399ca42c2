package client

import (
	"google.golang.org/grpc"

	"github.com/megaflow/megaflow/internal/acl"
)

// EnvToken is the environment variable the CLI (and megaflow-worker) read
// an API token from when --token is not given.
const EnvToken = "MEGAFLOW_TOKEN"

// WithToken makes every call carry the API token secret ("authorization:
// Bearer <secret>" metadata), as a cluster with ACLs on requires
// (docs/security.md). The heads look it up in their table: its role and
// tenant decide what the calls may do. Empty: no token, the default.
func WithToken(secret string) Option {
	return func(o *options) {
		if secret != "" {
			o.dialOptions = append(o.dialOptions, grpc.WithPerRPCCredentials(acl.Credentials(secret)))
		}
	}
}
