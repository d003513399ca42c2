package head

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/artifact"
	"github.com/megaflow/megaflow/internal/blob"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// The artifact read API: logs, manifests and files of attempts, read from
// the artifact store (Config.Artifacts) that workers upload to. Any head
// answers from its own table and the shared store; nothing is forwarded.

// logsPoll is how often a followed log looks for new chunks.
const logsPoll = 250 * time.Millisecond

// logsLandWait bounds how long a log read without follow waits for a
// finished attempt whose worker has not uploaded its last chunks yet
// (Attempt.ArtifactsPending: the final event comes first, the spool's
// upload after it): the caller who waited for a task and then reads its
// log gets the whole log, not the part that had landed.
const logsLandWait = 30 * time.Second

// getChunkBytes is the size of one ArtifactGet data message.
const getChunkBytes = 256 << 10

// artifactAttempt finds task taskID's attempt number (0: the current one)
// in view. Errors: FailedPrecondition (no store), NotFound.
func (h *Head) artifactAttempt(view *state.View, taskID string, number uint32) (*state.Task, *state.Attempt, artifact.Attempt, error) {
	if h.cfg.Artifacts == nil {
		return nil, nil, artifact.Attempt{}, errs.New(errs.FailedPrecondition,
			"head %s has no artifact store; start it with --artifacts URL (the workers' store)", h.cfg.NodeID)
	}
	t := view.Task(taskID)
	if t == nil {
		if graph, _, ok := strings.Cut(taskID, "/"); ok {
			if err := archivedError(view, graph); err != nil {
				return nil, nil, artifact.Attempt{}, err
			}
		}
		return nil, nil, artifact.Attempt{}, errs.New(errs.NotFound, "task %q not found; task ids are <graph id>/<task name>", taskID)
	}
	if len(t.Attempts) == 0 {
		return nil, nil, artifact.Attempt{}, errs.New(errs.NotFound, "task %q has not run yet (state %s): it has no attempts", taskID, t.State)
	}
	if number == 0 {
		number = t.CurrentAttempt().Number
	}
	for i := range t.Attempts {
		if a := &t.Attempts[i]; a.Number == number {
			return t, a, artifact.ForTask(t.Tenant, t.GraphID, t.ID, number), nil
		}
	}
	return nil, nil, artifact.Attempt{}, errs.New(errs.NotFound, "task %q has no attempt %d; its attempts are 1 to %d",
		taskID, number, t.CurrentAttempt().Number)
}

