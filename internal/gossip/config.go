package gossip

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// Config configures a Gossip. Start from DefaultConfig, set NodeName,
// BindAddr and Meta, then call New. New validates it with Validate.
type Config struct {
	// NodeName is the member's unique name in the pool. Required.
	NodeName string
	// BindAddr is the "ip:port" memberlist listens on (UDP and TCP). Port 0
	// picks a free port (tests); LocalAddr then reports the real one. An empty
	// host means 0.0.0.0.
	BindAddr string
	// AdvertiseAddr is the "ip:port" other members use to reach this one.
	// Empty means BindAddr with its real port; when BindAddr's host is
	// unspecified (0.0.0.0), memberlist picks a private address. With
	// BindAddr's port 0, the advertised port is always the real bound one.
	AdvertiseAddr string
	// Meta is advertised to every member; see Meta. Meta.Role is required.
	Meta Meta
	// Join lists the seeds ("host:port") that Join contacts. Empty means
	// this member starts a new pool.
	Join []string
	// Logger receives memberlist's log lines at debug level and this
	// package's own messages. Nil discards them.
	Logger *slog.Logger
	// Timing holds the failure-detection and gossip intervals; see
	// LANTiming and FastTiming.
	Timing Timing
	// EventBuffer is how many events Events holds for a slow consumer before
	// the oldest are dropped. At least 1.
	EventBuffer int
	// RetainDeparted is how long Members keeps reporting dead and left
	// members after they departed. At least 1 s.
	RetainDeparted time.Duration
	// OnMessage, when set, receives every user message another member sent
	// with SendTo (a copy the callee may keep). memberlist calls it from its
	// own goroutines: it must return at once (queue the message, drop it
	// when the queue is full). nil: user messages are dropped.
	OnMessage func(payload []byte)
	// SecretKey, when set, encrypts and authenticates every gossip
	// message with AES-GCM under this key (memberlist's SecretKey): a
	// member without the same key can neither read the pool's messages
	// nor join it, and the pool drops what it sends. 16, 24 or 32 bytes
	// (AES-128, -192, -256); every member must have the same. Nil:
	// plaintext gossip.
	SecretKey []byte
}

// validateKey checks SecretKey's length.
func (c *Config) validateKey() error {
	if n := len(c.SecretKey); n != 0 && n != 16 && n != 24 && n != 32 {
		return fmt.Errorf("gossip: Config.SecretKey is %d bytes: must be 16, 24 or 32", n)
	}
	return nil
}

// DecodeKey parses a gossip key as --gossip-key gives it: standard
// base64 of 32 random bytes (`openssl rand -base64 32`, or megaflow tls
// gossip-key). Errors say what was wrong.
func DecodeKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("gossip key: not base64: %w (want 32 random bytes in base64, e.g. from megaflow tls gossip-key)", err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("gossip key: %d bytes; want 32 random bytes in base64 (e.g. from megaflow tls gossip-key)", len(key))
	}
	return key, nil
}

// Timing is the memberlist timing profile: how often members probe and
// gossip, and therefore how long failure detection takes.
type Timing struct {
	// ProbeInterval is how often a random member is probed.
	ProbeInterval time.Duration
	// ProbeTimeout is how long to wait for a probe's ack; below
	// ProbeInterval.
	ProbeTimeout time.Duration
	// SuspicionMult scales how long a suspect member has to refute before it
	// is declared dead: SuspicionMult * log10(members) * ProbeInterval, at
	// least. At least 1.
	SuspicionMult int
	// GossipInterval is how often queued broadcasts are gossiped.
	GossipInterval time.Duration
	// PushPullInterval is how often the full state is exchanged with a random
	// member (anti-entropy).
	PushPullInterval time.Duration
	// TCPTimeout bounds one TCP exchange (join, push/pull, fallback probe),
	// so it also bounds how long one join attempt can take.
	TCPTimeout time.Duration
	// JoinRetryMax caps the exponential backoff between Join attempts (the
	// first retry waits 50 ms).
	JoinRetryMax time.Duration
	// GossipToTheDead is how long members keep gossiping to a member they
	// declared dead, so that one back within it hears about the pool again
	// without rejoining. 0: memberlist's default (30 s).
	GossipToTheDead time.Duration
}

// LANTiming returns memberlist.DefaultLANConfig's timings: a dead member is
// detected in about 5 s on a small pool.
func LANTiming() Timing {
	c := memberlist.DefaultLANConfig()
	return Timing{
		ProbeInterval:    c.ProbeInterval,
		ProbeTimeout:     c.ProbeTimeout,
		SuspicionMult:    c.SuspicionMult,
		GossipInterval:   c.GossipInterval,
		PushPullInterval: c.PushPullInterval,
		TCPTimeout:       c.TCPTimeout,
		JoinRetryMax:     5 * time.Second,
	}
}

