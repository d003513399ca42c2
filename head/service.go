package head

import (
	"context"
	"crypto/rand"
	"math"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/gossip"
	"github.com/megaflow/megaflow/internal/lease"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// service implements the client-facing wire.MegaflowServiceServer. Writes
// run on the leader (a follower forwards them); reads are served from this
// head's table with a ReadMeta saying how fresh they are. Every error leaves
// through errs.ToStatus.
type service struct {
	wire.UnimplementedMegaflowServiceServer
	h *Head
}

var _ wire.MegaflowServiceServer = (*service)(nil)

// SubmitGraph validates the graph, then commits it in as many log entries
// as its size needs; the last entry makes it visible whole. A graph may not
// carry what only the heads set (spec.CheckClientGraph: the snapshot
// fields of a sandbox created from a snapshot).
func (s *service) SubmitGraph(ctx context.Context, req *wire.SubmitGraphRequest) (*wire.SubmitGraphResponse, error) {
	if req.GetGraph() == nil {
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument, "SubmitGraph: graph is missing"))
	}
	if err := spec.CheckClientGraph(req.GetGraph()); err != nil {
		return nil, errs.ToStatus(err)
	}
	return s.submitGraph(ctx, req)
}

// submitGraph is SubmitGraph after its client checks: a follower validates
// and forwards the call, the leader submits. CreateSandbox calls it for a
// sandbox that is no fork.
func (s *service) submitGraph(ctx context.Context, req *wire.SubmitGraphRequest) (*wire.SubmitGraphResponse, error) {
	if !s.h.IsLeader() {
		// Validate here too: bad input is refused by the head it reached.
		if err := spec.Validate(spec.Normalize(req.Graph), spec.DefaultLimits()); err != nil {
			return nil, errs.ToStatus(err)
		}
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.SubmitGraph)
		return resp, errs.ToStatus(err)
	}
	resp, err := s.h.submit(ctx, req.Graph)
	return resp, errs.ToStatus(err)
}

