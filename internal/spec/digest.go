package spec

import (
	"crypto/sha256"

	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/wire"
)

// Digest returns the SHA-256 (32 bytes) of the deterministic protobuf
// encoding of Normalize(g) with its id cleared. The head stores it as
// Graph.spec_digest when it commits a graph and compares it on a resubmit
// with the same id: equal digests mean the same graph (an idempotent retry),
// different ones mean errs.AlreadyExists.
//
// Equivalent specs (those Normalize makes equal: defaults left unset or
// spelled out, sets in another order, maps built in another order) have
// equal digests; any other difference, task order included, changes it. The
// id is left out because it is the key the digest is compared under, so the
// digest may be taken before the head assigns one.
//
// The encoding is deterministic for one build of MegaFlow, not canonical
// across protobuf libraries or languages, so only the head computes digests
// that are stored. Digest accepts any spec, but returns nil for one that
// cannot be encoded (a string holding invalid UTF-8, which Validate rejects):
// validate first. g is not modified.
func Digest(g *wire.GraphSpec) []byte {
	n := Normalize(g)
	n.Id = ""
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(n)
	if err != nil {
		return nil
	}
	sum := sha256.Sum256(b)
	return sum[:]
}
