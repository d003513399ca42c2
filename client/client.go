// Package client is MegaFlow's Go client library. It talks to the heads over
// the wire API only: a program that imports it links no Raft, Docker or NVML
// code. A Client finds the leader among the heads it is given, follows it
// through leader changes, and retries calls that are safe to retry.
//
// Typical use:
//
//	c, err := client.Dial(ctx, []string{"10.0.0.1:7070", "10.0.0.2:7070"})
//	if err != nil { ... }
//	defer c.Close()
//	res, err := c.Submit(ctx, &client.GraphSpec{Id: "step-42", Tasks: tasks})
//	g, err := c.Wait(ctx, res.GraphId)
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// EnvHeads is the environment variable Dial reads when given no head
// addresses: a comma-separated list of host:port.
const EnvHeads = "MEGAFLOW_HEADS"

// Option configures a Client.
type Option func(*options)

type options struct {
	dialOptions []grpc.DialOption
	logger      *slog.Logger
	backoffMin  time.Duration
	backoffMax  time.Duration
	// clock times the waits between retries and stamps the ids Submit
	// generates; nil means clock.Real.
	clock clock.Clock
	// tls is the heads' TLS (WithTLS); nil: plaintext.
	tls *tls.Config
}

// WithDialOptions adds gRPC dial options (TLS credentials, interceptors).
// Without credentials the connection is plaintext.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

// WithLogger sets the logger for retries and leader changes (debug level).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithBackoff sets the bounds of the jittered exponential backoff between
// retries when no head answers (defaults 50 ms and 2 s).
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) { o.backoffMin, o.backoffMax = min, max }
}

// WithClock sets the clock the client waits on between retries (call,
// Watch, Logs) and stamps generated graph ids with; nil, the default, is
// the system clock. Tests pass a clock.Fake to drive the backoff without
// sleeping. It does not touch the deadlines of ctx, which gRPC and the
// context package keep on the system clock.
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// Client is a connection to a MegaFlow head cluster. It is safe for
// concurrent use by many goroutines. Close it when done.
type Client struct {
	opts options

	mu      sync.Mutex
	heads   []string // in the order given, plus leaders learned later
	conns   map[string]*grpc.ClientConn
	current string // the head calls go to: the leader when known
	closed  bool

	// diagnosed holds the head addresses diagnoseTLS has probed (each
	// once). Guarded by mu.
	diagnosed map[string]bool

	// seen is the highest Raft index this client has written or read;
	// reads wait for it (read your writes on any head). Guarded by mu.
	seen uint64
}

// observe raises the client's session index to index.
func (c *Client) observe(index uint64) {
	c.mu.Lock()
	c.seen = max(c.seen, index)
	c.mu.Unlock()
}

// sessionIndex returns the highest index the client has seen.
func (c *Client) sessionIndex() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen
}

// Dial returns a Client for the heads at the given gRPC addresses
// (host:port); with none, it reads MEGAFLOW_HEADS. It does not wait for a
// connection: the first call finds a head that answers and, through it, the
// leader. Errors: errs.InvalidArgument when no address is given.
func Dial(ctx context.Context, heads []string, opts ...Option) (*Client, error) {
	o := options{backoffMin: 50 * time.Millisecond, backoffMax: 2 * time.Second, logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	if o.clock == nil {
		o.clock = clock.Real()
	}
	if len(heads) == 0 {
		for _, h := range strings.Split(os.Getenv(EnvHeads), ",") {
			if h = strings.TrimSpace(h); h != "" {
				heads = append(heads, h)
			}
		}
	}
	if len(heads) == 0 {
		return nil, errs.New(errs.InvalidArgument, "client: no head address given; pass host:port addresses or set %s", EnvHeads)
	}
	if err := anyResolves(ctx, heads); err != nil {
		return nil, err
	}
	c := &Client{opts: o, conns: make(map[string]*grpc.ClientConn)}
	for _, h := range heads {
		if err := c.addHead(h); err != nil {
			c.Close()
			return nil, err
		}
	}
	c.current = c.heads[0]
	return c, ctx.Err()
}

// resolveTimeout bounds the name lookups of Dial. It is a context deadline
// for the resolver, so it stays on the system clock (not options.clock).
const resolveTimeout = 3 * time.Second

// anyResolves returns an errs.InvalidArgument error when no head address's
// host resolves because the name does not exist (DNS answers "no such
// host"): a retry cannot fix that, so Dial fails at once instead of each
// call waiting out its context. One address that resolves, an IP address,
// a target with a scheme ("dns:///h:p", "unix:...") or a lookup that fails
// for another reason (a DNS server down) lets Dial go on: the heads are
// found by retrying as usual.
func anyResolves(ctx context.Context, heads []string) error {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	var missing []string
	for _, addr := range heads {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || host == "" || strings.Contains(addr, ":/") || net.ParseIP(host) != nil {
			return nil
		}
		_, err = net.DefaultResolver.LookupHost(ctx, host)
		var de *net.DNSError
		if err == nil || !errors.As(err, &de) || !de.IsNotFound {
			return nil
		}
		missing = append(missing, fmt.Sprintf("%q (%v)", addr, err))
	}
	return errs.New(errs.InvalidArgument, "client: no head address resolves: %s; check the addresses (--heads, %s)",
		strings.Join(missing, ", "), EnvHeads)
}

// addHead registers and lazily dials addr. Callers hold c.mu or own c alone.
func (c *Client) addHead(addr string) error {
	if _, ok := c.conns[addr]; ok {
		return nil
	}
	creds := insecure.NewCredentials()
	if c.opts.tls != nil {
		creds = credentials.NewTLS(c.opts.tls)
	}
	dopts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, c.opts.dialOptions...)
	conn, err := grpc.NewClient(addr, dopts...)
	if err != nil {
		return errs.New(errs.InvalidArgument, "client: head address %q: %v", addr, err)
	}
	c.conns[addr] = conn
	c.heads = append(c.heads, addr)
	return nil
}

