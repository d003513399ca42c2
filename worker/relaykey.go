package worker

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/megaflow/megaflow/internal/acl"
	"github.com/megaflow/megaflow/internal/errs"
)

// The relay key on the worker (docs/security.md, internal/acl's
// relay.go): the leader sends the cluster's relay key in the Welcome of a
// stream it authenticated (a worker token or a worker certificate), and
// the worker keeps it in memory only (a restarted worker gets it again at
// its next Welcome). Every SandboxWorkerService call must carry it once
// the worker has it; a worker with a token (ACLs on) refuses relay calls
// until it has it. A worker with neither (a cluster without ACLs) serves
// them as before. A worker with TLS and no token serves until its first
// Welcome with a key: its TLS handshake already admits only heads.

// learnRelayKey keeps the relay key of a Welcome from the head at addr. A
// Welcome without one (a leader without ACLs, or a cluster not yet
// bootstrapped) keeps the key the worker has: a key is never dropped. A
// key of the wrong length is logged and ignored.
func (w *Worker) learnRelayKey(addr string, key []byte) {
	switch {
	case len(key) == 0:
		return
	case len(key) != acl.RelayKeyBytes:
		w.log.Warn("ignoring the relay key of a Welcome: wrong length", "leader", addr, "bytes", len(key), "want", acl.RelayKeyBytes)
		return
	}
	k := append([]byte(nil), key...)
	w.relayKeyv.Store(&k)
}

// relayKey returns the relay key, or nil before a Welcome gave one.
func (w *Worker) relayKey() []byte {
	if k := w.relayKeyv.Load(); k != nil {
		return *k
	}
	return nil
}

// checkRelayKey decides a sandbox call by its metadata (acl.CheckRelayKey);
// the error is a gRPC status: Unauthenticated or Unavailable, naming why.
func (w *Worker) checkRelayKey(ctx context.Context, method string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if err := acl.CheckRelayKey(w.relayKey(), w.cfg.Token != "", md.Get(acl.RelayKeyMetadata)); err != nil {
		w.log.Debug("refused a sandbox call", "method", method, "err", err)
		return errs.ToStatus(err)
	}
	return nil
}

// relayKeyUnary and relayKeyStream are the sandbox server's interceptors
// that check the relay key of each call.
func (w *Worker) relayKeyUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := w.checkRelayKey(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (w *Worker) relayKeyStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := w.checkRelayKey(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}
