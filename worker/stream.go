package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/gossip"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/version"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/worker/attempt"
)

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
	conns := map[string]*grpc.ClientConn{}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	backoff := w.cfg.ReconnectMin
	hint := ""
	redirects := 0
	quiet := false // a failed round was already logged at warn level
	for ctx.Err() == nil {
		addrs := w.headAddrs(hint)
		next := ""
		welcomed := false
		var lastErr error
		for _, addr := range addrs {
			conn, ok := conns[addr]
			if !ok {
				var err error
				conn, err = grpc.NewClient(addr, w.headCreds(),
					// A stream whose packets vanish (a firewall, a black-holing
					// proxy) is noticed in Time+Timeout, not when TCP gives up.
					// The head's EnforcementPolicy allows pings every 5 s.
					grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}))
				if err != nil {
					lastErr = fmt.Errorf("dial %s: %w", addr, err)
					continue
				}
				conns[addr] = conn
			}
			ok, err := w.session(ctx, conn, addr)
			if ctx.Err() != nil {
				return
			}
			if ok {
				welcomed, hint = true, addr
				w.log.Info("stream to the leader ended; reconnecting", "leader", addr, "err", err)
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

// headAddrs returns the gRPC addresses to try, first first: Config.Heads,
// or the live heads in gossip sorted by name.
func (w *Worker) headAddrs(first string) []string {
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
	if first != "" {
		addrs = slices.DeleteFunc(addrs, func(a string) bool { return a == first })
		addrs = append([]string{first}, addrs...)
	}
	return addrs
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
	h := &wire.WorkerHello{Info: w.currentInfo(), WireVersion: version.WireCurrent}
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
func (w *Worker) session(ctx context.Context, conn *grpc.ClientConn, addr string) (welcomed bool, err error) {
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
	var linger clock.Timer
	defer func() {
		if linger != nil {
			linger.Stop()
		}
	}()
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
			w.handleHeadMessage(ctx, r.msg)
		case <-w.outbox.ready:
			if w.cfg.BatchDelay > 0 && w.outbox.pendingLen() < w.cfg.MaxBatchEvents {
				if linger == nil {
					linger = w.clock.NewTimer(w.cfg.BatchDelay)
				}
				continue
			}
			if err := flush(); err != nil {
				return true, err
			}
		case <-w.gpuPoke:
			if err := sendHealth(false); err != nil {
				return true, err
			}
		case <-lingerC:
			linger = nil
			if err := flush(); err != nil {
				return true, err
			}
		case <-hb.C():
			if w.headGone(addr) {
				return true, fmt.Errorf("gossip reports the leader at %s gone", addr)
			}
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
	w.connected, w.leader, w.welcomedAt = true, addr, w.clock.Now()
	w.leaderID = wel.GetLeaderId()
	w.log.Info("connected to the leader", "leader", addr, "leader_id", wel.GetLeaderId(), "term", wel.GetTerm(),
		"announced_attempts", announced, "unacked_batches", w.outbox.unackedLen())
	return nil
}

func (w *Worker) disconnected() {
	w.mu.Lock()
	w.connected = false
	w.mu.Unlock()
}
