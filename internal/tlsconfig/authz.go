package tlsconfig

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/megaflow/megaflow/internal/errs"
)

// UnaryAuthorizer returns a gRPC interceptor that refuses, with
// PermissionDenied, a call whose peer's certificate may not call the
// method (Authorize). Install it on a server whose credentials come from
// ServerCredentials, first in the chain.
func UnaryAuthorizer() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := authorize(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamAuthorizer is UnaryAuthorizer for streaming methods.
func StreamAuthorizer() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := authorize(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

func authorize(ctx context.Context, method string) error {
	cert := PeerCertificate(ctx)
	if cert == nil {
		return errs.ToStatus(errs.New(errs.PermissionDenied, "%s: the call came without a verified TLS certificate", method))
	}
	if err := Authorize(method, cert); err != nil {
		return errs.ToStatus(errs.New(errs.PermissionDenied, "%v", err))
	}
	return nil
}

// RefusalLogger returns an onRefused callback (ServerCredentials,
// consensus.TransportTLS) that logs refused handshakes on what
// ("grpc", "raft") at warn level, at most one line per every (the first
// at once; later lines count the ones left out), with a hint at the usual
// causes. now is the caller's clock. Safe for concurrent use.
func RefusalLogger(logger *slog.Logger, what string, now func() time.Time, every time.Duration) func(net.Addr, error) {
	var mu sync.Mutex
	var last time.Time
	skipped := 0
	return func(remote net.Addr, err error) {
		mu.Lock()
		t := now()
		if !last.IsZero() && t.Sub(last) < every {
			skipped++
			mu.Unlock()
			return
		}
		n := skipped
		last, skipped = t, 0
		mu.Unlock()
		logger.Warn("refused a connection: TLS handshake failed (a peer without TLS, with a certificate from another CA, or of a role this listener does not take)",
			"listener", what, "remote", remote.String(), "err", err, "refused_since_last_line", n)
	}
}
