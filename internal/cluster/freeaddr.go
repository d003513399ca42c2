package cluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

// FreeAddr returns a loopback address whose port was free, for TCP and
// UDP (gossip uses both), a moment ago. Ports come from 15000-29999: below
// the kernel's ephemeral range (32768+ on Linux), so that a killed head's
// port is not handed to some outgoing connection before its restart, and
// below the workers' default service ports (30000+).
func FreeAddr() (string, error) {
	for range 1000 {
		addr := fmt.Sprintf("127.0.0.1:%d", ports.next())
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		return addr, nil
	}
	return "", fmt.Errorf("free port: none of 1000 tries in %d-%d was free", portLow, portLow+portSpan-1)
}

// The range FreeAddr walks: 15000-29999.
const (
	portLow  = 15000
	portSpan = 15000
)

// ports is this process's walk over the range. A cluster's addresses are
// all picked before its heads bind them, so a pick that is random each
// time can hand the same free port to two members of one cluster (about
// one 3-head start in 400: "bind: address already in use"). The walk
// starts at a random port (test processes of other packages run beside
// this one) and moves one port per call, so one process is never handed a
// port twice within 15,000 calls.
var ports portWalk

// portWalk is a position in the range; safe for concurrent use.
type portWalk struct {
	mu      sync.Mutex
	started bool
	at      int
}

// next returns the next port of the walk.
func (w *portWalk) next() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started {
		w.at, w.started = rand.IntN(portSpan), true
	}
	p := portLow + w.at
	w.at = (w.at + 1) % portSpan
	return p
}
