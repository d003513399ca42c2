package testcluster

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/within"
)

// Proxy is a TCP proxy for fault tests: it forwards connections to one
// address until Block, then black-holes them as a firewall's DROP rule
// would: nothing is forwarded either way (bytes wait, as retransmitted
// packets would), and new connections are accepted but carry nothing,
// until Unblock. Connections are never closed by the proxy unless one
// side closes. It lives until the test ends.
type Proxy struct {
	addr string
	mu   sync.Mutex
	cond *sync.Cond
	down bool
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{addr: l.Addr().String()}
	p.cond = sync.NewCond(&p.mu)
	var wg sync.WaitGroup
	var connsMu sync.Mutex
	var conns []net.Conn
	closed := false // under connsMu: a connection accepted from now on is closed at once
	t.Cleanup(func() {
		l.Close()
		p.Unblock()
		connsMu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		connsMu.Unlock()
		within.Wait(t, 30*time.Second, &wg, "the proxy's accept loop and pipes to end once its connections closed")
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				in.Close()
				continue
			}
			connsMu.Lock()
			if closed { // accepted while the cleanup closed the listener
				connsMu.Unlock()
				in.Close()
				out.Close()
				return
			}
			conns = append(conns, in, out)
			connsMu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); p.pipe(out, in) }()
			go func() { defer wg.Done(); p.pipe(in, out) }()
		}
	}()
	return p
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.addr }

// Block starts black-holing.
func (p *Proxy) Block() {
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
}

// Unblock forwards again, what waited first.
func (p *Proxy) Unblock() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
	p.cond.Broadcast()
}

// pipe copies src to dst, holding each read while the proxy is blocked.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		p.wait()
		n, err := src.Read(buf)
		if n > 0 {
			p.wait() // read before the block began: held too
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

func (p *Proxy) wait() {
	p.mu.Lock()
	for p.down {
		p.cond.Wait()
	}
	p.mu.Unlock()
}
