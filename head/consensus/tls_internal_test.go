package consensus

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/tlsconfig/tlstest"
	"github.com/megaflow/megaflow/internal/within"
)

// The Raft stream layer with TLS takes heads only: a head's connection
// carries bytes both ways; a plaintext peer, a worker's certificate and
// another cluster's head are refused by the listener, which says so.
func TestTLSStreamTakesHeadsOnly(t *testing.T) {
	set := tlstest.New(t, t.TempDir())
	other := tlstest.New(t, t.TempDir())
	srv := set.Store(t, tlsconfig.RoleHead, "h1")
	stores := map[string]*tlsconfig.Store{
		"head":          set.Store(t, tlsconfig.RoleHead, "h2"),
		"worker":        set.Store(t, tlsconfig.RoleWorker, "w1"),
		"client":        set.Store(t, tlsconfig.RoleClient, "c1"),
		"another CA":    other.Store(t, tlsconfig.RoleHead, "h9"),
		"no TLS at all": nil,
	}
	refused := make(chan error, 16)
	s, err := listenTCP("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	s.tls = &TransportTLS{
		Server:    func() *tls.Config { return srv.ServerConfig(nil, tlsconfig.RoleHead) },
		Client:    func() *tls.Config { return srv.ClientConfig(tlsconfig.RoleHead) },
		OnRefused: func(_ net.Addr, err error) { refused <- err },
	}
	s.handshakeTimeout = 10 * time.Second
	defer s.closeAll()
	// The server echoes one byte per connection, as a raft handler reads
	// a command and answers.
	served := make(chan struct{})
	go func() {
		defer close(served)
		for {
			c, err := s.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var b [8]byte
				if _, err := io.ReadFull(c, b[:]); err == nil {
					_, _ = c.Write(b[:1])
				}
			}()
		}
	}()
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			var c net.Conn
			if st == nil {
				c, err = net.DialTimeout("tcp", s.Addr().String(), 5*time.Second)
			} else {
				dial := &tcpStream{tls: &TransportTLS{Client: func() *tls.Config { return st.ClientConfig(tlsconfig.RoleHead) }}}
				c, err = dial.dialTLS(s.Addr().String(), 5*time.Second)
			}
			ok := name == "head"
			if err == nil {
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				var b [1]byte
				// A raft command is more than a TLS record header: a
				// plaintext one is seen as not TLS at once.
				if _, err = c.Write([]byte{1, 2, 3, 4, 5, 6, 7, 8}); err == nil {
					_, err = io.ReadFull(c, b[:])
				}
				_ = c.Close()
			}
			if ok {
				if err != nil {
					t.Fatalf("a head was refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("the connection carried a byte both ways")
			}
			select {
			case rerr := <-refused:
				t.Logf("client: %v; listener: %v", err, rerr)
			case <-time.After(10 * time.Second):
				t.Fatal("the listener did not report the refused handshake")
			}
		})
	}
	s.closeAll()
	within.Recv(t, 10*time.Second, served, "the listener's accept loop to end once closed")
}