// submit runs on the leader: normalize, validate, pick an id, check for an
// existing graph, split into chunks and apply them in order.
func (h *Head) submit(ctx context.Context, in *wire.GraphSpec) (*wire.SubmitGraphResponse, error) {
	g := spec.Normalize(in)
	if err := spec.Validate(g, spec.DefaultLimits()); err != nil {
		return nil, err
	}
	if err := checkRetentionLabels(g.Labels); err != nil {
		return nil, err
	}
	now := h.clock.Now()
	if g.Id == "" {
		g.Id = spec.NewGraphID(now, rand.Reader)
	}
	digest := spec.Digest(g)
	unlock, err := h.submitLocks.lock(ctx, g.Id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	view := h.fsm.View()
	if existing := view.Graph(g.Id); existing != nil {
		if string(existing.SpecDigest) != string(digest) {
			return nil, errs.New(errs.AlreadyExists, "graph %q already exists with a different spec; submit under another id", g.Id)
		}
		return &wire.SubmitGraphResponse{GraphId: g.Id, Index: existing.CreateIndex, Existed: true}, nil
	}
	if a := view.Archived(g.Id); a != nil { // archived: the id stays taken, nothing runs again
		if string(a.GetSpecDigest()) != string(digest) {
			return nil, errs.New(errs.AlreadyExists, "graph %q already exists (archived) with a different spec; submit under another id", g.Id)
		}
		return &wire.SubmitGraphResponse{GraphId: g.Id, Index: a.GetCreateIndex(), Existed: true}, nil
	}
	if err := h.checkAdmission(view, g); err != nil {
		return nil, err
	}
	chunks := splitTasks(g.Tasks, h.cfg.MaxEntryBytes-proto.Size(&wire.GraphSpec{Id: g.Id, Tenant: g.Tenant, Labels: g.Labels, Name: g.Name})-1024)
	header := proto.Clone(g).(*wire.GraphSpec)
	header.Tasks = nil
	var res any
	var index uint64
	for i, tasks := range chunks {
		cmd := &wire.SubmitGraphCommand{Header: header, Tasks: tasks, Chunk: uint32(i), Chunks: uint32(len(chunks)),
			SpecDigest: digest, UnixNanos: now.UnixNano(), TaskCount: uint32(len(g.Tasks))}
		if len(chunks) == 1 {
			// The graph's ready tasks are placed with it (unless many
			// tasks wait or the scheduling loop is committing). The
			// speculative apply interns cmd's strings, which changes no
			// value: cmd encodes as it would have.
			cmd.Plan = submissionPlan(roundInput{View: view, Connected: h.sessions.connected, Term: h.prop.term(),
				Now: now, Policy: h.cfg.Scheduler, MaxQueueWait: h.cfg.MaxQueueWait}, cmd, h.planning.Load())
		}
		if res, index, err = h.apply(ctx, fsm.OpSubmitGraph, cmd); err != nil {
			h.refused(g.Tenant, err) // a policy changed since checkAdmission
			return nil, err
		}
	}
	r, ok := res.(*fsm.SubmitResult)
	if !ok {
		return nil, errs.New(errs.Internal, "graph %q: unexpected apply result %T", g.Id, res)
	}
	if r.Existed {
		if existing := h.fsm.View().Graph(g.Id); existing != nil {
			index = existing.CreateIndex
		} else if a := h.fsm.View().Archived(g.Id); a != nil {
			index = a.GetCreateIndex()
		}
	}
	return &wire.SubmitGraphResponse{GraphId: g.Id, Index: index, Existed: r.Existed}, nil
}

// splitTasks cuts tasks into chunks whose encoded size stays under
// maxBytes (a single task larger than that gets a chunk of its own; the
// validator bounds a task's size well below an entry's).
func splitTasks(tasks []*wire.TaskSpec, maxBytes int) [][]*wire.TaskSpec {
	var out [][]*wire.TaskSpec
	start, size := 0, 0
	for i, t := range tasks {
		n := proto.Size(t) + 4
		if i > start && size+n > maxBytes {
			out = append(out, tasks[start:i])
			start, size = i, 0
		}
		size += n
	}
	return append(out, tasks[start:])
}

// CancelGraph cancels every unfinished task of a graph.
func (s *service) CancelGraph(ctx context.Context, req *wire.CancelGraphRequest) (*wire.CancelGraphResponse, error) {
	if req.GraphId == "" {
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument, "CancelGraph: graph_id is empty"))
	}
	if !s.h.IsLeader() {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.CancelGraph)
		return resp, errs.ToStatus(err)
	}
	res, index, err := s.h.apply(ctx, fsm.OpCancel, &wire.CancelCommand{GraphId: req.GraphId, Reason: cancelReason(req.Reason),
		ReasonCode: wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER, UnixNanos: s.h.clock.Now().UnixNano()})
	if index, ok := s.h.archivedCancel(err, req.GraphId); ok {
		return &wire.CancelGraphResponse{Index: index}, nil
	}
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &wire.CancelGraphResponse{Index: index, Cancelled: res.(*fsm.CancelResult).Cancelled}, nil
}

// CancelTask cancels one task and the dependents that can then never run.
func (s *service) CancelTask(ctx context.Context, req *wire.CancelTaskRequest) (*wire.CancelTaskResponse, error) {
	graphID, _, ok := splitTaskID(req.TaskId)
	if !ok {
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument, "CancelTask: task id %q is not <graph id>/<task name>", req.TaskId))
	}
	if !s.h.IsLeader() {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.CancelTask)
		return resp, errs.ToStatus(err)
	}
	res, index, err := s.h.apply(ctx, fsm.OpCancel, &wire.CancelCommand{GraphId: graphID, TaskId: req.TaskId,
		Reason: cancelReason(req.Reason), ReasonCode: wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER, UnixNanos: s.h.clock.Now().UnixNano()})
	if index, ok := s.h.archivedCancel(err, graphID); ok {
		return &wire.CancelTaskResponse{Index: index}, nil
	}
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	return &wire.CancelTaskResponse{Index: index, Cancelled: res.(*fsm.CancelResult).Cancelled}, nil
}

func cancelReason(r string) string {
	if r == "" {
		return "cancelled by user"
	}
	return r
}