// storeErr maps a blob store error to an error class.
func storeErr(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	switch {
	case errors.Is(err, blob.ErrNotFound):
		return errs.New(errs.NotFound, "%s: %v", what, err)
	case errors.Is(err, blob.ErrUnavailable):
		return errs.New(errs.Unavailable, "%s: the artifact store did not answer; try again: %v", what, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return errs.New(errs.Internal, "%s: %v", what, err)
}

// Logs streams an attempt's log chunks in order; see the proto.
func (s *service) Logs(req *wire.LogsRequest, stream wire.MegaflowService_LogsServer) error {
	return errs.ToStatus(s.h.logs(stream.Context(), req, stream.Send))
}

// caughtUp waits until this head applied the client's session index (the
// artifact reads are served by any head, never forwarded).
func (h *Head) caughtUp(ctx context.Context, ro *wire.ReadOptions) error {
	_, _, err := h.read(ctx, &wire.ReadOptions{MinIndex: ro.GetMinIndex(), MaxWaitMillis: ro.GetMaxWaitMillis()})
	return err
}

func (h *Head) logs(ctx context.Context, req *wire.LogsRequest, send func(*wire.LogsResponse) error) error {
	if err := h.caughtUp(ctx, req.GetRead()); err != nil {
		return err
	}
	_, _, att, err := h.artifactAttempt(h.fsm.View(), req.GetTaskId(), req.GetAttempt())
	for err != nil && req.GetFollow() && req.GetAttempt() == 0 {
		// Following a task that has not run yet: wait for its first attempt.
		t := h.fsm.View().Task(req.GetTaskId())
		if t == nil || len(t.Attempts) > 0 || state.IsTerminal(t.State) || h.cfg.Artifacts == nil {
			break
		}
		if err := sleepCtx(ctx, logsPoll); err != nil {
			return err
		}
		_, _, att, err = h.artifactAttempt(h.fsm.View(), req.GetTaskId(), 0)
	}
	if err != nil {
		return err
	}
	store := h.cfg.Artifacts
	next := req.GetAfterChunk() + 1
	readBy := h.clock.Now().Add(logsLandWait)
	for {
		// Whether more can come is judged before listing, so that chunks
		// landing meanwhile are still streamed.
		_, a, _, err := h.artifactAttempt(h.fsm.View(), req.GetTaskId(), att.Number)
		if err != nil {
			return err
		}
		over := !state.IsActive(a.State) && !a.ArtifactsPending
		m, err := artifact.ReadManifest(ctx, store, att)
		if err != nil && !errors.Is(err, blob.ErrNotFound) {
			if !req.GetFollow() || !errors.Is(err, blob.ErrUnavailable) {
				return storeErr(err, "logs of %s attempt %d: manifest", req.GetTaskId(), att.Number)
			}
		}
		chunks, err := artifact.LogChunks(ctx, store, att)
		if err != nil {
			if !req.GetFollow() || !errors.Is(err, blob.ErrUnavailable) {
				return storeErr(err, "logs of %s attempt %d", req.GetTaskId(), att.Number)
			}
		}
		for _, n := range chunks {
			if n < next {
				continue
			}
			if n > next || (m != nil && n > m.LogChunks) {
				break // a gap: the chunk before has not landed yet
			}
			data, err := readObject(ctx, store, att.LogKey(n))
			if err != nil {
				return storeErr(err, "logs of %s attempt %d: chunk %d", req.GetTaskId(), att.Number, n)
			}
			if err := send(&wire.LogsResponse{Data: data, Attempt: att.Number, Chunk: n}); err != nil {
				return err
			}
			next++
		}
		if m == nil && over && next == req.GetAfterChunk()+1 && !a.ArtifactsPending && !state.IsActive(a.State) {
			return errs.New(errs.NotFound, "attempt %d of task %q left no logs in the artifact store %s: its worker stored them elsewhere "+
				"(heads and workers must share one --artifacts store; each defaults to a directory under its own --data-dir), "+
				"ran without one, or was lost first; or they were deleted", att.Number, req.GetTaskId(), store.URL())
		}
		// The rest of the log is still to land while the worker that ran
		// the attempt is alive to upload it.
		landing := !state.IsActive(a.State) && a.ArtifactsPending
		if wk := h.fsm.View().Worker(a.WorkerID); landing && (wk == nil || wk.Status != wire.WorkerStatus_WORKER_STATUS_ALIVE) {
			landing = false
		}
		// The wait ends logsLandWait after the attempt finished (an
		// upload that long overdue is failing: its worker keeps retrying)
		// and at most logsLandWait after this read began; the answer then
		// says the log is incomplete, and is not retried by clients.
		if !req.GetFollow() && landing {
			now := h.clock.Now()
			finished := time.Unix(0, a.FinishUnixNanos)
			if a.FinishUnixNanos == 0 || now.After(readBy) || now.Sub(finished) > logsLandWait {
				ago := "a while"
				if a.FinishUnixNanos != 0 {
					ago = now.Sub(finished).Round(time.Second).String()
				}
				return errs.New(errs.FailedPrecondition, "logs of %s attempt %d are incomplete: the attempt finished %s ago and its worker %s has not uploaded the rest of its log yet "+
					"(%d chunks sent here); read again later, or with --follow to wait for it", req.GetTaskId(), att.Number, ago, a.WorkerID, next-req.GetAfterChunk()-1)
			}
		}
		if (!req.GetFollow() && !landing) || (m != nil && next > m.LogChunks) || (m == nil && over) {
			return nil
		}
		if err := sleepCtx(ctx, logsPoll); err != nil {
			return err
		}
	}
}

// sleepCtx waits for d or until ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// readObject reads a small object (a log chunk) whole.
func readObject(ctx context.Context, store blob.Store, key string) ([]byte, error) {
	rc, _, err := store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, artifact.MaxChunkBytes+1))
}

// manifest reads the manifest of an attempt, saying when it is pending.
func (h *Head) manifest(ctx context.Context, ro *wire.ReadOptions, taskID string, number uint32) (*artifact.Manifest, artifact.Attempt, error) {
	if err := h.caughtUp(ctx, ro); err != nil {
		return nil, artifact.Attempt{}, err
	}
	_, a, att, err := h.artifactAttempt(h.fsm.View(), taskID, number)
	if err != nil {
		return nil, att, err
	}
	m, err := artifact.ReadManifest(ctx, h.cfg.Artifacts, att)
	if errors.Is(err, blob.ErrNotFound) {
		why := "it has not stored any there (its worker uses another store: heads and workers must share one --artifacts; or it ran without one, or its worker was lost)"
		switch {
		case state.IsActive(a.State):
			why = "it is still " + a.State.String()
		case a.ArtifactsPending:
			why = "they are still in its worker's spool (artifacts pending); try again later"
		}
		return nil, att, errs.New(errs.NotFound, "attempt %d of task %q has no artifacts in the store %s yet: %s", att.Number, taskID, h.cfg.Artifacts.URL(), why)
	}
	if err != nil {
		return nil, att, storeErr(err, "artifacts of %s attempt %d", taskID, att.Number)
	}
	return m, att, nil
}