// FastTiming returns a profile for tests on loopback: a shut-down member is
// declared dead in about 1 to 2 s on a pool of 3 to 5. Its probe timeout
// (100 ms) still leaves room for a busy test machine running -race; below
// that, live members were reported dead under load.
func FastTiming() Timing {
	return Timing{
		ProbeInterval:    200 * time.Millisecond,
		ProbeTimeout:     100 * time.Millisecond,
		SuspicionMult:    4,
		GossipInterval:   20 * time.Millisecond,
		PushPullInterval: 1 * time.Second,
		TCPTimeout:       1 * time.Second,
		JoinRetryMax:     200 * time.Millisecond,
		GossipToTheDead:  2 * time.Second,
	}
}

// DefaultConfig returns a Config with LAN timings, a 1024-event buffer and a
// 24 h retention of departed members. NodeName, BindAddr and Meta must still
// be set.
func DefaultConfig() Config {
	return Config{
		Timing:         LANTiming(),
		EventBuffer:    1024,
		RetainDeparted: 24 * time.Hour,
	}
}

// Validate reports the first problem with c, naming the field. New calls
// it; callers may call it earlier to fail fast on flags.
func (c *Config) Validate() error {
	if c.NodeName == "" {
		return errors.New("gossip: Config.NodeName is required")
	}
	if host, _, err := splitHostPort(c.BindAddr); err != nil {
		return fmt.Errorf("gossip: Config.BindAddr: %w", err)
	} else if host != "" && net.ParseIP(host) == nil {
		return fmt.Errorf("gossip: Config.BindAddr %q: host must be an IP address", c.BindAddr)
	}
	if c.AdvertiseAddr != "" {
		host, _, err := splitHostPort(c.AdvertiseAddr)
		if err != nil {
			return fmt.Errorf("gossip: Config.AdvertiseAddr: %w", err)
		}
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			return fmt.Errorf("gossip: Config.AdvertiseAddr %q: host must be a specific IP address", c.AdvertiseAddr)
		}
	}
	if _, err := c.Meta.encode(false); err != nil {
		return fmt.Errorf("gossip: Config.%w", err)
	}
	for i, s := range c.Join {
		if s == "" {
			return fmt.Errorf("gossip: Config.Join[%d] is empty", i)
		}
	}
	if err := c.validateKey(); err != nil {
		return err
	}
	if c.EventBuffer < 1 {
		return fmt.Errorf("gossip: Config.EventBuffer %d: must be at least 1", c.EventBuffer)
	}
	if c.RetainDeparted < time.Second {
		return fmt.Errorf("gossip: Config.RetainDeparted %s: must be at least 1s", c.RetainDeparted)
	}
	return c.Timing.validate()
}

func (t *Timing) validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"ProbeInterval", t.ProbeInterval},
		{"ProbeTimeout", t.ProbeTimeout},
		{"GossipInterval", t.GossipInterval},
		{"PushPullInterval", t.PushPullInterval},
		{"TCPTimeout", t.TCPTimeout},
		{"JoinRetryMax", t.JoinRetryMax},
	} {
		if d.v < time.Millisecond {
			return fmt.Errorf("gossip: Config.Timing.%s %s: must be at least 1ms", d.name, d.v)
		}
	}
	if t.ProbeTimeout >= t.ProbeInterval {
		return fmt.Errorf("gossip: Config.Timing.ProbeTimeout %s: must be below ProbeInterval %s",
			t.ProbeTimeout, t.ProbeInterval)
	}
	if t.SuspicionMult < 1 {
		return fmt.Errorf("gossip: Config.Timing.SuspicionMult %d: must be at least 1", t.SuspicionMult)
	}
	return nil
}

// splitHostPort parses "host:port" with a numeric port in [0, 65535].
func splitHostPort(addr string) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q: want host:port: %w", addr, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: port must be a number in [0, 65535]", addr)
	}
	return host, port, nil
}

// memberlistConfig translates c into memberlist's configuration. The
// delegates are set by New.
func (c *Config) memberlistConfig() *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.NodeName
	host, port, _ := splitHostPort(c.BindAddr)
	if host == "" {
		host = "0.0.0.0"
	}
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertiseAddr, mc.AdvertisePort = "", port
	if c.AdvertiseAddr != "" {
		ah, ap, _ := splitHostPort(c.AdvertiseAddr)
		mc.AdvertiseAddr, mc.AdvertisePort = ah, ap
	} else if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		mc.AdvertiseAddr = host
	}
	t := c.Timing
	mc.ProbeInterval = t.ProbeInterval
	mc.ProbeTimeout = t.ProbeTimeout
	mc.SuspicionMult = t.SuspicionMult
	mc.GossipInterval = t.GossipInterval
	mc.PushPullInterval = t.PushPullInterval
	mc.TCPTimeout = t.TCPTimeout
	if t.GossipToTheDead > 0 {
		mc.GossipToTheDeadTime = t.GossipToTheDead
	}
	if len(c.SecretKey) > 0 {
		mc.SecretKey = append([]byte(nil), c.SecretKey...)
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	return mc
}