func splitTaskID(id string) (graph, name string, ok bool) {
	for i := len(id) - 1; i > 0; i-- {
		if id[i] == '/' {
			return id[:i], id[i+1:], i+1 < len(id)
		}
	}
	return "", "", false
}

// read waits as the read options ask and returns an immutable view of the
// table with its freshness. With RequireLeader on a follower it returns
// errForward: the caller forwards the whole request.
func (h *Head) read(ctx context.Context, ro *wire.ReadOptions) (*state.View, *wire.ReadMeta, error) {
	if ro.GetRequireLeader() {
		if !h.IsLeader() {
			return nil, nil, errForward
		}
		// Linearizable: every write acknowledged by an earlier leader is
		// behind the barrier the leader loop ran, every write acknowledged
		// by this one was applied here before its answer, and VerifyLeader
		// proves no newer leader exists.
		if !h.leaderReady.Load() {
			return nil, nil, errs.New(errs.Unavailable, "head %s was just elected and is still applying the log; retry shortly", h.cfg.NodeID)
		}
		if err := h.node.Await(ctx, h.node.Raft().VerifyLeader()); err != nil {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			return nil, nil, h.raftError(err)
		}
	}
	if min := ro.GetMinIndex(); min > 0 {
		if err := h.waitApplied(ctx, min, ro.GetMaxWaitMillis()); err != nil {
			return nil, nil, err
		}
	}
	view := h.fsm.View()
	leaderID, _ := h.leaderGRPC()
	meta := &wire.ReadMeta{Index: view.Index(), HeadId: h.cfg.NodeID, LeaderId: leaderID, FromLeader: h.IsLeader()}
	if !meta.FromLeader {
		meta.LeaderHttp = h.leaderHTTP(leaderID)
		if lc := h.node.Raft().LastContact(); !lc.IsZero() {
			meta.LastContactMillis = time.Since(lc).Milliseconds() // Raft's time, not the head's clock
		} else {
			meta.LastContactMillis = -1
		}
	}
	return view, meta, nil
}

var errForward = errs.New(errs.NotLeader, "forward to the leader")

// metaHTTP is the gossip Meta.Extra key of a head's HTTP address.
const metaHTTP = "http"

// leaderHTTP returns "http://<address>" of head leaderID's HTTP listener as
// gossip knows it, or "".
func (h *Head) leaderHTTP(leaderID string) string {
	if leaderID == "" {
		return ""
	}
	if m, ok := h.headMember(leaderID); ok && m.Status == gossip.StatusAlive && m.Meta.Extra[metaHTTP] != "" {
		return "http://" + m.Meta.Extra[metaHTTP]
	}
	return ""
}

// waitApplied blocks until this head applied index, ctx ends or maxWait
// (default 10 s) passes. Errors: Unavailable naming both indexes.
func (h *Head) waitApplied(ctx context.Context, index uint64, maxWaitMillis int64) error {
	if h.fsm.AppliedIndex() >= index {
		return nil
	}
	wait := 10 * time.Second
	if maxWaitMillis > 0 {
		wait = time.Duration(maxWaitMillis) * time.Millisecond
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := h.fsm.WaitForIndex(wctx, index); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errs.New(errs.Unavailable, "head %s has applied index %d, behind the requested %d after %v; retry or read from another head",
			h.cfg.NodeID, h.fsm.AppliedIndex(), index, wait)
	}
	return nil
}

// GetGraph returns one graph with its aggregate.
func (s *service) GetGraph(ctx context.Context, req *wire.GetGraphRequest) (*wire.GetGraphResponse, error) {
	view, meta, err := s.h.read(ctx, req.Read)
	if err == errForward {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.GetGraph)
		return resp, errs.ToStatus(err)
	}
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	g := view.Graph(req.GraphId)
	if g == nil {
		if a := view.Archived(req.GraphId); a != nil {
			return &wire.GetGraphResponse{Graph: a, Meta: meta}, nil // archived: its summary
		}
		return nil, errs.ToStatus(errs.New(errs.NotFound, "graph %q not found (at index %d of head %s)", req.GraphId, meta.Index, meta.HeadId))
	}
	return &wire.GetGraphResponse{Graph: g.ToWire(), Meta: meta}, nil
}

