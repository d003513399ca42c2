package head

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/version"
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
	log := h.logger.With("worker", hello.Info.Id)
	sess, sent, welcome, err := h.welcomeWorker(ctx, hello, log)
	if err != nil {
		return errs.ToStatus(err)
	}
	defer func() { h.sessions.detach(sess, h.clock.Now()) }()
	if err := stream.Send(&wire.HeadMessage{Msg: &wire.HeadMessage_Welcome{Welcome: welcome}}); err != nil {
		return err
	}
	log.Debug("worker stream open", "announced", len(hello.Running))

	recvErr := make(chan error, 1)
	go func() { recvErr <- s.recvLoop(ctx, sess, stream) }()

	lost := h.leaderLost()
	var pools *wire.PoolTargets     // the pre-warm targets last sent
	var snaps *wire.WorkerSnapshots // the snapshot ids last sent
	for {
		changed := h.fsm.Changed()
		view := h.fsm.View()
		if err := pushAssignments(stream, view, sess.workerID, sent, hello.GetAcceptsAssignmentBatches()); err != nil {
			return err
		}
		if w := view.Worker(sess.workerID); w != nil && w.Status == wire.WorkerStatus_WORKER_STATUS_DOWN {
			// Declared down while this stream was open (its hello made it
			// ALIVE): a worker that froze past its lease and resumed keeps
			// its stream, and its heartbeats would be acked for ever while
			// the table gives it no work. Ending the stream makes it
			// reconnect: its hello rejoins it, and the Welcome stops the
			// attempts it still holds that were re-queued.
			log.Info("ending the stream of a worker declared down; it rejoins when it reconnects", "reason", w.Reason)
			return errs.ToStatus(errs.New(errs.Unavailable, "worker %s was declared down (%s) and its attempts re-queued; reconnect to rejoin", sess.workerID, w.Reason))
		}
		if m := poolTargetsMessage(view, sess.workerID, pools); m != nil {
			if err := stream.Send(&wire.HeadMessage{Msg: &wire.HeadMessage_PoolTargets{PoolTargets: m}}); err != nil {
				return err
			}
			pools = m
		}
		if m := snapshotsMessage(view, sess.workerID, snaps); m != nil {
			if err := stream.Send(&wire.HeadMessage{Msg: &wire.HeadMessage_Snapshots{Snapshots: m}}); err != nil {
				return err
			}
			snaps = m
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
			return errs.ToStatus(errs.New(errs.Unavailable, "worker %s opened a newer stream", sess.workerID))
		case <-lost:
			return errs.ToStatus(h.notLeader())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// welcomeWorker admits the worker of hello (its id checked non-empty by
// Connect) on this leader, from its stream's goroutine: it checks the
// stream's certificate, the worker's protocol and that no other process
// holds the id, proposes its WorkerUpsert (workerUpsert), attaches its
// session (ending an older stream of the worker's), reconciles what it
// announces (reconcileWorker) and waits for the cluster id. It returns
// the session, which Connect detaches when the stream ends, the attempts
// the worker already holds, and the Welcome to send: the stops of
// reconciliation, this leader's term (the proposer's), the lease and,
// with ACLs, the cluster's relay key. On
// an error the session is detached again (or never attached).
func (h *Head) welcomeWorker(ctx context.Context, hello *wire.WorkerHello, log *slog.Logger) (*session, map[attemptKey]bool, *wire.Welcome, error) {
	info := hello.Info
	if err := h.checkWorkerCert(ctx, info.Id); err != nil {
		log.Warn("refusing a worker stream whose certificate is not that worker's", "err", err)
		return nil, nil, nil, err
	}
	if err := version.CheckWorkerWire(hello.GetWireVersion(), h.cfg.NodeID, info.Id+" (build "+cmp.Or(info.GetVersion(), "unknown")+")"); err != nil {
		log.Warn("refusing a worker of another protocol", "err", err)
		return nil, nil, nil, errs.New(errs.FailedPrecondition, "%v", err)
	}
	if err := h.sessions.duplicateOf(info, h.clock.Now()); err != nil {
		log.Warn("refusing a second worker process with the same id", "err", err)
		return nil, nil, nil, err
	}
	if _, err := h.prop.propose(ctx, fsm.OpWorkerUpsert, workerUpsert(info, h.clock.Now())); err != nil {
		return nil, nil, nil, err
	}
	sess := &session{workerID: info.Id, instance: info.GetInstance(), send: make(chan *wire.HeadMessage, 256), done: make(chan struct{})}
	sess.lastSeen.Store(h.clock.Now().UnixNano())
	h.sessions.renew(info.Id, h.clock.Now())
	if old := h.sessions.attach(sess); old != nil {
		close(old.done)
	}
	fail := func(err error) (*session, map[attemptKey]bool, *wire.Welcome, error) {
		h.sessions.detach(sess, h.clock.Now())
		return nil, nil, nil, err
	}
	sent, stops, err := h.reconcileWorker(ctx, info.Id, hello.Running)
	if err != nil {
		return fail(err)
	}
	clusterID, err := h.waitClusterID(ctx)
	if err != nil {
		return fail(err)
	}
	welcome := &wire.Welcome{LeaderId: h.cfg.NodeID, Term: h.prop.term(), ClusterId: clusterID,
		LeaseMillis: h.cfg.Lease.Duration.Milliseconds(), LeaseMarginMillis: h.cfg.Lease.Margin.Milliseconds(),
		// With ACLs the stream's interceptor admitted only a worker
		// token or a worker certificate (acl.Methods): the relay key
		// goes to workers that showed one (h.relayKey: nil without
		// ACLs or before the bootstrap).
		RelayKey: h.relayKey()}
	for _, m := range stops {
		welcome.Stops = append(welcome.Stops, m.GetStop())
	}
	return sess, sent, welcome, nil
}

// checkWorkerCert returns nil when TLS is off or the certificate of the
// stream's peer (ctx) names worker id (<id>.worker.megaflow), and
// otherwise a PermissionDenied error naming both ids, or saying that the
// certificate names none, and what to do: one worker's certificate cannot
// open a stream as another, claim its attempts or advertise its sandbox
// address. StreamAuthorizer has checked that it is a worker certificate.
func (h *Head) checkWorkerCert(ctx context.Context, id string) error {
	if h.cfg.TLS == nil {
		return nil
	}
	cert := tlsconfig.PeerCertificate(ctx)
	if cert == nil {
		return errs.New(errs.PermissionDenied, "worker stream of %s: the stream came without a verified TLS certificate", id)
	}
	if err := tlsconfig.CheckNode(cert, tlsconfig.RoleWorker, id); err != nil {
		return errs.New(errs.PermissionDenied, "worker stream: the hello says worker %s, but %v", id, err)
	}
	return nil
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
			if _, err := s.h.prop.propose(ctx, fsm.OpGpuHealth, gpuHealth(sess.workerID, gh.GetUnhealthy(), s.h.clock.Now())); err != nil {
				return errs.ToStatus(err)
			}
			continue
		}
		if info := m.GetHeartbeat().GetInfo(); info != nil {
			// The worker's advertisement changed (images, GPU health).
			if info.GetId() != sess.workerID {
				return errs.ToStatus(errs.New(errs.InvalidArgument, "worker stream of %s: heartbeat carries the info of worker %q; a stream speaks for its own worker only", sess.workerID, info.GetId()))
			}
			if _, err := s.h.prop.propose(ctx, fsm.OpWorkerUpsert, workerUpsert(info, s.h.clock.Now())); err != nil {
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
			view, now := s.h.fsm.View(), s.h.clock.Now()
			cmd := taskEvents(view, sess.workerID, events, now, s.h.cfg.RetryBackoff, s.h.cfg.RetryBackoffMax, rand.Uint64(), uniform)
			// What the ends free and make ready is placed in the
			// batch's own entry (rules 9).
			cmd.Plan = eventsPlan(roundInput{View: view, Connected: s.h.sessions.connected, Term: s.h.prop.term(),
				Now: now, Policy: s.h.cfg.Scheduler, MaxQueueWait: s.h.cfg.MaxQueueWait}, cmd, s.h.planning.Load())
			if _, err := s.h.prop.propose(ctx, fsm.OpTaskEvents, cmd); err != nil {
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
		if _, err := h.prop.propose(ctx, fsm.OpAttemptsLost, r.Lost); err != nil {
			return nil, nil, err
		}
	}
	return r.Held, r.Stops, nil
}

func stopMsg(taskID string, attempt uint32, reason string) *wire.HeadMessage {
	return &wire.HeadMessage{Msg: &wire.HeadMessage_Stop{Stop: &wire.StopAttempt{TaskId: taskID, Attempt: attempt, Reason: reason}}}
}

// pushAssignments sends the worker what deliveries decides from view, in
// order; batches: the worker accepts assignment batches (its hello said
// so), and consecutive assignments go in them (batchAssignments).
func pushAssignments(stream wire.WorkerService_ConnectServer, view *state.View, workerID string, sent map[attemptKey]bool, batches bool) error {
	msgs := deliveries(view, workerID, sent)
	if batches {
		msgs = batchAssignments(msgs, maxAssignmentBatchBytes)
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			return err
		}
	}
	return nil
}