// Close closes the connections to every head.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var err error
	for _, conn := range c.conns {
		err = errors.Join(err, conn.Close())
	}
	c.conns = map[string]*grpc.ClientConn{}
	return err
}

// Heads returns the head addresses the client knows, the current one first.
func (c *Client) Heads() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := []string{c.current}
	for _, h := range c.heads {
		if h != c.current {
			out = append(out, h)
		}
	}
	return out
}

// pick returns the head to call now and its connection.
func (c *Client) pick() (string, *grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", nil, errs.New(errs.FailedPrecondition, "client: closed")
	}
	return c.current, c.conns[c.current], nil
}

// follow switches to the leader named by a NotLeader answer.
func (c *Client) follow(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || addr == "" {
		return
	}
	if err := c.addHead(addr); err == nil && c.current != addr {
		c.opts.logger.Debug("following leader", "head", addr)
		c.current = addr
	}
}

// rotate moves off a head that did not answer, to the next one in order.
func (c *Client) rotate(from string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current != from || len(c.heads) < 2 {
		return
	}
	for i, h := range c.heads {
		if h == from {
			c.current = c.heads[(i+1)%len(c.heads)]
			c.opts.logger.Debug("head did not answer; trying next", "from", from, "to", c.current)
			return
		}
	}
}

// call runs fn against the current head and retries, until ctx ends, on
// answers that another head or a later try can change: no leader yet, a head
// that is down, a NotLeader redirect. Only idempotent calls go through it.
func (c *Client) call(ctx context.Context, fn func(context.Context, wire.MegaflowServiceClient) error) error {
	return c.callConn(ctx, func(ctx context.Context, conn grpc.ClientConnInterface) error {
		return fn(ctx, wire.NewMegaflowServiceClient(conn))
	})
}

// callConn is call for any service of the heads: fn gets the current head's
// connection.
func (c *Client) callConn(ctx context.Context, fn func(context.Context, grpc.ClientConnInterface) error) error {
	delay := c.opts.backoffMin
	for {
		addr, conn, err := c.pick()
		if err != nil {
			return err
		}
		err = errs.FromStatus(fn(ctx, conn))
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last error from head %s: %v)", ctx.Err(), addr, err)
		}
		var e *errs.Error
		if !errors.As(err, &e) || !errs.Retryable(err) {
			return err
		}
		wait := delay
		switch e.Class {
		case errs.NotLeader:
			if e.LeaderAddr != "" && e.LeaderAddr != addr {
				c.follow(e.LeaderAddr)
				continue
			}
		case errs.Unavailable:
			if terr := c.diagnose(ctx, addr, conn); terr != nil {
				return terr
			}
			c.rotate(addr)
		case errs.ResourceExhausted:
			if e.RetryAfter > 0 {
				wait = e.RetryAfter
			}
		}
		if !clock.Sleep(c.opts.clock, jitter(wait), ctx.Done()) {
			return fmt.Errorf("%w (last error from head %s: %v)", ctx.Err(), addr, err)
		}
		delay = min(2*delay, c.opts.backoffMax)
	}
}

// diagnose runs diagnoseTLS for addr the first time its connection fails
// (TRANSIENT_FAILURE: a head that answers Unavailable itself, as during
// an election, is not probed), and returns its error (a TLS mismatch) or
// nil.
func (c *Client) diagnose(ctx context.Context, addr string, conn *grpc.ClientConn) error {
	if conn == nil || conn.GetState() != connectivity.TransientFailure {
		return nil
	}
	c.mu.Lock()
	if c.diagnosed == nil {
		c.diagnosed = map[string]bool{}
	}
	done := c.diagnosed[addr]
	c.diagnosed[addr] = true
	c.mu.Unlock()
	if done || strings.Contains(addr, "/") {
		return nil
	}
	return diagnoseTLS(ctx, addr, c.opts.tls)
}

// jitter spreads d over [d/2, d) so clients retrying together do not collide.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}
