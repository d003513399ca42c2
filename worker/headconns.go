package worker

import (
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// headConns are the worker's gRPC connections to the heads, one per
// address, made on first use and kept until close: the stream goroutine
// and its leader probes share them, so a probe of the other heads while
// the leader is silent opens no new connection to a head already dialled.
// Safe for concurrent use.
type headConns struct {
	creds []grpc.DialOption // transport credentials, and the token's if any

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

func newHeadConns(creds ...grpc.DialOption) *headConns {
	return &headConns{creds: creds, conns: map[string]*grpc.ClientConn{}}
}

// get returns the connection to the head at addr, making it on first use.
// Errors: an address gRPC cannot parse, or get after close.
func (h *headConns) get(addr string) (*grpc.ClientConn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, fmt.Errorf("dial %s: the worker's connections are closed", addr)
	}
	if c, ok := h.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, append(h.creds[:len(h.creds):len(h.creds)],
		// A stream whose packets vanish (a firewall, a black-holing
		// proxy) is noticed in Time+Timeout, not when TCP gives up.
		// The head's EnforcementPolicy allows pings every 5 s.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}))...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	h.conns[addr] = c
	return c, nil
}

// close closes every connection; get fails after it.
func (h *headConns) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, c := range h.conns {
		_ = c.Close()
	}
	h.conns = nil
}
