package head

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/acl"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/wire"
)

// The errs.Error reasons of SandboxService's errors (errs.ReasonOf), beside
// "SANDBOX_" and the state of a sandbox that ended (SANDBOX_CLOSED,
// SANDBOX_EXPIRED, SANDBOX_LOST, SANDBOX_FAILED) and the worker's
// (worker.ReasonFileNotFound, worker.ReasonFileTooLarge).
const (
	// ReasonSandboxNotFound: no sandbox has the id (NotFound).
	ReasonSandboxNotFound = "SANDBOX_NOT_FOUND"
	// ReasonSandboxNotReady: PENDING or STARTING (FailedPrecondition).
	ReasonSandboxNotReady = "SANDBOX_NOT_READY"
	// ReasonWorkerUnreachable: the sandbox's worker did not answer; the
	// call may or may not have run (Unavailable).
	ReasonWorkerUnreachable = "WORKER_UNREACHABLE"
)

// sandboxService implements wire.SandboxServiceServer (docs/sandboxes.md).
// Create and close go through the same path as SubmitGraph and CancelGraph
// (a follower forwards them to the leader; admission, rate limits, quotas
// and placement apply); they are the only log entries. Exec and the file
// calls are relayed by the head that receives them straight to the worker
// holding the sandbox, found in this head's table: no leader, no Raft.
type sandboxService struct {
	wire.UnimplementedSandboxServiceServer
	h     *Head
	svc   *service
	conns *workerConns
	// metrics is set by the head's constructor once its registry exists
	// (nil: nothing counted).
	metrics *sandboxMetrics
	// activity is the data-path calls this head relayed, per sandbox, for
	// the dashboard's idle column.
	activity *sandboxActivity
}

var _ wire.SandboxServiceServer = (*sandboxService)(nil)

func newSandboxService(h *Head, svc *service) *sandboxService {
	return &sandboxService{h: h, svc: svc, conns: newWorkerConns(maxWorkerConns, func(worker string) grpc.DialOption { return h.transportCreds(tlsconfig.RoleWorker, worker) }, h.relayKey), activity: newSandboxActivity()}
}

// relayKey is the cluster's relay key (internal/acl's relay.go) that this
// head sends with every call it relays to a worker: the table's, when this
// head runs with ACLs; nil otherwise (a worker of a cluster without ACLs
// checks none).
func (h *Head) relayKey() []byte {
	if !h.cfg.ACL {
		return nil
	}
	return h.fsm.View().RelayKey()
}

// CreateSandbox submits the sandbox's graph and waits as asked.
func (s *sandboxService) CreateSandbox(ctx context.Context, req *wire.CreateSandboxRequest) (*wire.CreateSandboxResponse, error) {
	// Before rules 2 a started sandbox whose worker is lost would be placed
	// again as an empty box: no sandbox until every head applies them.
	// Unavailable, so that clients retry: a head that has not yet applied
	// the leader's rules entry (a new cluster's follower) has it in
	// milliseconds; a cluster mid-upgrade has it once every head runs the
	// new build.
	if r := s.h.fsm.View().Rules(); r < state.RulesSandboxLost {
		return nil, errs.ToStatus(errs.New(errs.Unavailable,
			"head %s applies rules %d and sandboxes need rules %d: every head must run a build that has them (megaflow cluster shows each head's RULES), and the leader then moves the cluster; retry",
			s.h.cfg.NodeID, r, state.RulesSandboxLost))
	}
	sp, _ := proto.Clone(req.GetSpec()).(*wire.SandboxCreateSpec)
	if sp != nil && sp.Id == "" {
		sp.Id = spec.NewSandboxID(rand.Reader)
	}
	g, err := spec.SandboxGraph(sp)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	sub := &wire.SubmitGraphRequest{Graph: g}
	if err := s.h.checkRate(ctx, "/"+wire.MegaflowService_ServiceDesc.ServiceName+"/SubmitGraph", sub); err != nil {
		return nil, err
	}
	var resp *wire.SubmitGraphResponse
	if sp.GetFromSnapshot() != "" {
		// A fork is resolved and submitted by the leader itself: the
		// snapshot's worker goes into the graph (SandboxSpec.snapshot_worker),
		// which a SubmitGraph from outside may not set (spec.CheckClientGraph).
		if !s.h.IsLeader() {
			return forwardSandbox(ctx, s.h.fwd, req, wire.SandboxServiceClient.CreateSandbox)
		}
		if err := s.h.waitApplied(ctx, req.GetMinIndex(), 0); err != nil {
			return nil, errs.ToStatus(err)
		}
		if err := s.sandboxFork(s.h.fsm.View(), sp, g); err != nil {
			return nil, errs.ToStatus(err)
		}
		if resp, err = s.h.submit(ctx, g); err != nil {
			return nil, errs.ToStatus(err)
		}
	} else if resp, err = s.svc.submitGraph(ctx, sub); err != nil {
		return nil, err // a status already
	}
	if err := s.h.waitApplied(ctx, resp.GetIndex(), 0); err != nil {
		return nil, errs.ToStatus(err)
	}
	wait := time.Duration(req.GetWaitReadyMillis()) * time.Millisecond
	sb, err := s.waitSandbox(ctx, sp.Id, wait, func(st wire.SandboxState) bool {
		return st != wire.SandboxState_SANDBOX_STATE_PENDING && st != wire.SandboxState_SANDBOX_STATE_STARTING
	})
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &wire.CreateSandboxResponse{Sandbox: sb, Existed: resp.GetExisted()}, nil
}