// ListGraphs returns a page of graphs.
func (s *service) ListGraphs(ctx context.Context, req *wire.ListGraphsRequest) (*wire.ListGraphsResponse, error) {
	view, meta, err := s.h.read(ctx, req.Read)
	if err == errForward {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.ListGraphs)
		return resp, errs.ToStatus(err)
	}
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	limit, err := pageSize(req.PageSize, 100, 1000)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	filter := state.GraphFilter{Tenant: req.Tenant, State: req.State}
	out := &wire.ListGraphsResponse{Meta: meta}
	if req.IncludeArchived {
		graphs, next, err := view.ListGraphsWithArchive(filter, req.PageToken, limit)
		if err != nil {
			return nil, errs.ToStatus(err)
		}
		out.Graphs, next, err = pageBySize(graphs, next, func(g *wire.Graph) *wire.Graph { return g }, func(n int) (string, error) {
			_, next, err := view.ListGraphsWithArchive(filter, req.PageToken, n)
			return next, err
		})
		if err != nil {
			return nil, errs.ToStatus(err)
		}
		out.NextPageToken = next
		return out, nil
	}
	graphs, next, err := view.ListGraphs(filter, req.PageToken, limit)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	out.Graphs, next, err = pageBySize(graphs, next, (*state.Graph).ToWire, func(n int) (string, error) {
		_, next, err := view.ListGraphs(filter, req.PageToken, n)
		return next, err
	})
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	out.NextPageToken = next
	return out, nil
}

// GetTask returns one task with its attempts.
func (s *service) GetTask(ctx context.Context, req *wire.GetTaskRequest) (*wire.GetTaskResponse, error) {
	view, meta, err := s.h.read(ctx, req.Read)
	if err == errForward {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.GetTask)
		return resp, errs.ToStatus(err)
	}
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	t := view.Task(req.TaskId)
	if t == nil {
		if graph, _, ok := strings.Cut(req.TaskId, "/"); ok {
			if err := archivedError(view, graph); err != nil {
				return nil, errs.ToStatus(err)
			}
		}
		return nil, errs.ToStatus(errs.New(errs.NotFound, "task %q not found (at index %d of head %s); task ids are <graph id>/<task name>",
			req.TaskId, meta.Index, meta.HeadId))
	}
	return &wire.GetTaskResponse{Task: t.ToWire(), Meta: meta}, nil
}

// ListTasks returns a page of tasks.
func (s *service) ListTasks(ctx context.Context, req *wire.ListTasksRequest) (*wire.ListTasksResponse, error) {
	view, meta, err := s.h.read(ctx, req.Read)
	if err == errForward {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.ListTasks)
		return resp, errs.ToStatus(err)
	}
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	limit, err := pageSize(req.PageSize, 100, 5000)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	if req.GraphId != "" {
		if err := archivedError(view, req.GraphId); err != nil {
			return nil, errs.ToStatus(err)
		}
	}
	filter := state.TaskFilter{GraphID: req.GraphId, State: req.State, Tenant: req.Tenant, WorkerID: req.WorkerId}
	tasks, next, err := view.ListTasks(filter, req.PageToken, limit)
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	var opts []state.WireOption
	if req.OmitSpec {
		opts = append(opts, state.OmitSpec)
	}
	out := &wire.ListTasksResponse{Meta: meta}
	out.Tasks, next, err = pageBySize(tasks, next, func(t *state.Task) *wire.Task { return t.ToWire(opts...) }, func(n int) (string, error) {
		_, next, err := view.ListTasks(filter, req.PageToken, n)
		return next, err
	})
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	out.NextPageToken = next
	return out, nil
}

// MaxListResponseBytes bounds the encoded rows of one ListTasks or
// ListGraphs page, below gRPC's default 4 MiB receive limit of a client: a
// page ends early (with a next_page_token) once its rows reach it, so no
// data the table holds can make a listing unreadable. A page holds at
// least one row; every row is bounded well below this by the input bounds
// (spec.Limits, spec.CheckRequest).
const MaxListResponseBytes = 3 << 20