func fileToWire(f artifact.File) *wire.ArtifactFile {
	return &wire.ArtifactFile{Path: f.Path, Size: f.Size, Sha256: f.SHA256, ContentType: f.ContentType}
}

// ArtifactList returns an attempt's manifest; see the proto.
func (s *service) ArtifactList(ctx context.Context, req *wire.ArtifactListRequest) (*wire.ArtifactListResponse, error) {
	m, att, err := s.h.manifest(ctx, req.GetRead(), req.GetTaskId(), req.GetAttempt())
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	out := &wire.ArtifactListResponse{Attempt: att.Number, LogBytes: m.LogBytes, LogChunks: m.LogChunks, Notes: m.Notes}
	for _, f := range m.Files {
		out.Files = append(out.Files, fileToWire(f))
	}
	if m.Result != nil {
		out.Files = append(out.Files, fileToWire(*m.Result))
	}
	return out, nil
}

// ArtifactGet streams one file of an attempt, checked against the
// manifest; see the proto.
func (s *service) ArtifactGet(req *wire.ArtifactGetRequest, stream wire.MegaflowService_ArtifactGetServer) error {
	ctx := stream.Context()
	m, att, err := s.h.manifest(ctx, req.GetRead(), req.GetTaskId(), req.GetAttempt())
	if err != nil {
		return errs.ToStatus(err)
	}
	f, ok := m.Find(req.GetPath())
	if !ok {
		return errs.ToStatus(errs.New(errs.NotFound, "attempt %d of task %q has no file %q; list them with megaflow artifacts ls %s",
			att.Number, req.GetTaskId(), req.GetPath(), req.GetTaskId()))
	}
	rc, err := artifact.OpenFile(ctx, s.h.cfg.Artifacts, att, f)
	if err != nil {
		return errs.ToStatus(storeErr(err, "artifact %q of %s attempt %d", f.Path, req.GetTaskId(), att.Number))
	}
	defer rc.Close()
	if err := stream.Send(&wire.ArtifactGetResponse{File: fileToWire(f)}); err != nil {
		return err
	}
	buf := make([]byte, getChunkBytes)
	for {
		n, err := io.ReadFull(rc, buf)
		if n > 0 {
			if serr := stream.Send(&wire.ArtifactGetResponse{Data: buf[:n]}); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return errs.ToStatus(storeErr(err, "artifact %q of %s attempt %d", f.Path, req.GetTaskId(), att.Number))
		}
	}
}

// DeleteGraph deletes a finished graph's artifacts, then the graph; see
// the proto. The store goes first so that a store that does not answer
// leaves the graph in the table for a retry, never artifacts without a
// graph to find them by.
func (s *service) DeleteGraph(ctx context.Context, req *wire.DeleteGraphRequest) (*wire.DeleteGraphResponse, error) {
	if req.GetGraphId() == "" {
		return nil, errs.ToStatus(errs.New(errs.InvalidArgument, "DeleteGraph: graph_id is empty"))
	}
	if !s.h.IsLeader() {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.DeleteGraph)
		return resp, errs.ToStatus(err)
	}
	resp, err := s.h.deleteGraph(ctx, req.GetGraphId())
	return resp, errs.ToStatus(err)
}

func (h *Head) deleteGraph(ctx context.Context, id string) (*wire.DeleteGraphResponse, error) {
	view := h.fsm.View()
	g := view.Graph(id)
	if a := view.Archived(id); g == nil && a != nil {
		g = state.GraphFromWire(a) // its artifacts, then its summary, go
	}
	if g == nil {
		return nil, errs.New(errs.NotFound, "graph %q not found", id)
	}
	for _, t := range view.TasksOfGraph(id) {
		if !state.IsTerminal(t.State) || t.ActiveAttempt() != nil {
			return nil, errs.New(errs.FailedPrecondition,
				"graph %q: task %q is %s or its attempt still runs; cancel the graph and wait until it ended, then delete it", id, t.ID, t.State)
		}
	}
	out := &wire.DeleteGraphResponse{}
	if h.cfg.Artifacts != nil {
		n, err := h.cfg.Artifacts.DeletePrefix(ctx, artifact.GraphPrefix(g.Tenant, id))
		if err != nil {
			return nil, storeErr(err, "delete graph %q: artifacts", id)
		}
		out.Artifacts = int64(n)
	}
	res, index, err := h.apply(ctx, fsm.OpDeleteGraph, &wire.DeleteGraphCommand{GraphId: id, UnixNanos: h.clock.Now().UnixNano()})
	if err != nil {
		return nil, err
	}
	out.Index, out.Tasks = index, res.(*fsm.DeleteGraphResult).Tasks
	return out, nil
}