// waitSandbox returns sandbox id once done says its state is final for the
// caller, or when wait has passed (0: at once), from this head's table.
func (s *sandboxService) waitSandbox(ctx context.Context, id string, wait time.Duration, done func(wire.SandboxState) bool) (*wire.Sandbox, error) {
	var deadline <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait) // a caller's wait: the system clock, like its context
		defer t.Stop()
		deadline = t.C
	}
	for {
		changed := s.h.fsm.Changed()
		sb, err := s.get(s.h.fsm.View(), id)
		if err != nil || wait <= 0 || done(sb.GetState()) {
			return sb, err
		}
		select {
		case <-changed:
		case <-deadline:
			return sb, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// get returns sandbox id as view shows it. Errors: NotFound.
func (s *sandboxService) get(view *state.View, id string) (*wire.Sandbox, error) {
	if err := spec.CheckSandboxID("id", id); err != nil {
		return nil, err
	}
	g, t := view.Graph(id), view.Task(spec.SandboxTaskID(id))
	if a := view.Archived(id); g == nil && a != nil {
		e := errs.New(errs.NotFound, "sandbox %s ended (%s) and was archived at %s: a finished sandbox is kept for the head's --graph-retention; "+
			"its summary is in `megaflow status %s`", id, strings.TrimPrefix(a.GetState().String(), "GRAPH_STATE_"),
			time.Unix(0, a.GetArchivedUnixNanos()).UTC().Format(time.RFC3339), id)
		e.Reason = ReasonSandboxNotFound
		return nil, e
	}
	if g == nil || t == nil || t.Spec.GetSandbox() == nil {
		e := errs.New(errs.NotFound, "sandbox %s not found (at index %d of head %s): it was never created, or deleted; ListSandboxes lists them", id, view.Index(), s.h.cfg.NodeID)
		e.Reason = ReasonSandboxNotFound
		return nil, e
	}
	return sandboxOf(g, t, view.Index()), nil
}

// sandboxOf is the API's view of a sandbox graph g and its task t, read at
// table index index.
func sandboxOf(g *state.Graph, t *state.Task, index uint64) *wire.Sandbox {
	sb := &wire.Sandbox{
		Id:                 g.ID,
		Tenant:             g.Tenant,
		State:              sandboxStateOf(t),
		Reason:             t.Reason,
		ReasonCode:         t.ReasonCode,
		CreateUnixNanos:    g.CreateUnixNanos,
		Image:              t.Spec.GetImage(),
		Labels:             g.Labels,
		LifetimeSeconds:    g.DeadlineSeconds,
		IdleTimeoutSeconds: t.Spec.GetSandbox().GetIdleTimeoutSeconds(),
		Index:              index,
		FromSnapshot:       t.Spec.GetSandbox().GetFromSnapshot(),
	}
	if a := t.CurrentAttempt(); a != nil {
		sb.WorkerId = a.WorkerID
		sb.ReadyUnixNanos = a.StartUnixNanos
		sb.FinishUnixNanos = a.FinishUnixNanos
	}
	if !spec.SandboxLive(sb.State) && sb.FinishUnixNanos == 0 {
		sb.FinishUnixNanos = t.UpdateUnixNanos
	}
	return sb
}

// sandboxStateOf is the API's state of sandbox task t (spec.SandboxState):
// PAUSED while it runs on an attempt marked paused.
func sandboxStateOf(t *state.Task) wire.SandboxState {
	a := t.ActiveAttempt()
	return spec.SandboxState(t.State, t.ReasonCode, a != nil && a.Paused)
}

// GetSandbox returns one sandbox from this head's table.
func (s *sandboxService) GetSandbox(ctx context.Context, req *wire.GetSandboxRequest) (*wire.GetSandboxResponse, error) {
	if err := s.h.waitApplied(ctx, req.GetMinIndex(), 0); err != nil {
		return nil, errs.ToStatus(err)
	}
	sb, err := s.get(s.h.fsm.View(), req.GetId())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &wire.GetSandboxResponse{Sandbox: sb}, nil
}

// ListSandboxes returns one page of the sandboxes of a tenant (every
// tenant's when empty), oldest first (by creation time, then id); live
// ones only unless all. The page token is the last sandbox's creation time
// and id, so a page continues after it even when sandboxes came or went.
func (s *sandboxService) ListSandboxes(ctx context.Context, req *wire.ListSandboxesRequest) (*wire.ListSandboxesResponse, error) {
	limit, err := pageSize(req.GetPageSize(), 100, spec.SandboxMaxPageSize)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	if err := s.h.waitApplied(ctx, req.GetMinIndex(), 0); err != nil {
		return nil, errs.ToStatus(err)
	}
	var after *sandboxCursor
	if req.GetPageToken() != "" {
		c, err := parseSandboxCursor(req.GetPageToken())
		if err != nil {
			return nil, errs.ToStatus(err)
		}
		after = &c
	}
	view := s.h.fsm.View()
	var out []*wire.Sandbox
	for g := range view.Graphs() {
		if spec.CheckSandboxID("id", g.ID) != nil || (req.GetTenant() != "" && g.Tenant != req.GetTenant()) {
			continue
		}
		if after != nil && after.compare(g.CreateUnixNanos, g.ID) >= 0 {
			continue
		}
		t := view.Task(spec.SandboxTaskID(g.ID))
		if t == nil || t.Spec.GetSandbox() == nil {
			continue
		}
		sb := sandboxOf(g, t, view.Index())
		if req.GetAll() || spec.SandboxLive(sb.State) {
			out = append(out, sb)
		}
	}
	slices.SortFunc(out, func(a, b *wire.Sandbox) int {
		return sandboxCursor{a.CreateUnixNanos, a.Id}.compare(b.CreateUnixNanos, b.Id)
	})
	resp := &wire.ListSandboxesResponse{Sandboxes: out}
	if len(out) > limit {
		resp.Sandboxes = out[:limit]
		last := out[limit-1]
		resp.NextPageToken = sandboxCursor{last.CreateUnixNanos, last.Id}.String()
	}
	return resp, nil
}

// sandboxCursor is where a page of ListSandboxes ended: the last
// sandbox's creation time and id.
type sandboxCursor struct {
	createUnixNanos int64
	id              string
}

// compare orders the cursor against a sandbox created at nanos with id:
// -1 if the cursor comes first, 0 if it is that sandbox, 1 if after.
func (c sandboxCursor) compare(nanos int64, id string) int {
	switch {
	case c.createUnixNanos < nanos:
		return -1
	case c.createUnixNanos > nanos:
		return 1
	}
	return strings.Compare(c.id, id)
}

// String is the cursor as a page token: "<nanos>.<id>".
func (c sandboxCursor) String() string { return strconv.FormatInt(c.createUnixNanos, 10) + "." + c.id }

// parseSandboxCursor reads a page token made by String. Errors:
// InvalidArgument.
func parseSandboxCursor(tok string) (sandboxCursor, error) {
	n, id, ok := strings.Cut(tok, ".")
	nanos, err := strconv.ParseInt(n, 10, 64)
	if !ok || err != nil || nanos < 0 || spec.CheckSandboxID("id", id) != nil {
		return sandboxCursor{}, errs.New(errs.InvalidArgument, "page_token %q is not one a ListSandboxes answer gave (next_page_token): start again without it", tok)
	}
	return sandboxCursor{nanos, id}, nil
}

// CloseSandbox cancels the sandbox's graph (a no-op for one that ended) and
// returns the sandbox as of the cancel.
func (s *sandboxService) CloseSandbox(ctx context.Context, req *wire.CloseSandboxRequest) (*wire.CloseSandboxResponse, error) {
	if err := s.h.waitApplied(ctx, req.GetMinIndex(), 0); err != nil {
		return nil, errs.ToStatus(err)
	}
	if _, err := s.get(s.h.fsm.View(), req.GetId()); err != nil {
		return nil, errs.ToStatus(err)
	}
	resp, err := s.svc.CancelGraph(ctx, &wire.CancelGraphRequest{GraphId: req.GetId(), Reason: "sandbox closed"})
	if err != nil {
		return nil, err // a status already
	}
	if err := s.h.waitApplied(ctx, resp.GetIndex(), 0); err != nil {
		return nil, errs.ToStatus(err)
	}
	sb, err := s.get(s.h.fsm.View(), req.GetId())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &wire.CloseSandboxResponse{Sandbox: sb}, nil
}

// target finds the worker holding READY sandbox id in this head's table
// (once it applied minIndex) and returns a client for it and the
// sandbox's attempt. Errors: NotFound; FailedPrecondition (not READY yet,
// PAUSED, or ended: the message says how and why; the worker serves no
// sandboxes); Unavailable.
func (s *sandboxService) target(ctx context.Context, id string, minIndex uint64) (wire.SandboxWorkerServiceClient, uint32, string, error) {
	if err := s.h.waitApplied(ctx, minIndex, 0); err != nil {
		return nil, 0, "", err
	}
	view := s.h.fsm.View()
	sb, err := s.get(view, id)
	if err != nil {
		return nil, 0, "", err
	}
	switch sb.State {
	case wire.SandboxState_SANDBOX_STATE_READY:
	case wire.SandboxState_SANDBOX_STATE_PAUSED:
		return nil, 0, "", pausedErr(id)
	case wire.SandboxState_SANDBOX_STATE_PENDING, wire.SandboxState_SANDBOX_STATE_STARTING:
		e := errs.New(errs.FailedPrecondition, "sandbox %s is %s, not ready yet: wait until GetSandbox says READY (or create it with wait_ready_millis)",
			id, sandboxStateName(sb.State))
		e.Reason = ReasonSandboxNotReady
		return nil, 0, "", e
	default:
		e := errs.New(errs.FailedPrecondition, "sandbox %s is %s (%s: %s); its files and processes are gone: create a new sandbox",
			id, sandboxStateName(sb.State), codeName(sb.ReasonCode), sb.Reason)
		e.Reason = "SANDBOX_" + sandboxStateName(sb.State)
		return nil, 0, "", e
	}
	if err := s.h.charge(sb.GetTenant(), "each sandbox exec and file call counts"); err != nil {
		return nil, 0, "", err
	}
	return s.workerOf(view, id)
}

// workerOf returns a client for the worker holding the running attempt of
// sandbox id in view, the attempt's number and the worker's id. Errors:
// FailedPrecondition (no running attempt; the worker serves no
// sandboxes); Unavailable.
func (s *sandboxService) workerOf(view *state.View, id string) (wire.SandboxWorkerServiceClient, uint32, string, error) {
	t := view.Task(spec.SandboxTaskID(id))
	a := t.ActiveAttempt()
	if a == nil {
		return nil, 0, "", errs.New(errs.FailedPrecondition, "sandbox %s has no running attempt: get it again", id)
	}
	var addr string
	if w := view.Worker(a.WorkerID); w != nil {
		addr = w.Info.GetAddr()
	}
	if addr == "" {
		return nil, 0, "", errs.New(errs.FailedPrecondition, "sandbox %s runs on worker %s, which serves no sandboxes: start workers with --sandbox-addr", id, a.WorkerID)
	}
	cli, err := s.conns.get(a.WorkerID, addr)
	if err != nil {
		return nil, 0, "", err
	}
	return cli, a.Number, a.WorkerID, nil
}

// Exec relays an exec to the sandbox's worker and its output back, and
// counts it (sandboxMetrics).
func (s *sandboxService) Exec(req *wire.SandboxExecRequest, stream grpc.ServerStreamingServer[wire.SandboxExecResponse]) error {
	start := s.h.clock.Now()
	x, err := s.exec(req, stream)
	s.metrics.execDone(s.h.clock.Now().Sub(start), x, err)
	return err
}

// exec is Exec's relay; it returns the exit it passed on (nil: none).
func (s *sandboxService) exec(req *wire.SandboxExecRequest, stream grpc.ServerStreamingServer[wire.SandboxExecResponse]) (*wire.SandboxExecExit, error) {
	if err := spec.CheckSandboxExec(req); err != nil {
		return nil, errs.ToStatus(err)
	}
	cli, n, worker, err := s.target(stream.Context(), req.GetSandboxId(), req.GetMinIndex())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	s.activity.begin(req.GetSandboxId(), s.h.clock.Now())
	defer func() { s.activity.end(req.GetSandboxId(), s.h.clock.Now()) }()
	out := proto.Clone(req).(*wire.SandboxExecRequest)
	out.Attempt = n
	st, err := cli.Exec(stream.Context(), out)
	if err != nil {
		return nil, relayErr(req.GetSandboxId(), worker, err)
	}
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil, nil // the worker ended the stream without an exit
		}
		if err != nil {
			return nil, relayErr(req.GetSandboxId(), worker, err)
		}
		if err := stream.Send(m); err != nil {
			return nil, err
		}
		// The exit is the last message: once it is sent the exec is done
		// (the client, which has it, may already have gone, ending the
		// worker's stream with a cancellation rather than its EOF).
		if x := m.GetExit(); x != nil {
			return x, nil
		}
	}
}

