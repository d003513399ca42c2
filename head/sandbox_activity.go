package head

import (
	"sync"
	"time"
)

// maxActivity bounds the sandboxes a head remembers data-path activity
// for; past it, sandboxes no longer live are forgotten first (prune), and
// a new one is not remembered until there is room.
const maxActivity = 1 << 16

// sandboxActivity is what this head relayed on the data path of each
// sandbox: the calls in flight and when the last one started or ended. It
// is not replicated: each head knows its own calls only (the worker's idle
// timer counts every head's), which the dashboard says. The relay's
// handlers call begin and end from their goroutines; the dashboard reads
// with get. Safe for concurrent use.
type sandboxActivity struct {
	mu   sync.Mutex
	seen map[string]*activity
}

type activity struct {
	inFlight int
	last     time.Time
}

func newSandboxActivity() *sandboxActivity {
	return &sandboxActivity{seen: map[string]*activity{}}
}

// begin records a call to sandbox id starting at now.
func (a *sandboxActivity) begin(id string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	x := a.seen[id]
	if x == nil {
		if len(a.seen) >= maxActivity {
			return
		}
		x = &activity{}
		a.seen[id] = x
	}
	x.inFlight++
	x.last = now
}

// end records a call begun with begin ending at now.
func (a *sandboxActivity) end(id string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if x := a.seen[id]; x != nil {
		x.inFlight = max(0, x.inFlight-1)
		x.last = now
	}
}

// get returns the calls to sandbox id in flight through this head and when
// the last one started or ended (zero: none seen).
func (a *sandboxActivity) get(id string) (inFlight int, last time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if x := a.seen[id]; x != nil {
		return x.inFlight, x.last
	}
	return 0, time.Time{}
}

// prune forgets the sandboxes for which live is false and that have no
// call in flight.
func (a *sandboxActivity) prune(live func(id string) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, x := range a.seen {
		if x.inFlight == 0 && !live(id) {
			delete(a.seen, id)
		}
	}
}
