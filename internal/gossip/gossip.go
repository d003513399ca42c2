// Package gossip owns cluster membership: which heads and workers are alive
// and what each advertises (role, node id, Raft and gRPC addresses, worker
// capacity and labels), through hashicorp/memberlist (SWIM failure detection
// over UDP and TCP). Heads and workers import it; memberlist itself does not
// leave this package.
//
// Membership is a hint, never state: the head leader turns joins and deaths
// into Raft commands, and nothing here changes scheduling state directly.
//
// A Gossip's life: New (binds and starts memberlist), Join (contacts the
// seeds, retrying), then Members and Events while it runs, UpdateMeta when
// what it advertises changes, and finally Leave (optional, so others see
// "left" rather than "dead") and Shutdown.
package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
)

// ErrShutdown is returned by Join, Leave and UpdateMeta after Shutdown.
var ErrShutdown = errors.New("gossip: shut down")

// Gossip is this process's membership in the pool. Its methods are safe for
// concurrent use. It owns memberlist's goroutines; none of its own runs in
// the background.
type Gossip struct {
	cfg       Config
	log       *slog.Logger
	ml        *memberlist.Memberlist
	localAddr string
	now       func() time.Time // for pruning departed members

	metaMu  sync.Mutex
	meta    []byte // encoded local Meta, served to memberlist by NodeMeta
	local   Meta   // decoded form of meta
	leaving bool   // Leave was called: meta carries the leaving mark

	mu      sync.Mutex // guards members, events' closing, dropped
	members map[string]*record
	events  chan Event
	closed  bool
	dropped uint64

	lifeMu sync.Mutex // serializes Leave and Shutdown
	shut   atomic.Bool

	joinAttempts atomic.Int64 // for tests
}

// record is one member as last reported by memberlist's callbacks.
type record struct {
	m        Member
	departed time.Time // when it became dead or left; zero while alive
}

// New validates cfg, binds memberlist's UDP and TCP listeners and starts its
// probe and gossip goroutines. The pool then holds only this member; call
// Join to contact the seeds. Call Shutdown to stop everything New started.
// When BindAddr is in use (by TCP or UDP), the error matches
// syscall.EADDRINUSE with errors.Is.
func New(cfg Config) (*Gossip, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Join = slices.Clone(cfg.Join)
	cfg.Meta = cfg.Meta.Clone()
	meta, _ := cfg.Meta.encode(false) // checked by Validate
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "gossip", "node", cfg.NodeName)
	g := &Gossip{
		cfg:     cfg,
		log:     log,
		now:     time.Now,
		meta:    meta,
		local:   cfg.Meta.Clone(),
		members: make(map[string]*record),
		events:  make(chan Event, cfg.EventBuffer),
	}
	mc := cfg.memberlistConfig()
	d := &delegate{g: g}
	mc.Delegate = d
	mc.Events = d
	mc.Logger = newStdLogger(log)
	// Create reports this member's own join through the delegate before it
	// returns, so the local record exists below.
	ml, err := memberlist.Create(mc)
	if err != nil {
		// memberlist (v0.7.0, net_transport.go and memberlist.go) formats
		// the errors of its TCP and UDP listeners with %v, twice over
		// ("could not set up network transport: failed to start TCP
		// listener on ...: listen tcp ...: bind: address already in use"),
		// so their *net.OpError and its syscall.EADDRINUSE no longer
		// unwrap. A memberlist that wraps them some day is left as it is;
		// until then the text the errno prints (on Linux and macOS) is all
		// that is left (memberlist's own bind retry matches the same text),
		// and the errno is put back so that callers (megaflow up's hint)
		// can tell an address in use with errors.Is.
		if !errors.Is(err, syscall.EADDRINUSE) && strings.Contains(err.Error(), "address already in use") {
			return nil, fmt.Errorf("gossip: start memberlist on %s: %w (%w)", cfg.BindAddr, err, syscall.EADDRINUSE)
		}
		return nil, fmt.Errorf("gossip: start memberlist on %s: %w", cfg.BindAddr, err)
	}
	g.ml = ml
	g.mu.Lock()
	if r, ok := g.members[cfg.NodeName]; ok {
		g.localAddr = r.m.Addr
	}
	g.mu.Unlock()
	if g.localAddr == "" {
		_ = ml.Shutdown()
		return nil, fmt.Errorf("gossip: memberlist did not report the local member %q", cfg.NodeName)
	}
	log.Debug("gossip started", "addr", g.localAddr)
	return g, nil
}

// LocalAddr returns the "ip:port" other members reach this one at: the
// advertised address, with the real port when BindAddr asked for port 0.
func (g *Gossip) LocalAddr() string { return g.localAddr }

