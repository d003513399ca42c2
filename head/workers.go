package head

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// workerService implements wire.WorkerServiceServer: one bidirectional
// stream per worker, on the leader only. Assignments and stops go down as
// they are committed (woken by the FSM, no polling); attempt events come up
// in batches and are committed, then acked: the batches that arrived while
// the previous commit was in flight go into one log entry (recvLoop).
type workerService struct {
	wire.UnimplementedWorkerServiceServer
	h *Head
}

var _ wire.WorkerServiceServer = (*workerService)(nil)

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

// Connect serves one worker's stream until it ends or this head stops
// leading.
func (s *workerService) Connect(stream wire.WorkerService_ConnectServer) error {
	h := s.h
	if !h.IsLeader() || !h.leaderReady.Load() {
		return errs.ToStatus(h.notLeader())
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil || hello.GetInfo().GetId() == "" {
		return errs.ToStatus(errs.New(errs.InvalidArgument, "worker stream: the first message must be a hello with the worker's id"))
	}
	ctx := stream.Context()
	info := hello.Info
	log := h.logger.With("worker", info.Id)
	if err := h.sessions.duplicateOf(info, h.clock.Now()); err != nil {
		log.Warn("refusing a second worker process with the same id", "err", err)
		return errs.ToStatus(err)
	}
	if _, _, err := h.apply(ctx, fsm.OpWorkerUpsert, &wire.WorkerUpsertCommand{Info: info, UnixNanos: h.clock.Now().UnixNano()}); err != nil {
		return errs.ToStatus(err)
	}
	sess := &session{workerID: info.Id, instance: info.GetInstance(), send: make(chan *wire.HeadMessage, 256), done: make(chan struct{})}
	sess.lastSeen.Store(h.clock.Now().UnixNano())
	h.sessions.renew(info.Id, h.clock.Now())
	if old := h.sessions.attach(sess); old != nil {
		close(old.done)
	}
	defer func() { h.sessions.detach(sess, h.clock.Now()) }()

	sent, stops, err := h.reconcileWorker(ctx, info.Id, hello.Running)
	if err != nil {
		return errs.ToStatus(err)
	}
	clusterID, err := h.waitClusterID(ctx)
	if err != nil {
		return errs.ToStatus(err)
	}
	welcome := &wire.Welcome{LeaderId: h.cfg.NodeID, Term: h.node.Raft().CurrentTerm(), ClusterId: clusterID,
		LeaseMillis: h.cfg.Lease.Duration.Milliseconds(), LeaseMarginMillis: h.cfg.Lease.Margin.Milliseconds()}
	for _, m := range stops {
		welcome.Stops = append(welcome.Stops, m.GetStop())
	}
	if err := stream.Send(&wire.HeadMessage{Msg: &wire.HeadMessage_Welcome{Welcome: welcome}}); err != nil {
		return err
	}
	log.Debug("worker stream open", "announced", len(hello.Running))

	recvErr := make(chan error, 1)
	go func() { recvErr <- s.recvLoop(ctx, sess, stream) }()

	lost := h.leaderLost()
	var pools *wire.PoolTargets // the pre-warm targets last sent
	for {
		changed := h.fsm.Changed()
		if err := h.pushAssignments(stream, info.Id, sent); err != nil {
			return err
		}
		if m := poolTargetsMessage(h.fsm.View(), info.Id, pools); m != nil {
			if err := stream.Send(&wire.HeadMessage{Msg: &wire.HeadMessage_PoolTargets{PoolTargets: m}}); err != nil {
				return err
			}
			pools = m
		}
		select {
		case <-changed:
		case m := <-sess.send:
			if err := stream.Send(m); err != nil {
				return err
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-sess.done:
			return errs.ToStatus(errs.New(errs.Unavailable, "worker %s opened a newer stream", info.Id))
		case <-lost:
			return errs.ToStatus(h.notLeader())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// recvLoop commits the worker's event batches and acks them, in order.
// Batches that have arrived while the previous commit was in flight are
// committed together in one log entry (up to maxMergedEvents events) and
// acked with the last one's seq (acks are cumulative): a worker's events
// cost one Raft round trip per burst, not per batch. Other messages (GPU
// health, a changed advertisement) end a merge, so everything is applied
// in the order the worker sent it.
func (s *workerService) recvLoop(ctx context.Context, sess *session, stream wire.WorkerService_ConnectServer) error {
	type received struct {
		msg *wire.WorkerMessage
		err error
	}
	in := make(chan received, 64)
	go func() { // owned by recvLoop: ends with the stream (Recv fails once its handler returns)
		for {
			m, err := stream.Recv()
			select {
			case in <- received{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var held *received // taken from in to end a merge, handled next
	for {
		var r received
		if held != nil {
			r, held = *held, nil
		} else {
			select {
			case r = <-in:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if r.err != nil {
			return r.err
		}
		m := r.msg
		sess.lastSeen.Store(s.h.clock.Now().UnixNano())
		s.h.sessions.renew(sess.workerID, s.h.clock.Now())
		if gh := m.GetGpuHealth(); gh != nil {
			// Unhealthy GPUs: marked in the table, their attempts lost.
			cmd := &wire.GpuHealthCommand{WorkerId: sess.workerID, Unhealthy: gh.GetUnhealthy(), UnixNanos: s.h.clock.Now().UnixNano()}
			if _, _, err := s.h.apply(ctx, fsm.OpGpuHealth, cmd); err != nil {
				return errs.ToStatus(err)
			}
			continue
		}
		if info := m.GetHeartbeat().GetInfo(); info != nil {
			// The worker's advertisement changed (images, GPU health).
			if info.GetId() != sess.workerID {
				return errs.ToStatus(errs.New(errs.InvalidArgument, "worker stream of %s: heartbeat carries the info of worker %q; a stream speaks for its own worker only", sess.workerID, info.GetId()))
			}
			if _, _, err := s.h.apply(ctx, fsm.OpWorkerUpsert, &wire.WorkerUpsertCommand{Info: info, UnixNanos: s.h.clock.Now().UnixNano()}); err != nil {
				return errs.ToStatus(err)
			}
		}
		if hb := m.GetHeartbeat(); hb != nil {
			// The lease is renewed (above); the ack lets the worker count
			// it from when it sent the heartbeat.
			ack := &wire.HeadMessage{Msg: &wire.HeadMessage_LeaseAck{LeaseAck: &wire.LeaseAck{HeartbeatUnixNanos: hb.GetUnixNanos(),
				LeaseMillis: s.h.cfg.Lease.Duration.Milliseconds(), LeaseMarginMillis: s.h.cfg.Lease.Margin.Milliseconds()}}}
			select {
			case sess.send <- ack:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		batch := m.GetEvents()
		if batch == nil {
			continue
		}
		events, seq := batch.Events, batch.Seq
	merge:
		for len(events) < maxMergedEvents {
			select {
			case next := <-in:
				if b := next.msg.GetEvents(); next.err == nil && b != nil {
					sess.lastSeen.Store(s.h.clock.Now().UnixNano())
					s.h.sessions.renew(sess.workerID, s.h.clock.Now())
					events, seq = append(events[:len(events):len(events)], b.Events...), b.Seq
					continue
				}
				held = &next
				break merge
			default:
				break merge
			}
		}
		if len(events) > 0 {
			cmd := &wire.TaskEventsCommand{WorkerId: sess.workerID, Events: events, UnixNanos: s.h.clock.Now().UnixNano(),
				RetryBackoffNanos: retryBackoffs(s.h.fsm.View(), events, s.h.cfg.RetryBackoff, s.h.cfg.RetryBackoffMax, uniform)}
			if _, _, err := s.h.apply(ctx, fsm.OpTaskEvents, cmd); err != nil {
				return errs.ToStatus(err)
			}
		}
		ack := &wire.HeadMessage{Msg: &wire.HeadMessage_Ack{Ack: &wire.Ack{Seq: seq}}}
		select {
		case sess.send <- ack:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// maxMergedEvents caps the events recvLoop commits in one log entry when it
// merges a worker's batches (a batch is never split: one larger than this
// is committed alone).
const maxMergedEvents = 4096

// attemptKey names one attempt of one task, or (stop) the stop message
// sent for it.
type attemptKey struct {
	task    string
	attempt uint32
	stop    bool
}

// reconcileWorker reconciles what a worker announces with the table
// (reconcile) and commits the attempts it lost. It returns the attempts
// the worker holds (already delivered) and the stops to send.
func (h *Head) reconcileWorker(ctx context.Context, workerID string, running []*wire.RunningAttempt) (map[attemptKey]bool, []*wire.HeadMessage, error) {
	r := reconcile(h.fsm.View(), workerID, running, h.clock.Now())
	if r.Lost != nil {
		if _, _, err := h.apply(ctx, fsm.OpAttemptsLost, r.Lost); err != nil {
			return nil, nil, err
		}
	}
	return r.Held, r.Stops, nil
}

func stopMsg(taskID string, attempt uint32, reason string) *wire.HeadMessage {
	return &wire.HeadMessage{Msg: &wire.HeadMessage_Stop{Stop: &wire.StopAttempt{TaskId: taskID, Attempt: attempt, Reason: reason}}}
}

// pushAssignments sends the worker what deliveries decides, in order.
func (h *Head) pushAssignments(stream wire.WorkerService_ConnectServer, workerID string, sent map[attemptKey]bool) error {
	for _, m := range deliveries(h.fsm.View(), workerID, sent) {
		if err := stream.Send(m); err != nil {
			return err
		}
	}
	return nil
}

// deliveries returns what a worker's stream must deliver now: every
// active attempt the table holds on workerID that the stream has not
// delivered, and a stop for every such attempt whose task was cancelled
// (or whose gang restarts). The stops go first, so that a cancel committed
// with (or before) further assignments reaches the worker before any of
// them. It records the messages in sent (the stream's delivered attempts)
// and forgets the attempts that are no longer active: the stream may live
// for months. A stream whose Send fails ends, and sent with it.
func deliveries(view *state.View, workerID string, sent map[attemptKey]bool) []*wire.HeadMessage {
	var out []*wire.HeadMessage
	open := map[string]map[string]int{} // graph -> session -> unfinished tasks
	active := make(map[attemptKey]bool, len(sent))
	assigned := view.AssignedTo(workerID)
	var fresh []*state.Task // active, not yet delivered, not stopping
	for _, t := range assigned {
		cur := t.CurrentAttempt()
		if t.Stopping() { // cancelled, or its gang restarts
			k := attemptKey{task: t.ID, attempt: cur.Number, stop: true}
			active[k] = true
			if !sent[k] {
				sent[k] = true
				out = append(out, stopMsg(t.ID, cur.Number, t.Reason))
			}
			continue
		}
		k := attemptKey{task: t.ID, attempt: cur.Number}
		active[k] = true
		if !sent[k] {
			fresh = append(fresh, t)
		}
	}
	for _, t := range fresh {
		cur := t.CurrentAttempt()
		sent[attemptKey{task: t.ID, attempt: cur.Number}] = true
		a := &wire.Assignment{TaskId: t.ID, Attempt: cur.Number, LeaderTerm: cur.LeaderTerm, GraphId: t.GraphID,
			Tenant: t.Tenant, Spec: t.Spec, GpuUuids: cur.GPUUUIDs, Env: taskEnv(view, t), ArtifactInputs: artifactInputs(view, t)}
		if s := t.Spec.GetSession(); s != "" {
			if open[t.GraphID] == nil {
				open[t.GraphID] = unfinishedBySession(view, t.GraphID)
			}
			a.SessionEnds = open[t.GraphID][s] <= 1
		}
		out = append(out, &wire.HeadMessage{Msg: &wire.HeadMessage_Assign{Assign: a}})
	}
	for k := range sent {
		if !active[k] {
			delete(sent, k)
		}
	}
	return out
}

// unfinishedBySession counts a graph's tasks that have not finished, by
// session key.
func unfinishedBySession(view *state.View, graphID string) map[string]int {
	out := map[string]int{}
	for _, t := range view.TasksOfGraph(graphID) {
		if s := t.Spec.GetSession(); s != "" && !state.IsTerminal(t.State) {
			out[s]++
		}
	}
	return out
}

// taskEnv is the environment a task receives beyond its spec: its identity,
// its parents' JSON results (MEGAFLOW_PARENT_<NAME>_RESULT), and for each
// service it names in uses_services the service's ready endpoints as of
// the assignment's delivery, comma-separated and sorted
// (MEGAFLOW_SERVICE_<NAME>=http://10.0.0.5:31000,http://10.0.0.6:31002;
// NAME is the service name upper-cased with every character other than a
// letter or digit turned into '_': "model/qwen-7b" gives MODEL_QWEN_7B).
func taskEnv(view *state.View, t *state.Task) map[string]string {
	env := map[string]string{
		"MEGAFLOW_TASK_ID":  t.ID,
		"MEGAFLOW_GRAPH_ID": t.GraphID,
		"MEGAFLOW_TENANT":   t.Tenant,
		"MEGAFLOW_ATTEMPT":  strconv.FormatUint(uint64(t.CurrentAttempt().Number), 10),
	}
	for _, dep := range t.Spec.GetDependsOn() {
		p := view.Task(t.GraphID + "/" + dep)
		if p != nil && len(p.Result) > 0 {
			env["MEGAFLOW_PARENT_"+envName(dep)+"_RESULT"] = string(p.Result)
		}
	}
	if g := t.Spec.GetGang(); g != "" {
		gangEnv(view, t, env)
	}
	for _, name := range t.Spec.GetUsesServices() {
		eps := view.ServiceEndpoints(name)
		urls := make([]string, len(eps))
		for i, e := range eps {
			urls[i] = e.URL
		}
		env[spec.ServiceEnvVar(name)] = strings.Join(urls, ",")
	}
	return env
}

// gangEnv adds what a task of a gang needs to find its peers (multi-node
// training: torchrun's --nnodes, --node_rank and --master_addr): the gang's
// name (MEGAFLOW_GANG), the task's rank, 0-based in the order
// state.GangLess gives the gang's task names (MEGAFLOW_GANG_RANK), the
// gang's size (MEGAFLOW_GANG_SIZE), the hosts of the workers its tasks were
// placed on, by rank and comma-separated (MEGAFLOW_GANG_HOSTS), and rank
// 0's host (MEGAFLOW_GANG_LEADER_HOST). A gang is placed in one plan, so
// every task of it has its attempt when any is delivered.
func gangEnv(view *state.View, t *state.Task, env map[string]string) {
	members := view.GangMembers(t.GraphID, t.Spec.GetGang())
	hosts := make([]string, len(members))
	for i, m := range members {
		if m.ID == t.ID {
			env["MEGAFLOW_GANG_RANK"] = strconv.Itoa(i)
		}
		if a := m.CurrentAttempt(); a != nil {
			if w := view.Worker(a.WorkerID); w != nil {
				hosts[i] = w.Info.GetHost()
			}
		}
	}
	env["MEGAFLOW_GANG"] = t.Spec.GetGang()
	env["MEGAFLOW_GANG_SIZE"] = strconv.Itoa(len(members))
	env["MEGAFLOW_GANG_HOSTS"] = strings.Join(hosts, ",")
	if len(hosts) > 0 {
		env["MEGAFLOW_GANG_LEADER_HOST"] = hosts[0]
	}
}

// artifactInputs names the parents of t whose declared output files t
// receives as inputs: parent task name -> its succeeded attempt number.
// Parents that declared no output_paths, or did not succeed (a task that
// runs on upstream failure), are left out.
func artifactInputs(view *state.View, t *state.Task) map[string]uint32 {
	var out map[string]uint32
	for _, dep := range t.Spec.GetDependsOn() {
		p := view.Task(t.GraphID + "/" + dep)
		if p == nil || p.State != wire.TaskState_TASK_STATE_SUCCEEDED || len(p.Spec.GetOutputPaths()) == 0 {
			continue
		}
		if a := p.CurrentAttempt(); a != nil {
			if out == nil {
				out = map[string]uint32{}
			}
			out[dep] = a.Number
		}
	}
	return out
}

func envName(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}
