package head

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
)

// checkBoundsUnary is a unary interceptor of the head's gRPC server: a
// request with a field over its bound (spec.CheckRequest: a string or list
// too long, a number out of range, an undefined enum value) is answered
// InvalidArgument naming the field and the bound before any handler runs,
// so it changes nothing and is never forwarded or stored.
func checkBoundsUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if m, ok := req.(proto.Message); ok {
		if err := spec.CheckRequest(m); err != nil {
			return nil, errs.ToStatus(err)
		}
	}
	return handler(ctx, req)
}

// checkBoundsStream checks every message received on a stream (Watch's
// request, each message of a worker's stream) as checkBoundsUnary does: a
// message over a bound ends the stream with InvalidArgument.
func checkBoundsStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, boundedStream{ss})
}

// boundedStream is a grpc.ServerStream whose RecvMsg refuses messages over
// a bound.
type boundedStream struct{ grpc.ServerStream }

// RecvMsg receives the next message and checks it with spec.CheckRequest.
func (s boundedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if pm, ok := m.(proto.Message); ok {
		if err := spec.CheckRequest(pm); err != nil {
			return errs.ToStatus(err)
		}
	}
	return nil
}