// WriteFile relays a file write to the sandbox's worker.
func (s *sandboxService) WriteFile(ctx context.Context, req *wire.SandboxWriteFileRequest) (*wire.SandboxWriteFileResponse, error) {
	if err := spec.CheckSandboxPath(req.GetSandboxId(), req.GetPath()); err != nil {
		return nil, errs.ToStatus(err)
	}
	cli, n, worker, err := s.target(ctx, req.GetSandboxId(), req.GetMinIndex())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	s.activity.begin(req.GetSandboxId(), s.h.clock.Now())
	defer func() { s.activity.end(req.GetSandboxId(), s.h.clock.Now()) }()
	out := proto.Clone(req).(*wire.SandboxWriteFileRequest)
	out.Attempt = n
	resp, err := cli.WriteFile(ctx, out)
	if err != nil {
		return nil, relayErr(req.GetSandboxId(), worker, err)
	}
	s.metrics.addFileBytes("write", len(req.GetData()))
	return resp, nil
}

// ReadFile relays a file read from the sandbox's worker.
func (s *sandboxService) ReadFile(req *wire.SandboxReadFileRequest, stream grpc.ServerStreamingServer[wire.SandboxReadFileResponse]) error {
	if err := spec.CheckSandboxPath(req.GetSandboxId(), req.GetPath()); err != nil {
		return errs.ToStatus(err)
	}
	cli, n, worker, err := s.target(stream.Context(), req.GetSandboxId(), req.GetMinIndex())
	if err != nil {
		return errs.ToStatus(err)
	}
	s.activity.begin(req.GetSandboxId(), s.h.clock.Now())
	defer func() { s.activity.end(req.GetSandboxId(), s.h.clock.Now()) }()
	out := proto.Clone(req).(*wire.SandboxReadFileRequest)
	out.Attempt = n
	st, err := cli.ReadFile(stream.Context(), out)
	if err != nil {
		return relayErr(req.GetSandboxId(), worker, err)
	}
	return relayChunks(s, req.GetSandboxId(), worker, st.Recv, stream.Send)
}

