package acl

import (
	"crypto/subtle"
	"encoding/hex"
	"io"

	"github.com/megaflow/megaflow/internal/errs"
)

// The relay key (docs/security.md): 32 random bytes the leader draws at
// the ACL bootstrap and keeps in the replicated table (the bootstrap
// marker). Heads send it with every SandboxWorkerService call they relay
// to a worker; a worker learns it from the Welcome of its authenticated
// stream and refuses relay calls without it, so that a caller with no
// token cannot reach a sandbox through the worker's sandbox port.

// RelayKeyMetadata is the gRPC metadata key that carries the relay key on
// a relay call, as lowercase hex (64 digits).
const RelayKeyMetadata = "megaflow-relay-key"

// RelayKeyBytes is the relay key's length: 256 bits from crypto/rand.
const RelayKeyBytes = 32

// NewRelayKey reads a relay key from rand (crypto/rand.Reader). Errors:
// Internal when rand fails.
func NewRelayKey(rand io.Reader) ([]byte, error) {
	key := make([]byte, RelayKeyBytes)
	if _, err := io.ReadFull(rand, key); err != nil {
		return nil, errs.New(errs.Internal, "draw the relay key: %v", err)
	}
	return key, nil
}

// CheckRelayKey decides whether a relay call whose RelayKeyMetadata
// values are got may be served by a worker that holds key (nil: none yet).
// requireKey says the worker runs with ACLs (a token), so that a worker
// without a key must refuse. It returns nil to serve; otherwise an error
// of code Unavailable (ACLs on, no key yet: the worker has not been
// welcomed by a leader since it started) or Unauthenticated (the key is
// missing, given twice, malformed or wrong), naming why and never the
// key. A worker without ACLs and without a key serves every call. The
// comparison takes constant time (crypto/subtle).
func CheckRelayKey(key []byte, requireKey bool, got []string) error {
	if len(key) == 0 {
		if requireKey {
			return errs.New(errs.Unavailable, "this worker runs with ACLs and is not connected to a leader yet, so it has no relay key to check sandbox calls with; retry once it is connected")
		}
		return nil
	}
	if len(got) == 0 {
		return errs.New(errs.Unauthenticated, "sandbox calls to a worker must come from a head: the call carries no relay key (%s metadata); call the sandbox through a head's API", RelayKeyMetadata)
	}
	if len(got) > 1 {
		return errs.New(errs.Unauthenticated, "the call carries %d relay keys (%s metadata); want one", len(got), RelayKeyMetadata)
	}
	presented, err := hex.DecodeString(got[0])
	if err != nil || len(presented) != RelayKeyBytes {
		return errs.New(errs.Unauthenticated, "the call's relay key (%s metadata) is not %d hex digits", RelayKeyMetadata, 2*RelayKeyBytes)
	}
	if subtle.ConstantTimeCompare(presented, key) != 1 {
		return errs.New(errs.Unauthenticated, "the call's relay key (%s metadata) is not this cluster's: sandbox calls to a worker must come from a head of its cluster", RelayKeyMetadata)
	}
	return nil
}

// RelayKeyValue is key as RelayKeyMetadata carries it.
func RelayKeyValue(key []byte) string { return hex.EncodeToString(key) }
