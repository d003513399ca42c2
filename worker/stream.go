package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/megaflow/megaflow/internal/acl"
	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/gossip"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/version"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/worker/attempt"
)

// stallHeartbeats is how many heartbeats in a row may go unanswered, each
// for a whole HeartbeatInterval, before the worker asks the other heads
// who leads (probeLeader): 2, so a cut-off leader's successor is looked
// for 2 to 3 intervals after the cut-off leader's last message (4 to 6 s
// at the default 2 s), well inside the 10 s lease.
const stallHeartbeats = 2

// maxRedirects bounds how many NOT_LEADER redirects are followed in a row
// before the worker backs off (leaders can disagree during an election).
const maxRedirects = 3

// headCreds returns the credentials of the stream to the heads: mutual TLS
// with the worker's certificate, verifying a head's, when Config.TLS is
// set; else plaintext.
func (w *Worker) headCreds() grpc.DialOption {
	if w.cfg.TLS == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(w.cfg.TLS.ClientCredentials(tlsconfig.RoleHead))
}

// runStream keeps one stream open to the leader until ctx ends: it tries
// the heads in order (a redirect's target first), follows NOT_LEADER
// redirects, and backs off with jitter after a round in which no head took
// the stream. It is the stream goroutine: it alone sends on the stream and
// handles what the head sends.
func (w *Worker) runStream(ctx context.Context) {
	creds := []grpc.DialOption{w.headCreds()}
	if w.cfg.Token != "" {
		creds = append(creds, grpc.WithPerRPCCredentials(acl.Credentials(w.cfg.Token)))
	}
	conns := newHeadConns(creds...)
	defer conns.close()
	backoff := w.cfg.ReconnectMin
	hint := ""
	lost := "" // the head whose stream just ended: tried last in the next round
	redirects := 0
	quiet := false // a failed round was already logged at warn level
	for ctx.Err() == nil {
		if why := w.leaseFileBlocked(); why != "" {
			// No stream while the lease file cannot be written: see
			// leaseFileStale.
			if !quiet {
				w.log.Warn("not connecting to the leader until the lease file can be written again", "why", why, "retry_in", w.cfg.ReconnectMax)
				quiet = true
			}
			if !clock.Sleep(w.clock, w.cfg.ReconnectMax, ctx.Done()) {
				return
			}
			continue
		}
		addrs := w.headAddrs(hint, lost)
		next := ""
		welcomed := false
		var lastErr error
		for _, addr := range addrs {
			conn, err := conns.get(addr)
			if err != nil {
				lastErr = err
				continue
			}
			if err := w.awaitReady(ctx, conn); err != nil {
				if ctx.Err() != nil {
					return
				}
				lastErr = fmt.Errorf("head %s: %w", addr, err)
				w.log.Debug("head not reachable", "head", addr, "err", err)
				continue
			}
			ok, err := w.session(ctx, conns, conn, addr)
			if ctx.Err() != nil {
				return
			}
			if ok {
				// The next round tries the new leader first when the
				// other heads named one, then the others, the head just
				// lost last: when its host is gone, dialling it first
				// would only wait; when it still leads, a follower
				// redirects back to it at once.
				welcomed, hint, lost = true, "", addr
				var moved *leaderMoved
				if errors.As(err, &moved) {
					hint = moved.addr
				}
				w.log.Info("stream to the leader ended; reconnecting", "leader", addr, "next", cmp.Or(hint, "the other heads first"), "err", err)
				break
			}
			lastErr = err
			if c := errs.ClassOf(err); c == errs.AlreadyExists || c == errs.FailedPrecondition {
				// Another worker process uses this id, or the heads do not
				// serve this worker's protocol: say so loudly, every round.
				w.log.Error("the leader refused this worker", "head", addr, "err", err)
			}
			var e *errs.Error
			if errors.As(err, &e) && e.Class == errs.NotLeader && e.LeaderAddr != "" && e.LeaderAddr != addr && redirects < maxRedirects {
				w.log.Debug("following NOT_LEADER redirect", "head", addr, "leader", e.LeaderAddr)
				next = e.LeaderAddr
				break
			}
			w.log.Debug("head did not take the stream", "head", addr, "err", err)
		}
		if next != "" {
			hint = next
			redirects++
			continue
		}
		redirects = 0
		if welcomed {
			backoff, quiet = w.cfg.ReconnectMin, false
			if !clock.Sleep(w.clock, jitter(backoff), ctx.Done()) {
				return
			}
			continue
		}
		hint = ""
		level := w.log.Warn
		if quiet {
			level = w.log.Debug
		}
		if len(addrs) == 0 {
			level("no head known yet; waiting for gossip", "retry_in", backoff)
			// Gossip may hold every head dead for good: heads that all
			// restarted rejoined one another, not this worker, and
			// memberlist never contacts a member it holds dead. Join the
			// seeds (--join and the heads saved by the last run) again.
			if n, err := w.gossip.JoinOnce(); n > 0 {
				w.log.Info("joined the heads' gossip pool again after losing every head", "seeds_contacted", n)
			} else if err != nil {
				w.log.Debug("rejoining the heads' gossip pool", "err", err)
			}
		} else {
			level("no leader took the stream; retrying", "heads", addrs, "err", lastErr, "retry_in", backoff)
		}
		quiet = true
		if !clock.Sleep(w.clock, jitter(backoff), ctx.Done()) {
			return
		}
		backoff = min(2*backoff, w.cfg.ReconnectMax)
	}
}

