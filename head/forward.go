package head

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/megaflow/megaflow/internal/acl"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/gossip"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/wire"
)

// forwardedKey marks a call a follower forwarded, so that a head that is
// not the leader either answers NotLeader instead of forwarding again: no
// forwarding loops while heads disagree about the leader.
const forwardedKey = "megaflow-forwarded"

// forwardedByHead reports whether the call in ctx is one a follower
// forwarded, as far as this head can trust it: the forwardedKey metadata
// and, with TLS, a head certificate on the connection. A client can set
// the metadata too: with ACLs on and no TLS nothing proves a caller is a
// head, so the mark is not trusted there (false). The rate limit and the
// audit use it (a forwarded call was charged and audited by the follower);
// the loop guard (leader) uses the bare mark, which a client forging it
// only turns into a NotLeader answer.
func (h *Head) forwardedByHead(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(forwardedKey)) == 0 {
		return false
	}
	if h.cfg.TLS != nil {
		cert := tlsconfig.PeerCertificate(ctx)
		if cert == nil {
			return false
		}
		role, err := tlsconfig.RoleOf(cert)
		return err == nil && role == tlsconfig.RoleHead
	}
	return !h.cfg.ACL
}

// forwarder keeps one gRPC connection per leader address for followers to
// forward writes on. Owned by Head; closed by Shutdown and Kill.
type forwarder struct {
	h     *Head
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newForwarder(h *Head) *forwarder {
	return &forwarder{h: h, conns: make(map[string]*grpc.ClientConn)}
}

// leaderGRPC returns the leader's id and gRPC address as this head knows
// them (gossip carries each head's gRPC address); empty when unknown.
func (h *Head) leaderGRPC() (id, addr string) {
	_, lid := h.node.Leader()
	if lid == "" {
		return "", ""
	}
	if lid == h.cfg.NodeID {
		return lid, h.GRPCAddr()
	}
	if m, ok := h.headMember(lid); ok {
		return lid, m.Meta.GRPCAddr
	}
	return lid, ""
}

// headMember returns what gossip knows of head id, if anything.
func (h *Head) headMember(id string) (gossip.Member, bool) {
	for _, m := range h.gossip.Members() {
		if m.Meta.Role == gossip.RoleHead && m.Meta.NodeID == id {
			return m, true
		}
	}
	return gossip.Member{}, false
}

// leader returns a client for the leader, or the error to answer with:
// NotLeader when this call was already forwarded once, Unavailable when no
// leader is known.
func (f *forwarder) leader(ctx context.Context) (wire.MegaflowServiceClient, context.Context, error) {
	conn, out, err := f.leaderConn(ctx)
	if err != nil {
		return nil, nil, err
	}
	return wire.NewMegaflowServiceClient(conn), out, nil
}

// leaderConn is leader's connection, for any service the leader serves.
func (f *forwarder) leaderConn(ctx context.Context) (*grpc.ClientConn, context.Context, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(forwardedKey)) > 0 {
		return nil, nil, f.h.notLeader()
	}
	id, addr := f.h.leaderGRPC()
	if id == "" || addr == "" || id == f.h.cfg.NodeID {
		return nil, nil, errs.New(errs.Unavailable, "head %s knows no leader (election in progress?); retry shortly", f.h.cfg.NodeID)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		return nil, nil, errs.New(errs.Unavailable, "head %s is shutting down; use another head", f.h.cfg.NodeID)
	}
	conn, ok := f.conns[addr]
	if !ok {
		var err error
		conn, err = grpc.NewClient(addr, f.h.transportCreds(tlsconfig.RoleHead, ""))
		if err != nil {
			return nil, nil, errs.New(errs.Unavailable, "head %s: dial leader %s at %s: %v", f.h.cfg.NodeID, id, addr, err)
		}
		f.conns[addr] = conn
	}
	out := metadata.AppendToOutgoingContext(ctx, forwardedKey, f.h.cfg.NodeID)
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		// The caller's token goes along: the leader authorizes the same
		// caller (head/acl.go).
		if v := md.Get(acl.MetadataKey); len(v) > 0 {
			out = metadata.AppendToOutgoingContext(out, acl.MetadataKey, v[0])
		}
	}
	return conn, out, nil
}

// close closes every cached connection; later forwards answer Unavailable.
func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.conns = nil
}

// forward runs call against the leader and passes its answer through. A
// leader that cannot be reached is Unavailable, so clients retry.
func forward[Req, Resp any](ctx context.Context, f *forwarder, req Req,
	call func(wire.MegaflowServiceClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	var zero Resp
	c, fctx, err := f.leader(ctx)
	if err != nil {
		return zero, err
	}
	resp, err := call(c, fctx, req)
	if err != nil {
		return zero, errs.FromStatus(err)
	}
	return resp, nil
}
