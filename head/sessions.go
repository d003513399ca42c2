package head

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// The leader's sessions: the live stream of each worker, when the leader
// last heard from it (its lease), and duplicate-process detection.

// session is a worker's live stream on this leader.
type session struct {
	workerID string
	instance string       // WorkerInfo.instance of the worker process
	lastSeen atomic.Int64 // unix nanos of the last message received
	send     chan *wire.HeadMessage
	done     chan struct{}
}

// duplicateWindow is how recently a worker's stream must have spoken for a
// second worker process announcing the same id to be refused: a worker
// sends a heartbeat every 2 s by default, and a restarted worker whose old
// stream went quiet longer ago takes its id over.
const duplicateWindow = 10 * time.Second

// liveStream returns the worker's live stream, if any.
func (ss *sessions) liveStream(id string) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.live[id]
}

// duplicateOf returns an error when another worker process that spoke
// within duplicateWindow holds worker info.Id's stream: two workers were
// given one id, which would confuse the table. Nil otherwise.
func (ss *sessions) duplicateOf(info *wire.WorkerInfo, now time.Time) error {
	old := ss.liveStream(info.GetId())
	if old == nil || old.instance == "" || info.GetInstance() == "" || old.instance == info.GetInstance() {
		return nil
	}
	ago := now.Sub(time.Unix(0, old.lastSeen.Load()))
	if ago > duplicateWindow {
		return nil
	}
	return errs.New(errs.AlreadyExists, "worker id %q is in use by another worker process (%s, heard from %v ago); this one is %s: "+
		"give each worker a unique --node-id (a restarted worker is let in once its old stream has been quiet for %v)",
		info.GetId(), old.instance, ago.Round(time.Millisecond), info.GetInstance(), duplicateWindow)
}

// sessions tracks the live worker streams of this leader, when each
// worker's last stream ended, and when this leader last heard from each
// worker (its lease: checkWorkers). Owned by Head.
type sessions struct {
	mu      sync.Mutex
	live    map[string]*session
	ended   map[string]time.Time
	renewed map[string]time.Time // last message or gossip renewal, by worker id
}

func newSessions() *sessions {
	return &sessions{live: map[string]*session{}, ended: map[string]time.Time{}, renewed: map[string]time.Time{}}
}

// renew records that this leader heard from worker id at now: a message
// on its stream or a lease renewal through gossip.
func (ss *sessions) renew(id string, now time.Time) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if now.After(ss.renewed[id]) {
		ss.renewed[id] = now
	}
}

// renewedAt returns when this leader last heard from worker id (zero:
// never, since it became leader).
func (ss *sessions) renewedAt(id string) time.Time {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.renewed[id]
}

// attach registers s as its worker's stream, ending an older one.
func (ss *sessions) attach(s *session) (old *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	old = ss.live[s.workerID]
	ss.live[s.workerID] = s
	delete(ss.ended, s.workerID)
	return old
}

// detach removes s if it is still its worker's stream.
func (ss *sessions) detach(s *session, now time.Time) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.live[s.workerID] == s {
		delete(ss.live, s.workerID)
		ss.ended[s.workerID] = now
	}
}

// connected reports whether the worker has a live stream.
func (ss *sessions) connected(id string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	_, ok := ss.live[id]
	return ok
}

// since returns when the worker's stream ended, or ok=false if it has a
// live stream or none was seen.
func (ss *sessions) since(id string) (time.Time, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	t, ok := ss.ended[id]
	return t, ok
}

// reset forgets when streams ended and the leases (on leadership gain:
// every worker gets a full lease from the new leadership's start to
// reconnect to the new leader).
func (ss *sessions) reset() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.ended = map[string]time.Time{}
	ss.renewed = map[string]time.Time{}
}
