package gossip

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// New's error for a bind address in use, by TCP or by UDP, matches
// syscall.EADDRINUSE, though memberlist formats it with %v (megaflow up
// tells the user which flag to change by it).
func TestNewAddressInUseIsEADDRINUSE(t *testing.T) {
	cases := map[string]func(t *testing.T) (addr string, release func()){
		"tcp": func(t *testing.T) (string, func()) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			return l.Addr().String(), func() { l.Close() }
		},
		"udp": func(t *testing.T) (string, func()) {
			c, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			return c.LocalAddr().String(), func() { c.Close() }
		},
	}
	for name, occupy := range cases {
		t.Run(name, func(t *testing.T) {
			addr, release := occupy(t)
			defer release()
			cfg := testConfig("n1", RoleHead)
			cfg.BindAddr = addr
			g, err := New(cfg)
			if err == nil {
				g.Shutdown()
				t.Fatalf("New on %s, which %s holds: no error", addr, name)
			}
			if !errors.Is(err, syscall.EADDRINUSE) {
				t.Fatalf("New on %s, which %s holds: %v; want it to match syscall.EADDRINUSE", addr, name, err)
			}
		})
	}
}