// jitter spreads d over [d/2, d), so workers reconnecting together after a
// leader change do not arrive at once.
func jitter(d time.Duration) time.Duration {
	if d < 2 {
		return d
	}
	return d/2 + rand.N(d/2)
}

// headAddrs returns the gRPC addresses to try, first first and last last
// (either may be ""): Config.Heads, or the live heads in gossip sorted by
// name.
func (w *Worker) headAddrs(first, last string) []string {
	var addrs []string
	if len(w.cfg.Heads) > 0 {
		addrs = slices.Clone(w.cfg.Heads)
	} else {
		for _, m := range w.gossip.Members() {
			if m.Meta.Role == gossip.RoleHead && m.Status == gossip.StatusAlive && m.Meta.GRPCAddr != "" {
				addrs = append(addrs, m.Meta.GRPCAddr)
			}
		}
	}
	if last != "" && last != first && slices.Contains(addrs, last) {
		addrs = append(slices.DeleteFunc(addrs, func(a string) bool { return a == last }), last)
	}
	if first != "" {
		addrs = slices.DeleteFunc(addrs, func(a string) bool { return a == first })
		addrs = append([]string{first}, addrs...)
	}
	return addrs
}

// leaderMoved is the error that ends a stream whose leader went silent
// while another head names a different leader.
type leaderMoved struct {
	from   string        // the silent leader's address
	silent time.Duration // how long it had been silent, in heartbeats
	by     string        // the head that named the new leader
	id     string        // the new leader's id
	addr   string        // its gRPC address ("" when the head did not know it)
	term   uint64        // the term the naming head is in
}

func (e *leaderMoved) Error() string {
	return fmt.Sprintf("the leader at %s answered no heartbeat for %v, and head %s names %s (%s) leader in term %d: leaving for it",
		e.from, e.silent, e.by, e.id, cmp.Or(e.addr, "address unknown"), e.term)
}