// Join contacts the configured seeds (Config.Join) until at least one
// answers, retrying with exponential backoff (50 ms doubling up to
// Timing.JoinRetryMax) while ctx lasts, because seeds may not be up yet.
// Seeds equal to this member's own address are skipped; with no other seed
// Join returns nil at once (this member starts the pool). One attempt can
// take up to Timing.TCPTimeout per unreachable seed, so Join may return that
// long after ctx ends. The caller (the head's or worker's startup) calls it
// once after New, from its own goroutine; memberlist keeps the pool together
// afterwards.
func (g *Gossip) Join(ctx context.Context) error {
	var seeds []string
	for _, s := range g.cfg.Join {
		if s != g.localAddr && s != g.cfg.BindAddr {
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		return nil
	}
	backoff := 50 * time.Millisecond
	var lastErr error
	for attempt := 1; ; attempt++ {
		if g.shut.Load() {
			return ErrShutdown
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("gossip: join %s: %w (last error: %v)", strings.Join(seeds, ","), err, lastErr)
		}
		n, err := g.ml.Join(seeds)
		g.joinAttempts.Add(1)
		if n > 0 {
			g.log.Info("joined gossip pool", "seeds_contacted", n, "attempts", attempt)
			return nil
		}
		lastErr = err
		// Seeds starting at the same time fail the first tries: say so
		// at WARN from the fourth on (about a second), with what to check.
		level := slog.LevelDebug
		if attempt > 3 {
			level = slog.LevelWarn
		}
		g.log.Log(ctx, level, "cannot join the gossip pool yet; retrying", "seeds", seeds, "attempt", attempt, "err", err,
			"retry_in", backoff, "check", "that a head runs at each --join address (its --gossip-addr), that this host reaches it "+
				"over TCP and UDP on that port, and that no firewall drops it")
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("gossip: join %s: %w (last error: %v)", strings.Join(seeds, ","), ctx.Err(), lastErr)
		case <-t.C:
		}
		backoff = min(2*backoff, g.cfg.Timing.JoinRetryMax)
	}
}

