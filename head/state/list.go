package state

import (
	"bytes"
	"encoding/base64"
	"strings"

	memdb "github.com/hashicorp/go-memdb"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// GraphFilter selects graphs for ListGraphs; zero fields match all.
type GraphFilter struct {
	Tenant string
	State  wire.GraphState
}

// TaskFilter selects tasks for ListTasks; zero fields match all.
type TaskFilter struct {
	GraphID string
	Tenant  string
	// WorkerID selects the tasks whose current attempt holds this worker
	// (View.AssignedTo): ASSIGNED or RUNNING there, or CANCELLED while the
	// worker stops the attempt; other tasks are not indexed by worker.
	WorkerID string
	State    wire.TaskState
}

// ListGraphs returns up to limit graphs matching f, starting at pageToken
// ("" for the first page), and the token of the next page ("" after the
// last). Graphs come in a stable order: by id, within a tenant when
// f.Tenant is set, within a state when only f.State is. A token is an opaque
// position in that order, valid across views and writes: a page never
// repeats a row of an earlier one that did not move. gRPC handlers call it
// from any goroutine; limit must be positive (the caller applies defaults).
func (v *View) ListGraphs(f GraphFilter, pageToken string, limit int) ([]*Graph, string, error) {
	match := func(g *Graph) bool {
		return (f.Tenant == "" || g.Tenant == f.Tenant) && (f.State == 0 || g.State == f.State)
	}
	var s scan[*Graph]
	switch {
	case f.Tenant != "":
		s = scan[*Graph]{index: indexTenant, tag: 't', start: stringKey(f.Tenant, 0),
			inRange: func(g *Graph) bool { return g.Tenant == f.Tenant },
			key:     func(g *Graph) []byte { return append(stringKey(g.Tenant, 0), stringKey(g.ID, 0)...) }}
	case f.State != 0:
		s = scan[*Graph]{index: indexState, tag: 's', start: []byte{byte(f.State)},
			inRange: func(g *Graph) bool { return g.State == f.State },
			key:     func(g *Graph) []byte { return append([]byte{byte(g.State)}, stringKey(g.ID, 0)...) }}
	default:
		s = scan[*Graph]{index: indexID, tag: 'i',
			inRange: func(*Graph) bool { return true },
			key:     func(g *Graph) []byte { return stringKey(g.ID, 0) }}
	}
	s.table, s.match = tableGraphs, match
	return s.page(v.txn(), pageToken, limit)
}

// ListTasks returns up to limit tasks matching f, starting at pageToken, and
// the next page's token, like ListGraphs. The index is chosen by the filter:
// a graph's tasks by id; else a worker's tasks, a state's tasks (QUEUED in
// scheduling order, others by id) or a tenant's tasks (by graph id, then
// task id); else all by id. Other fields of f filter the scan.
func (v *View) ListTasks(f TaskFilter, pageToken string, limit int) ([]*Task, string, error) {
	match := func(t *Task) bool {
		return (f.GraphID == "" || t.GraphID == f.GraphID) && (f.Tenant == "" || t.Tenant == f.Tenant) &&
			(f.WorkerID == "" || holds(t, f.WorkerID)) && (f.State == 0 || t.State == f.State)
	}
	withID := func(k []byte, t *Task) []byte { return append(k, stringKey(t.ID, 0)...) }
	var s scan[*Task]
	switch {
	case f.GraphID != "":
		s = scan[*Task]{index: indexID, tag: 'i', start: []byte(f.GraphID + "/"),
			inRange: func(t *Task) bool { return t.GraphID == f.GraphID },
			key:     func(t *Task) []byte { return stringKey(t.ID, 0) }}
	case f.WorkerID != "":
		s = scan[*Task]{index: indexWorker, tag: 'w', start: stringKey(f.WorkerID, 0),
			inRange: func(t *Task) bool { return holds(t, f.WorkerID) },
			key:     func(t *Task) []byte { return withID(stringKey(t.WorkerID(), 0), t) }}
	case f.State != 0:
		s = scan[*Task]{index: indexState, tag: 's', start: []byte{byte(f.State)},
			inRange: func(t *Task) bool { return t.State == f.State },
			key:     func(t *Task) []byte { return withID(taskStateKey(t, 0), t) }}
	case f.Tenant != "":
		return v.tenantTasks(f, match, pageToken, limit)
	default:
		s = scan[*Task]{index: indexID, tag: 'i',
			inRange: func(*Task) bool { return true },
			key:     func(t *Task) []byte { return stringKey(t.ID, 0) }}
	}
	s.table, s.match = tableTasks, match
	return s.page(v.txn(), pageToken, limit)
}

// holds reports whether t's active attempt is on worker.
func holds(t *Task, worker string) bool {
	a := t.ActiveAttempt()
	return a != nil && a.WorkerID == worker
}

// scan is a paged walk over one index: the rows whose keys start with start
// are contiguous and satisfy inRange; match filters them.
type scan[T any] struct {
	table, index string
	// tag names the index in page tokens, so that a token cannot be used
	// with another index.
	tag     byte
	start   []byte
	inRange func(T) bool
	match   func(T) bool
	// key returns a row's full key in the index, the id suffix included.
	key func(T) []byte
}

var tokenEncoding = base64.RawURLEncoding

func (s *scan[T]) page(txn *memdb.Txn, token string, limit int) ([]T, string, error) {
	if limit <= 0 {
		return nil, "", errs.New(errs.InvalidArgument, "page size %d: must be positive", limit)
	}
	from := s.start
	if token != "" {
		raw, err := tokenEncoding.DecodeString(token)
		if err != nil || len(raw) == 0 || raw[0] != s.tag || !bytes.HasPrefix(raw[1:], s.start) {
			return nil, "", errs.New(errs.InvalidArgument,
				"page token %q: not from a listing with the same filter; start again without a token", token)
		}
		from = raw[1:]
	}
	var out []T
	it := lowerBound(txn, s.table, s.index, from)
	for raw := it.Next(); raw != nil; raw = it.Next() {
		r := raw.(T)
		if !s.inRange(r) {
			break
		}
		if !s.match(r) {
			continue
		}
		if len(out) == limit {
			return out, tokenEncoding.EncodeToString(append([]byte{s.tag}, s.key(r)...)), nil
		}
		out = append(out, r)
	}
	return out, "", nil
}

// tenantTasks pages through the tasks of a tenant's graphs: graphs by id
// (the graphs' tenant index), each graph's tasks by id. Its page token is
// 'T' and the id of the next task.
func (v *View) tenantTasks(f TaskFilter, match func(*Task) bool, token string, limit int) ([]*Task, string, error) {
	if limit <= 0 {
		return nil, "", errs.New(errs.InvalidArgument, "page size %d: must be positive", limit)
	}
	var fromGraph, fromTask string
	if token != "" {
		raw, err := tokenEncoding.DecodeString(token)
		gid, _, ok := strings.Cut(string(raw[min(1, len(raw)):]), "/")
		if err != nil || len(raw) == 0 || raw[0] != 'T' || !ok {
			return nil, "", errs.New(errs.InvalidArgument,
				"page token %q: not from a listing with the same filter; start again without a token", token)
		}
		fromGraph, fromTask = gid, string(raw[1:])
	}
	txn := v.txn()
	var out []*Task
	graphs := lowerBound(txn, tableGraphs, indexTenant, append(stringKey(f.Tenant, 0), fromGraph...))
	for raw := graphs.Next(); raw != nil; raw = graphs.Next() {
		g := raw.(*Graph)
		if g.Tenant != f.Tenant {
			break
		}
		from := g.ID + "/"
		if g.ID == fromGraph {
			from = fromTask
		}
		tasks := lowerBound(txn, tableTasks, indexID, []byte(from))
		for raw := tasks.Next(); raw != nil; raw = tasks.Next() {
			t := raw.(*Task)
			if t.GraphID != g.ID {
				break
			}
			if !match(t) {
				continue
			}
			if len(out) == limit {
				return out, tokenEncoding.EncodeToString(append([]byte{'T'}, t.ID...)), nil
			}
			out = append(out, t)
		}
	}
	return out, "", nil
}