// probeLeader asks the heads at addrs, at once, who leads (their
// ClusterStatus, each bounded by DialTimeout twice) and returns the first
// answer naming a leader other than leaderID in term or later; nil when
// none does (every head names the same leader, none is known yet, or none
// answered). It uses the stream's connections (conns): a probe opens a
// connection only to a head not dialled before.
func (w *Worker) probeLeader(ctx context.Context, conns *headConns, addrs []string, leaderID string, term uint64) *leaderMoved {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make(chan *leaderMoved, len(addrs))
	for _, a := range addrs {
		go func() { // owned by probeLeader: each sends once, and out has room for all
			out <- w.askLeader(ctx, conns, a, leaderID, term)
		}()
	}
	var found *leaderMoved
	for range addrs {
		if m := <-out; m != nil && found == nil {
			found = m
			cancel()
		}
	}
	return found
}

// askLeader asks the head at addr who leads; see probeLeader.
func (w *Worker) askLeader(ctx context.Context, conns *headConns, addr, leaderID string, term uint64) *leaderMoved {
	conn, err := conns.get(addr)
	if err != nil {
		return nil
	}
	if w.awaitReady(ctx, conn) != nil {
		return nil
	}
	cctx, cancel := clock.WithTimeout(ctx, w.clock, w.cfg.DialTimeout)
	defer cancel()
	st, err := wire.NewMegaflowServiceClient(conn).ClusterStatus(cctx, &wire.ClusterStatusRequest{})
	if err != nil || st.GetLeaderId() == "" || st.GetLeaderId() == leaderID || st.GetTerm() < term {
		return nil
	}
	return &leaderMoved{by: addr, id: st.GetLeaderId(), addr: st.GetLeaderGrpcAddr(), term: st.GetTerm()}
}

// awaitReady starts conn's connection (at once, also when an earlier
// failure has it waiting out gRPC's backoff) and waits, at most
// Config.DialTimeout, until it is ready (TCP and HTTP/2 settings
// exchanged) or has failed again. It fails only on the bound, when the
// head never answers (its host cut off or frozen), so that a reconnect
// round moves on to the next head instead of waiting out gRPC's 20 s
// connect timeout; a connection that failed is left to the call, whose
// error says why (a refused port, a refused certificate).
func (w *Worker) awaitReady(ctx context.Context, conn *grpc.ClientConn) error {
	dctx, cancel := clock.WithTimeout(ctx, w.clock, w.cfg.DialTimeout)
	defer cancel()
	conn.Connect()
	retried := false
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready, connectivity.Shutdown:
			// A shut-down connection fails the call with its cause.
			return nil
		case connectivity.TransientFailure:
			if retried {
				// It failed again at once (a refused port, a refused
				// certificate): the stream call fails fast with the cause.
				return nil
			}
			// A connection that failed before waits out gRPC's backoff
			// (up to 120 s) before it dials again: a head that came back
			// meanwhile would stay unreachable longer than a lease. Dial
			// now.
			retried = true
			conn.ResetConnectBackoff()
		}
		if !conn.WaitForStateChange(dctx, s) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("no answer within %v (connection %s)", w.cfg.DialTimeout, strings.ToLower(s.String()))
		}
	}
}

// headGone reports whether gossip says the head serving addr is dead or
// left: a leader that vanished without closing its connections.
func (w *Worker) headGone(addr string) bool {
	for _, m := range w.gossip.Members() {
		if m.Meta.GRPCAddr == addr && (m.Status == gossip.StatusDead || m.Status == gossip.StatusLeft) {
			return true
		}
	}
	return false
}

// hello is the WorkerHello: the worker's info and every attempt it holds.
func (w *Worker) hello() *wire.WorkerHello {
	w.markInfoSent()
	h := &wire.WorkerHello{Info: w.currentInfo(), WireVersion: version.WireCurrent, AcceptsAssignmentBatches: true}
	for _, a := range w.Attempts() {
		if a.State == attempt.Done {
			continue
		}
		h.Running = append(h.Running, &wire.RunningAttempt{
			TaskId:      a.Key.TaskID,
			Attempt:     a.Key.Attempt,
			ContainerId: a.ContainerID,
			Started:     a.Started,
		})
	}
	return h
}

type received struct {
	msg *wire.HeadMessage
	err error
}