// relayChunks forwards every message the sandbox's worker streams (recv)
// to the client (send) until the worker's stream ends, counting each
// message's data as bytes read; a worker's error is passed on as relayErr
// does.
func relayChunks[M interface{ GetData() []byte }](s *sandboxService, id, worker string, recv func() (M, error), send func(M) error) error {
	for {
		m, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return relayErr(id, worker, err)
		}
		if err := send(m); err != nil {
			return err
		}
		s.metrics.addFileBytes("read", len(m.GetData()))
	}
}

// relayErr passes a worker's answer through (it classified it already,
// with a reason for its own Unavailable) except a transport failure (an
// Unavailable without details), which becomes Unavailable,
// WORKER_UNREACHABLE, saying the call may or may not have run.
func relayErr(id, worker string, err error) error {
	st, ok := status.FromError(err)
	if ok && st.Code() == codes.Unavailable && len(st.Details()) == 0 {
		what := "the call may or may not have run there"
		if notSent(st.Message()) {
			what = "the call did not reach it (no connection: nothing was sent)"
		}
		e := errs.New(errs.Unavailable, "sandbox %s: worker %s did not answer (%s); %s: get the sandbox to see whether it is still READY",
			id, worker, st.Message(), what)
		e.Reason = ReasonWorkerUnreachable
		return errs.ToStatus(e)
	}
	return err
}