// JoinOnce contacts the configured seeds (Config.Join) once, and returns
// how many answered. A member whose pool lost every seed (a worker whose
// heads all restarted at once: they rejoin one another, not the worker,
// and the worker holds them dead) calls it while it knows no live seed:
// memberlist never contacts members it holds dead again, so without a new
// join the two sides stay apart. It takes up to Timing.TCPTimeout per
// unreachable seed. Errors: ErrShutdown, memberlist's join error when no
// seed answered.
func (g *Gossip) JoinOnce() (int, error) {
	if g.shut.Load() {
		return 0, ErrShutdown
	}
	var seeds []string
	for _, s := range g.cfg.Join {
		if s != g.localAddr && s != g.cfg.BindAddr {
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		return 0, nil
	}
	n, err := g.ml.Join(seeds)
	g.joinAttempts.Add(1)
	if n > 0 {
		return n, nil
	}
	return 0, err
}

// Members returns every member this one knows of, itself included, sorted
// by name: live members, and dead or left ones for Config.RetainDeparted
// after they departed. The result is a copy. Any goroutine may call it, for
// example to resynchronise after events were dropped.
func (g *Gossip) Members() []Member {
	g.mu.Lock()
	g.pruneLocked()
	out := make([]Member, 0, len(g.members))
	for _, r := range g.members {
		m := r.m
		m.Meta = m.Meta.Clone()
		out = append(out, m)
	}
	g.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Events returns the channel of membership changes, this member's own join
// first. It holds Config.EventBuffer events; when the consumer falls behind,
// the oldest are dropped (counted by DroppedEvents) so memberlist's
// goroutines never block, and the consumer can always resynchronise from
// Members. There is one channel per Gossip: give it one consumer (the head's
// membership reconciler, or the worker's head tracker). Shutdown closes it.
func (g *Gossip) Events() <-chan Event { return g.events }

// DroppedEvents returns how many events were dropped because the Events
// consumer fell behind.
func (g *Gossip) DroppedEvents() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dropped
}

// UpdateMeta replaces what this member advertises and re-advertises it
// (memberlist UpdateNode). It returns an error wrapping ErrMetaTooLarge,
// without changing anything, when meta does not fit. It waits up to
// Timing.TCPTimeout for the update to be broadcast; a timeout error leaves
// the new Meta in place, and gossip spreads it later. Callers (the worker
// when its free capacity changes, the head when its addresses change) may
// call it from any goroutine.
func (g *Gossip) UpdateMeta(meta Meta) error {
	if g.shut.Load() {
		return ErrShutdown
	}
	g.metaMu.Lock()
	b, err := meta.encode(g.leaving)
	if err == nil {
		g.meta, g.local = b, meta.Clone()
	}
	g.metaMu.Unlock()
	if err != nil {
		return fmt.Errorf("gossip: UpdateMeta: %w", err)
	}
	if err := g.ml.UpdateNode(g.cfg.Timing.TCPTimeout); err != nil {
		return fmt.Errorf("gossip: UpdateMeta: %w", err)
	}
	return nil
}

// Leave tells the pool this member is going away, so that the others mark
// it "left" rather than "dead", waiting up to timeout in all (0: no limit)
// for the messages to be broadcast. It takes two steps: it re-advertises its
// Meta with a leaving mark (memberlist's callbacks do not distinguish a leave
// from a death, so receivers read the mark), then sends memberlist's leave.
// A member that missed the marked Meta reports the departure as dead. The
// member keeps answering probes until Shutdown, which should follow. Call it
// from the process's shutdown path.
func (g *Gossip) Leave(timeout time.Duration) error {
	g.lifeMu.Lock()
	defer g.lifeMu.Unlock()
	if g.shut.Load() {
		return ErrShutdown
	}
	start := time.Now()
	g.metaMu.Lock()
	g.leaving = true
	g.meta, _ = g.local.encode(true) // fits: encode(false) kept room for it
	g.metaMu.Unlock()
	if err := g.ml.UpdateNode(timeout); err != nil {
		g.log.Debug("leaving mark not confirmed broadcast; leaving anyway", "err", err)
	}
	rest := time.Duration(0)
	if timeout > 0 {
		rest = max(timeout-time.Since(start), time.Millisecond)
	}
	if err := g.ml.Leave(rest); err != nil {
		return fmt.Errorf("gossip: leave: %w", err)
	}
	return nil
}

// Shutdown stops memberlist (listeners and goroutines) without telling the
// pool, which then declares this member dead (call Leave first for a clean
// exit), and closes the Events channel. It is safe to call more than once.
func (g *Gossip) Shutdown() error {
	g.lifeMu.Lock()
	defer g.lifeMu.Unlock()
	if g.shut.Swap(true) {
		return nil
	}
	err := g.ml.Shutdown()
	g.mu.Lock()
	g.closed = true
	close(g.events)
	g.mu.Unlock()
	if err != nil {
		return fmt.Errorf("gossip: shutdown: %w", err)
	}
	return nil
}

// update records what memberlist reported about n and queues the event. It
// runs inside memberlist's callbacks, under memberlist's node lock, which is
// the only place n's fields can be read without a data race. n.State is not
// set in these callbacks (memberlist keeps the state beside the Node), so
// the status follows from the callback and the leaving mark in n.Meta.
func (g *Gossip) update(kind EventKind, n *memberlist.Node) {
	m := Member{
		Name:   n.Name,
		Addr:   net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))),
		Status: StatusAlive,
	}
	meta, leaving, err := decodeMeta(n.Meta)
	if err != nil {
		g.log.Debug("ignoring undecodable member meta", "member", n.Name, "err", err)
	}
	m.Meta = meta
	if kind == EventLeave {
		if leaving {
			m.Status = StatusLeft
		} else {
			kind, m.Status = EventDead, StatusDead
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r := &record{m: m}
	if m.Status != StatusAlive {
		r.departed = g.now()
		g.pruneLocked()
	}
	g.members[m.Name] = r
	if g.closed || (kind == EventUpdate && leaving) {
		// The leaving mark is not news to consumers: the leave follows.
		return
	}
	ev := Event{Kind: kind, Member: m}
	ev.Member.Meta = m.Meta.Clone()
	for {
		select {
		case g.events <- ev:
			return
		default:
		}
		// Full: drop the oldest. The consumer may take one meanwhile, in
		// which case nothing is dropped and the next send succeeds.
		select {
		case <-g.events:
			g.dropped++
		default:
		}
	}
}

// pruneLocked forgets members that departed more than RetainDeparted ago.
func (g *Gossip) pruneLocked() {
	cutoff := g.now().Add(-g.cfg.RetainDeparted)
	for name, r := range g.members {
		if !r.departed.IsZero() && r.departed.Before(cutoff) {
			delete(g.members, name)
		}
	}
}

// SendTo sends payload to the member named name over TCP (memberlist's
// SendReliable), at the last address this member learned for it, where its
// Config.OnMessage receives it. Gossip's verdict on the member is not
// consulted: a member reported dead (or left) is tried too, because a
// verdict is a guess from missed probes (a busy host misses them) while a
// TCP exchange that succeeds is proof, and the callers' protocol (worker
// leases) must not lapse on a false suspicion. It blocks for up to
// Timing.TCPTimeout: call it from a goroutine of the caller's, never from
// OnMessage. Errors: no member of that name known (never seen, or
// departed more than RetainDeparted ago), ErrShutdown, or the
// connection's (an unreachable member: refused, or no answer within
// Timing.TCPTimeout).
func (g *Gossip) SendTo(name string, payload []byte) error {
	if g.shut.Load() {
		return ErrShutdown
	}
	// The address comes from this package's own record, copied under
	// memberlist's node lock (update): the *Node that ml.Members returns
	// is memberlist's own, written by its packet handler while we read it.
	g.mu.Lock()
	var addr string
	if r, ok := g.members[name]; ok {
		addr = r.m.Addr
	}
	g.mu.Unlock()
	if addr == "" {
		return fmt.Errorf("gossip: send to %s: no member of that name known", name)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("gossip: send to %s: bad address %q: %w", name, addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return fmt.Errorf("gossip: send to %s: bad port in %q: %w", name, addr, err)
	}
	n := &memberlist.Node{Name: name, Addr: net.ParseIP(host), Port: uint16(p)}
	if err := g.ml.SendReliable(n, payload); err != nil {
		return fmt.Errorf("gossip: send to %s: %w", name, err)
	}
	return nil
}