// session runs one stream to the head at addr: Hello, Welcome, the unacked
// batches again, then events, heartbeats and the head's messages until the
// stream fails or ctx ends. welcomed reports whether the head took the
// stream; err says why it ended (errs classes, NotLeader with the leader's
// address).
func (w *Worker) session(ctx context.Context, conns *headConns, conn *grpc.ClientConn, addr string) (welcomed bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := wire.NewWorkerServiceClient(conn).Connect(sctx)
	if err != nil {
		return false, errs.FromStatus(err)
	}
	hello := w.hello()
	helloID := w.leaseSent() // the Welcome acks it
	if err := stream.Send(&wire.WorkerMessage{Msg: &wire.WorkerMessage_Hello{Hello: hello}}); err != nil {
		// The head's reason comes with Recv.
		if _, rerr := stream.Recv(); rerr != nil {
			err = rerr
		}
		return false, errs.FromStatus(err)
	}
	first, err := stream.Recv()
	if err != nil {
		return false, errs.FromStatus(err)
	}
	welcome := first.GetWelcome()
	if welcome == nil {
		return false, fmt.Errorf("head %s sent %T before its Welcome", addr, first.GetMsg())
	}
	w.learnClusterID(welcome.GetClusterId())
	if err := w.welcomed(addr, welcome, len(hello.GetRunning())); err != nil {
		return false, err
	}
	w.leaseAcked(helloID, welcome.GetLeaseMillis(), welcome.GetLeaseMarginMillis())
	if l := time.Duration(welcome.GetLeaseMillis()) * time.Millisecond; l > 0 && l < 3*w.cfg.HeartbeatInterval {
		w.log.Warn("the heads' worker lease is under three heartbeats: a late heartbeat stops every attempt; lower --heartbeat-interval or raise --worker-lease",
			"lease", l, "heartbeat_interval", w.cfg.HeartbeatInterval)
	}
	defer w.disconnected()
	// The Welcome names the announced attempts that are not current; stop
	// them, then take over the others (their stop is queued first).
	for _, st := range welcome.GetStops() {
		w.stopAttempt(st)
	}
	w.confirmAdopted()

	recv := make(chan received)
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			m, err := stream.Recv()
			select {
			case recv <- received{m, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-recvDone
	}()

	send := func(m *wire.WorkerMessage) error {
		if err := stream.Send(m); err != nil {
			return fmt.Errorf("send to %s: %w", addr, errs.FromStatus(err))
		}
		return nil
	}
	sendHealth := func(all bool) error {
		if r := w.takeGPUHealth(all); r != nil {
			return send(&wire.WorkerMessage{Msg: &wire.WorkerMessage_GpuHealth{GpuHealth: r}})
		}
		return nil
	}
	flush := func() error {
		// A GPU health change goes before the events it caused (the stops
		// of the attempts on an unhealthy GPU).
		if err := sendHealth(false); err != nil {
			return err
		}
		for b := w.outbox.cut(); b != nil; b = w.outbox.cut() {
			if err := send(&wire.WorkerMessage{Msg: &wire.WorkerMessage_Events{Events: b}}); err != nil {
				return err
			}
		}
		return nil
	}
	if err := sendHealth(true); err != nil {
		return true, err
	}
	for _, b := range w.outbox.unackedMessages() {
		if err := send(&wire.WorkerMessage{Msg: &wire.WorkerMessage_Events{Events: b}}); err != nil {
			return true, err
		}
	}
	if err := flush(); err != nil {
		return true, err
	}

	hb := w.clock.NewTimer(w.cfg.HeartbeatInterval)
	defer func() { hb.Stop() }()
	// unanswered counts the heartbeats sent since the head last sent
	// anything (it answers each with a LeaseAck). A stream whose leader's
	// host was cut off stays open on this side until gRPC's keepalive
	// gives up (15 s), longer than a lease. Once two heartbeats in a row
	// went unanswered for a whole interval, the worker asks the other
	// heads who leads, every interval while the silence lasts, and leaves
	// the stream for the leader they name when it is another head: it
	// reaches the new leader while its lease still holds. A leader that is
	// only slow, or whose port alone is cut (the lease is renewed through
	// gossip then), is named again by the others, and the stream is kept.
	unanswered := 0
	var probe chan *leaderMoved // the probe in flight; nil: none
	probes := make(chan struct{}, 1)
	probes <- struct{}{} // the token of the one probe that may run
	defer func() {
		cancel()
		<-probes // the probe in flight, if any, has returned
	}()
	var linger clock.Timer
	stopLinger := func() {
		if linger != nil {
			linger.Stop()
			linger = nil
		}
	}
	defer stopLinger()
	// hold: after an assignment batch, events wait until this many are
	// pending (or a full batch, or linger's end); 0: no hold. Every flush
	// clears it, and it never holds without linger running: events are
	// held BatchDelay at most.
	hold := 0
	holding := func() bool {
		n := w.outbox.pendingLen()
		return hold > 0 && linger != nil && n < hold && n < w.cfg.MaxBatchEvents
	}
	for {
		var lingerC <-chan time.Time
		if linger != nil {
			lingerC = linger.C()
		}
		// After a freeze, the lease is checked before anything else.
		w.checkLease()
		select {
		case <-ctx.Done():
			_ = stream.CloseSend()
			return true, ctx.Err()
		case r := <-recv:
			w.checkLease()
			if r.err != nil {
				return true, errs.FromStatus(r.err)
			}
			unanswered = 0
			// Counted before the batch's attempts start: their first
			// events may already be pending when handleHeadMessage
			// returns, and counting them twice would set a hold that
			// only linger's end releases.
			pendingBefore := w.outbox.pendingLen()
			w.handleHeadMessage(ctx, r.msg)
			if n := len(r.msg.GetAssignments().GetAssignments()); n > 1 && w.cfg.BatchDelay > 0 {
				// The attempts of a batch start together, and their
				// events go together: held until each attempt could have
				// reported its start and an end that came at once (two
				// events each), BatchDelay at most, rather than the first
				// start alone and the rest behind its commit.
				hold = pendingBefore + 2*n
				if linger == nil {
					linger = w.clock.NewTimer(w.cfg.BatchDelay)
				}
			}
			if holding() {
				continue
			}
			if r.msg.GetAck() != nil && w.outbox.unackedLen() == 0 && w.outbox.pendingLen() > 0 {
				// The batch in flight is committed: what piled up behind it
				// goes now, as one batch.
				stopLinger()
				hold = 0
				if err := flush(); err != nil {
					return true, err
				}
			}
		case <-w.outbox.ready:
			// Events go at once while no batch waits for its ack (an
			// event alone is not held back BatchDelay); behind a batch in
			// flight they pile up until its ack, BatchDelay at most, or a
			// full batch (Nagle's rule: batching only under load).
			if holding() {
				continue
			}
			if w.cfg.BatchDelay > 0 && w.outbox.pendingLen() < w.cfg.MaxBatchEvents && w.outbox.unackedLen() > 0 {
				if linger == nil {
					linger = w.clock.NewTimer(w.cfg.BatchDelay)
				}
				continue
			}
			stopLinger()
			hold = 0
			if err := flush(); err != nil {
				return true, err
			}
		case <-w.gpuPoke:
			if err := sendHealth(false); err != nil {
				return true, err
			}
		case moved := <-probe:
			probe = nil
			if moved != nil {
				w.metrics.streamStalls.Inc()
				moved.silent = time.Duration(unanswered) * w.cfg.HeartbeatInterval
				moved.from = addr
				return true, moved
			}
		case <-lingerC:
			linger, hold = nil, 0
			if err := flush(); err != nil {
				return true, err
			}
		case <-hb.C():
			if w.headGone(addr) {
				return true, fmt.Errorf("gossip reports the leader at %s gone", addr)
			}
			if why := w.leaseFileStale(); why != "" {
				// Its tasks' inits would stop or refuse every task: leave,
				// so that the leader places nothing here and, once the
				// lease lapses, runs what was here elsewhere.
				return true, errors.New(why)
			}
			if unanswered >= stallHeartbeats && probe == nil {
				if others := slices.DeleteFunc(w.headAddrs("", ""), func(a string) bool { return a == addr }); len(others) > 0 {
					<-probes
					probe = make(chan *leaderMoved, 1)
					go func(out chan<- *leaderMoved) { // owned by session, which takes the token back on its way out
						defer func() { probes <- struct{}{} }()
						out <- w.probeLeader(sctx, conns, others, welcome.GetLeaderId(), welcome.GetTerm())
					}(probe)
				}
			}
			unanswered++
			hbMsg := &wire.WorkerMessage{Msg: &wire.WorkerMessage_Heartbeat{Heartbeat: &wire.Heartbeat{UnixNanos: w.leaseSent(),
				Info: w.takeInfoUpdate()}}}
			if err := send(hbMsg); err != nil {
				return true, err
			}
			hb = w.clock.NewTimer(w.cfg.HeartbeatInterval)
		}
	}
}

// handleHeadMessage applies one message from the leader; the stream
// goroutine calls it.
func (w *Worker) handleHeadMessage(ctx context.Context, m *wire.HeadMessage) {
	switch msg := m.GetMsg().(type) {
	case *wire.HeadMessage_Assign:
		w.assign(ctx, msg.Assign)
	case *wire.HeadMessage_Assignments:
		for _, a := range msg.Assignments.GetAssignments() {
			w.assign(ctx, a)
		}
	case *wire.HeadMessage_Stop:
		w.stopAttempt(msg.Stop)
	case *wire.HeadMessage_Ack:
		for _, f := range w.outbox.ack(msg.Ack.GetSeq()) {
			f()
		}
	case *wire.HeadMessage_LeaseAck:
		w.leaseAcked(msg.LeaseAck.GetHeartbeatUnixNanos(), msg.LeaseAck.GetLeaseMillis(), msg.LeaseAck.GetLeaseMarginMillis())
	case *wire.HeadMessage_PoolTargets:
		w.setPoolTargets(ctx, msg.PoolTargets.GetTargets())
	case *wire.HeadMessage_Snapshots:
		w.setTableSnapshots(msg.Snapshots)
	case *wire.HeadMessage_Welcome:
		w.log.Debug("second Welcome on a stream", "leader_id", msg.Welcome.GetLeaderId(), "term", msg.Welcome.GetTerm())
	default:
		w.log.Debug("ignoring an unknown message from the head", "type", fmt.Sprintf("%T", m.GetMsg()))
	}
}

// welcomed records a stream the leader at addr took. A Welcome from a term
// older than one already seen comes from a deposed leader: refused.
func (w *Worker) welcomed(addr string, wel *wire.Welcome, announced int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wel.GetTerm() < w.maxTerm {
		return fmt.Errorf("head %s welcomed with term %d, older than term %d already seen", addr, wel.GetTerm(), w.maxTerm)
	}
	w.maxTerm = wel.GetTerm()
	w.learnRelayKey(addr, wel.GetRelayKey())
	w.connected, w.leader, w.welcomedAt = true, addr, w.clock.Now()
	w.leaderID = wel.GetLeaderId()
	w.log.Info("connected to the leader", "leader", addr, "leader_id", wel.GetLeaderId(), "term", wel.GetTerm(),
		"announced_attempts", announced, "unacked_batches", w.outbox.unackedLen())
	return nil
}

func (w *Worker) disconnected() {
	w.mu.Lock()
	w.connected = false
	// The next stream's leader sends the snapshot ids anew; until then
	// snapshots may come and go unseen.
	w.snapIDs, w.snapKnown = nil, false
	w.mu.Unlock()
}