// notSent reports whether a gRPC Unavailable with message msg failed a
// call before it was sent: grpc-go fails a call it had no connection for
// with the dial's error ("Error while dialing"), and gRPC core with
// "failed to connect to all addresses"; a call that broke after it left
// says something else ("connection reset", "EOF", "error reading from
// server").
func notSent(msg string) bool {
	return strings.Contains(msg, "Error while dialing") || strings.Contains(msg, "failed to connect to all addresses")
}

func sandboxStateName(s wire.SandboxState) string {
	n := s.String()
	if len(n) > len("SANDBOX_STATE_") {
		return n[len("SANDBOX_STATE_"):]
	}
	return n
}

func codeName(c wire.ReasonCode) string {
	n := c.String()
	if len(n) > len("REASON_CODE_") {
		return n[len("REASON_CODE_"):]
	}
	return n
}

// maxWorkerConns bounds the connections a head keeps to workers' sandbox
// listeners.
const maxWorkerConns = 256

// workerConns caches gRPC connections to workers' sandbox addresses, one
// per worker and address, at most max; the least recently used one is
// closed to make room.
type workerConns struct {
	max   int
	creds func(worker string) grpc.DialOption // plaintext, or mutual TLS verifying that worker's certificate
	key   func() []byte                       // the relay key each call carries (nil: none)

	mu    sync.Mutex
	conns map[workerAddr]*workerConn
	tick  uint64
}