// pageBySize converts rows to the wire and cuts the page at the last row
// that keeps it under MaxListResponseBytes; then the next page's token is
// the one a listing of that many rows gives (tokenFor). Otherwise it
// returns every row with next unchanged.
func pageBySize[R any, W proto.Message](rows []R, next string, toWire func(R) W, tokenFor func(n int) (string, error)) ([]W, string, error) {
	out := make([]W, 0, len(rows))
	size := 0
	for i, r := range rows {
		w := toWire(r)
		size += proto.Size(w) + 8 // field tag and length
		if i > 0 && size > MaxListResponseBytes {
			token, err := tokenFor(i)
			return out, token, err
		}
		out = append(out, w)
	}
	return out, next, nil
}

func pageSize(n int32, def, max int) (int, error) {
	switch {
	case n == 0:
		return def, nil
	case n < 0 || int(n) > max:
		return 0, errs.New(errs.InvalidArgument, "page_size %d is out of range; give 1 to %d (0: %d)", n, max, def)
	}
	return int(n), nil
}

// watchHeartbeat is how often an idle Watch stream tells the client how far
// it has been scanned, so a resume after a disconnect starts from there.
const watchHeartbeat = 5 * time.Second

// Watch streams events after the request's cursor: the retained history
// first, then live events as entries are applied.
func (s *service) Watch(req *wire.WatchRequest, stream wire.MegaflowService_WatchServer) error {
	ctx := stream.Context()
	f := s.h.fsm
	cur := fsm.Cursor{Index: req.AfterIndex, Seq: req.AfterSeq}
	if req.FromNow {
		cur = fsm.Cursor{Index: f.AppliedIndex(), Seq: math.MaxUint32}
	}
	beat := time.NewTicker(watchHeartbeat)
	defer beat.Stop()
	for {
		changed := f.Changed()
		applied := f.AppliedIndex() // every event up to here is in the ring
		evs, next, err := f.EventsAfter(cur, req.GraphId, 1024)
		if err != nil {
			return errs.ToStatus(err)
		}
		cur = next
		if len(evs) > 0 {
			// In messages of at most MaxListResponseBytes of events each
			// (events carry reasons of up to 16 KiB).
			for len(evs) > 0 {
				n, size := 0, 0
				for n < len(evs) && (n == 0 || size+proto.Size(evs[n])+8 <= MaxListResponseBytes) {
					size += proto.Size(evs[n]) + 8
					n++
				}
				if err := stream.Send(&wire.WatchResponse{Events: evs[:n], AppliedIndex: f.AppliedIndex()}); err != nil {
					return err
				}
				evs = evs[n:]
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-beat.C:
			if applied > cur.Index {
				cur = fsm.Cursor{Index: applied, Seq: math.MaxUint32}
			}
			if err := stream.Send(&wire.WatchResponse{AppliedIndex: cur.Index}); err != nil {
				return err
			}
		}
	}
}

// ListWorkers returns every worker the table knows.
func (s *service) ListWorkers(ctx context.Context, req *wire.ListWorkersRequest) (*wire.ListWorkersResponse, error) {
	view, meta, err := s.h.read(ctx, req.Read)
	if err == errForward {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.ListWorkers)
		return resp, errs.ToStatus(err)
	}
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	out := &wire.ListWorkersResponse{Meta: meta}
	leading := s.h.IsLeader() && s.h.leaderReady.Load()
	now := s.h.clock.Now()
	for _, w := range view.Workers() {
		ww := w.ToWire()
		if leading && w.Status == wire.WorkerStatus_WORKER_STATUS_ALIVE {
			// The lease is the leader's memory, not the table's.
			renewed, since := s.h.sessions.renewedAt(w.Info.Id), s.h.leaderSince()
			if !renewed.IsZero() {
				ww.LeaseRenewedUnixNanos = renewed.UnixNano()
			}
			ww.LeaseExpiresUnixNanos = now.Add(lease.HeadExpiresIn(s.h.cfg.Lease, renewed, since, now)).UnixNano()
		}
		out.Workers = append(out.Workers, ww)
	}
	return out, nil
}
