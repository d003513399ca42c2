package consensus

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// errStreamClosed is returned by Dial once the stream layer is closed.
var errStreamClosed = errors.New("consensus: raft transport closed")

// tcpStream is Raft's TCP stream layer, like raft.TCPStreamLayer, except
// that it tracks every connection it accepts or dials so that they can all
// be closed at once: by closeAll, at the end of Shutdown (raft's
// NetworkTransport closes only its listener, leaving peers' handlers blocked
// on open connections), and at the start of Kill, where closing everything
// at once is what a crashed process looks like to its peers.
//
// With tls set, each accepted connection is served TLS (the handshake runs
// on the first Read, on raft's connection goroutine, bounded by
// handshakeTimeout) and each dialled one completes a TLS handshake before
// Dial returns.
type tcpStream struct {
	ln        net.Listener
	advertise net.Addr

	tls              *TransportTLS // nil: plaintext
	handshakeTimeout time.Duration

	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool // closeAll ran: no new connections
}

var _ raft.StreamLayer = (*tcpStream)(nil)

// listenTCP binds bind and works out the advertised address: advertise, or
// the bound address, with the bound port when advertise's port is 0.
func listenTCP(bind, advertise string) (*tcpStream, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	bound := ln.Addr().(*net.TCPAddr)
	adv := &net.TCPAddr{IP: bound.IP, Port: bound.Port}
	if advertise != "" {
		host, port, _ := splitHostPort(advertise) // checked by Validate
		adv.IP = net.ParseIP(host)
		if port != 0 {
			adv.Port = port
		}
	}
	if adv.IP == nil || adv.IP.IsUnspecified() {
		_ = ln.Close()
		return nil, errors.New("consensus: raft transport address is not advertisable; set Config.AdvertiseAddr")
	}
	return &tcpStream{ln: ln, advertise: adv, conns: make(map[*trackedConn]struct{})}, nil
}

// Accept waits for the next inbound connection (called by raft's transport
// goroutine).
func (s *tcpStream) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	if s.tls != nil {
		c = &serverConn{Conn: tls.Server(c, s.tls.Server()), raw: c, timeout: s.handshakeTimeout, onRefused: s.tls.OnRefused}
	}
	return s.track(c)
}

// Dial opens an outbound connection (called by raft's goroutines).
func (s *tcpStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errStreamClosed
	}
	c, err := s.dialTLS(string(address), timeout)
	if err != nil {
		return nil, err
	}
	return s.track(c)
}

// dialTLS dials address and, with s.tls, completes a TLS handshake within
// timeout.
func (s *tcpStream) dialTLS(address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", address, timeout)
	if err != nil || s.tls == nil {
		return c, err
	}
	tc := tls.Client(c, s.tls.Client())
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("raft TLS handshake with %s: %w", address, err)
	}
	return tc, nil
}

// Close closes the listener only; raft's transport calls it on Close.
func (s *tcpStream) Close() error { return s.ln.Close() }

// Addr returns the advertised address.
func (s *tcpStream) Addr() net.Addr { return s.advertise }

// closeAll closes the listener and every open connection, and refuses new
// ones from then on.
func (s *tcpStream) closeAll() {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = make(map[*trackedConn]struct{})
	s.mu.Unlock()
	_ = s.ln.Close()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

func (s *tcpStream) track(c net.Conn) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return nil, errStreamClosed
	}
	tc := &trackedConn{Conn: c, s: s}
	s.conns[tc] = struct{}{}
	return tc, nil
}

// trackedConn forgets itself on Close.
type trackedConn struct {
	net.Conn
	s *tcpStream
}

func (c *trackedConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// serverConn is an accepted TLS connection whose handshake runs, bounded
// by timeout, on the first Read (raft's connection goroutine, not its
// accept loop), and reports a failed one to onRefused.
type serverConn struct {
	*tls.Conn
	raw       net.Conn
	timeout   time.Duration
	onRefused func(net.Addr, error)
	once      sync.Once
	err       error
}

// Read completes the handshake first, then reads.
func (c *serverConn) Read(b []byte) (int, error) {
	c.once.Do(func() {
		_ = c.raw.SetDeadline(time.Now().Add(c.timeout))
		c.err = c.Conn.Handshake()
		_ = c.raw.SetDeadline(time.Time{})
		if c.err != nil && c.onRefused != nil {
			c.onRefused(c.raw.RemoteAddr(), c.err)
		}
	})
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(b)
}