// workerAddr keys a connection: the worker it must reach and the address
// it dials.
type workerAddr struct{ worker, addr string }

type workerConn struct {
	conn *grpc.ClientConn
	used uint64
}

func newWorkerConns(max int, creds func(worker string) grpc.DialOption, key func() []byte) *workerConns {
	return &workerConns{max: max, creds: creds, key: key, conns: map[workerAddr]*workerConn{}}
}

// withRelayKey returns ctx with the relay key in its outgoing metadata
// (acl.RelayKeyMetadata), replacing any value there, or ctx itself when
// there is no key.
func (c *workerConns) withRelayKey(ctx context.Context) context.Context {
	key := c.key()
	if len(key) == 0 {
		return ctx
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	md.Set(acl.RelayKeyMetadata, acl.RelayKeyValue(key))
	return metadata.NewOutgoingContext(ctx, md)
}

// unaryRelayKey and streamRelayKey put the relay key on every call of a
// connection to a worker.
func (c *workerConns) unaryRelayKey(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(c.withRelayKey(ctx), method, req, reply, cc, opts...)
}

func (c *workerConns) streamRelayKey(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(c.withRelayKey(ctx), desc, cc, method, opts...)
}

// get returns a client for worker at addr; with TLS, its handshake
// refuses a server whose certificate is not that worker's
// (<worker>.worker.megaflow), so a worker cannot serve another's
// sandboxes. Errors: Unavailable (the address cannot be dialled).
func (c *workerConns) get(worker, addr string) (wire.SandboxWorkerServiceClient, error) {
	key := workerAddr{worker, addr}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick++
	if wc, ok := c.conns[key]; ok {
		wc.used = c.tick
		return wire.NewSandboxWorkerServiceClient(wc.conn), nil
	}
	if len(c.conns) >= c.max {
		var oldest workerAddr
		for a, wc := range c.conns {
			if oldest == (workerAddr{}) || wc.used < c.conns[oldest].used {
				oldest = a
			}
		}
		_ = c.conns[oldest].conn.Close()
		delete(c.conns, oldest)
	}
	conn, err := grpc.NewClient(addr, c.creds(worker),
		grpc.WithChainUnaryInterceptor(c.unaryRelayKey), grpc.WithChainStreamInterceptor(c.streamRelayKey),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(spec.SandboxMaxFile+1<<20), grpc.MaxCallSendMsgSize(spec.SandboxMaxFile+1<<20)),
		// A worker cut off (a partition, a frozen host) ends the calls in
		// flight within 15 s instead of when the client gives up.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: false}))
	if err != nil {
		return nil, errs.New(errs.Unavailable, "worker sandbox address %s: %v", addr, err)
	}
	c.conns[key] = &workerConn{conn: conn, used: c.tick}
	return wire.NewSandboxWorkerServiceClient(conn), nil
}

// close closes every connection.
func (c *workerConns) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, wc := range c.conns {
		_ = wc.conn.Close()
		delete(c.conns, a)
	}
}
