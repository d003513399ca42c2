// Package spec owns the rules for graphs as clients submit them: the
// defaults that Normalize fills in, the checks that Validate makes, the
// digest that makes SubmitGraph idempotent, and the ids given to graphs
// submitted without one.
//
// Everything here is a pure function of its arguments: no networking, no
// clock, no randomness of its own, no logging. The head calls it before it
// proposes a graph to Raft; the client library calls it to fail early, before
// a round trip. It depends only on the wire API (internal/wire) and the error
// catalog (internal/errs), so the client library may import it without
// pulling in server code.
//
// The flow on the head is:
//
//	n := spec.Normalize(req.Graph)       // a copy with defaults filled in
//	if n.Id == "" {
//		n.Id = spec.NewGraphID(now, rand.Reader) // the leader's clock
//	}
//	if err := spec.Validate(n, limits); err != nil {
//		return err // errs.InvalidArgument, naming graph, task and field
//	}
//	digest := spec.Digest(n) // compared with the stored digest on a retry
//
// Validate gives the same verdict for a spec and for its normalized form, so
// the client may validate either.
package spec
