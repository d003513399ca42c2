package client

import (
	"context"
	"crypto/rand"

	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// SubmitResult is what Submit returns: the graph's id, the Raft index at
// which it became visible (pass it as ReadOptions.MinIndex to read your
// write from any head) and whether it existed already.
type SubmitResult = wire.SubmitGraphResponse

// Submit validates g locally, then commits it. A graph without an id gets one
// here, before the first try, so that retries through leader changes never
// create a second graph: Submit is idempotent by graph id. g is not modified.
// Errors: errs.InvalidArgument (names the graph, task and field; a graph
// may not set what only the heads set, spec.CheckClientGraph),
// errs.AlreadyExists (the id holds a different graph), or the context's error
// when no leader answered in time.
func (c *Client) Submit(ctx context.Context, g *GraphSpec) (*SubmitResult, error) {
	g = proto.Clone(g).(*GraphSpec)
	if g.Id == "" {
		g.Id = spec.NewGraphID(c.opts.clock.Now(), rand.Reader)
	}
	if err := spec.Validate(spec.Normalize(g), spec.DefaultLimits()); err != nil {
		return nil, err
	}
	if err := spec.CheckClientGraph(g); err != nil {
		return nil, err
	}
	var res *SubmitResult
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.SubmitGraph(ctx, &wire.SubmitGraphRequest{Graph: g})
		return err
	})
	if err != nil {
		return nil, err
	}
	c.observe(res.Index)
	return res, nil
}

// ReadOptions tunes a read. The zero value reads from whichever head
// answers, once that head has applied everything this client has written or
// read before (session consistency: a client always reads its own writes
// and never goes back in time, even across heads).
type ReadOptions struct {
	// MinIndex makes the head wait until it has applied this Raft index, on
	// top of the client's own session index.
	MinIndex uint64
	// RequireLeader serves the read from the leader after it confirmed its
	// leadership (linearizable).
	RequireLeader bool
}

func (c *Client) readOptions(o ReadOptions) *wire.ReadOptions {
	return &wire.ReadOptions{MinIndex: max(o.MinIndex, c.sessionIndex()), RequireLeader: o.RequireLeader}
}

// GetGraph returns graph id with its aggregate counts. Errors:
// errs.NotFound.
func (c *Client) GetGraph(ctx context.Context, id string, ro ReadOptions) (*Graph, *ReadMeta, error) {
	var res *wire.GetGraphResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.GetGraph(ctx, &wire.GetGraphRequest{GraphId: id, Read: c.readOptions(ro)})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	c.observe(res.Meta.GetIndex())
	return res.Graph, res.Meta, nil
}

// GraphFilter selects graphs for ListGraphs; zero fields match everything.
type GraphFilter struct {
	Tenant   string
	State    GraphState
	PageSize int32
	// PageToken continues a previous listing (its NextPageToken).
	PageToken string
	Read      ReadOptions
	// IncludeArchived also lists the archived graphs (summaries with
	// ArchivedUnixNanos set, their tasks no longer kept), after the live
	// ones.
	IncludeArchived bool
}

// ListGraphs returns one page of graphs, sorted by id (the live ones, then
// with f.IncludeArchived the archived ones), and the token of the next
// page ("" at the end).
func (c *Client) ListGraphs(ctx context.Context, f GraphFilter) ([]*Graph, string, error) {
	var res *wire.ListGraphsResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.ListGraphs(ctx, &wire.ListGraphsRequest{Tenant: f.Tenant, State: f.State,
			PageSize: f.PageSize, PageToken: f.PageToken, Read: c.readOptions(f.Read), IncludeArchived: f.IncludeArchived})
		return err
	})
	if err != nil {
		return nil, "", err
	}
	c.observe(res.Meta.GetIndex())
	return res.Graphs, res.NextPageToken, nil
}

// GetTask returns a task ("<graph id>/<task name>") with its attempts.
// Errors: errs.NotFound.
func (c *Client) GetTask(ctx context.Context, id string, ro ReadOptions) (*Task, *ReadMeta, error) {
	var res *wire.GetTaskResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.GetTask(ctx, &wire.GetTaskRequest{TaskId: id, Read: c.readOptions(ro)})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	c.observe(res.Meta.GetIndex())
	return res.Task, res.Meta, nil
}

// TaskFilter selects tasks for ListTasks; zero fields match everything.
type TaskFilter struct {
	GraphID   string
	State     TaskState
	Tenant    string
	WorkerID  string
	PageSize  int32
	PageToken string
	// OmitSpec leaves each task's spec out (smaller pages).
	OmitSpec bool
	Read     ReadOptions
}

// ListTasks returns one page of tasks and the token of the next page ("" at
// the end).
func (c *Client) ListTasks(ctx context.Context, f TaskFilter) ([]*Task, string, error) {
	var res *wire.ListTasksResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.ListTasks(ctx, &wire.ListTasksRequest{GraphId: f.GraphID, State: f.State, Tenant: f.Tenant,
			WorkerId: f.WorkerID, PageSize: f.PageSize, PageToken: f.PageToken, OmitSpec: f.OmitSpec, Read: c.readOptions(f.Read)})
		return err
	})
	if err != nil {
		return nil, "", err
	}
	c.observe(res.Meta.GetIndex())
	return res.Tasks, res.NextPageToken, nil
}

// CancelGraph cancels every task of a graph that has not finished. It is
// idempotent: cancelling a finished graph cancels nothing and is no error.
// It returns how many tasks it cancelled. Errors: errs.NotFound.
func (c *Client) CancelGraph(ctx context.Context, id, reason string) (uint32, error) {
	var res *wire.CancelGraphResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.CancelGraph(ctx, &wire.CancelGraphRequest{GraphId: id, Reason: reason})
		return err
	})
	if err != nil {
		return 0, err
	}
	c.observe(res.Index)
	return res.Cancelled, nil
}

// CancelTask cancels one task (and dependents that can then never run).
// Idempotent like CancelGraph. Errors: errs.NotFound.
func (c *Client) CancelTask(ctx context.Context, id, reason string) (uint32, error) {
	var res *wire.CancelTaskResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.CancelTask(ctx, &wire.CancelTaskRequest{TaskId: id, Reason: reason})
		return err
	})
	if err != nil {
		return 0, err
	}
	c.observe(res.Index)
	return res.Cancelled, nil
}

// ClusterStatus describes the heads, the leader, the term and the indexes,
// as the answering head sees them.
func (c *Client) ClusterStatus(ctx context.Context) (*ClusterStatus, error) {
	var res *wire.ClusterStatusResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.ClusterStatus(ctx, &wire.ClusterStatusRequest{})
		return err
	})
	return res, err
}

// RemoveHead removes a head from the Raft configuration (for a head that is
// gone for good). Errors: errs.NotFound for an unknown head id.
func (c *Client) RemoveHead(ctx context.Context, id string) error {
	return c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) error {
		_, err := s.RemoveHead(ctx, &wire.RemoveHeadRequest{HeadId: id})
		return err
	})
}

// ListWorkers returns the workers the table knows (alive, down or left),
// with capacity, allocation and the attempts they run.
func (c *Client) ListWorkers(ctx context.Context, ro ReadOptions) ([]*Worker, error) {
	var res *wire.ListWorkersResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.ListWorkers(ctx, &wire.ListWorkersRequest{Read: c.readOptions(ro)})
		return err
	})
	if err != nil {
		return nil, err
	}
	c.observe(res.Meta.GetIndex())
	return res.Workers, nil
}
