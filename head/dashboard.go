package head

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/head/dashboard"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/acl"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// The dashboard's JSON API, served by every head on its HTTP listener
// (docs/observability.md). Reads are served from this head's own table, like
// the gRPC reads without require_leader: a follower answers from its
// replica, and every answer carries "meta" (wire.ReadMeta: the index read,
// the head, the leader, whether it is the leader and, on a follower, the
// milliseconds since it last heard from the leader) so that the page and
// any other client can show how stale it may be. Messages of the wire API
// are rendered with protojson (proto field names), so the shapes are those
// of the gRPC API and the CLI can decode them with the generated types.
//
//	GET /api/cluster           wire.ClusterStatusResponse
//	GET /api/workers           wire.ListWorkersResponse, plus "connected" (leader only)
//	GET /api/queues            {"meta", "queues": [{"name","queued","assigned","running","oldest_wait_seconds"}]}
//	GET /api/graphs?limit=N    {"meta", "graphs": [wire.Graph]}: newest first, N (default 50, at most 1000)
//	GET /api/graphs/{id}       {"meta", "graph": wire.Graph, "tasks": [wire.Task without spec], "truncated"}
//	GET /api/tasks/{graph}/{task}       {"meta", "task": wire.Task, "logs_url"}
//	GET /api/tasks/{graph}/{task}/logs  501 until the logs RPC exists
//	GET /api/sandboxes?limit=N&all=1  {"meta", "total", "sandboxes": [{"sandbox": wire.Sandbox, "age_seconds", "idle_seconds", "busy"}]}: newest first (dashboard_sandboxes.go)
//	GET /api/events            server-sent events: "index" with the applied index, at most 4 per second

// dashboardTaskLimit bounds the tasks /api/graphs/{id} returns.
const dashboardTaskLimit = 2000

// registerDashboard adds the dashboard and its API to mux.
func (h *Head) registerDashboard(mux *http.ServeMux) {
	mux.Handle("GET /", dashboard.Handler())
	mux.HandleFunc("GET /api/cluster", h.dashboardAdmin(h.apiCluster))
	mux.HandleFunc("GET /api/workers", h.dashboardAdmin(h.apiWorkers))
	mux.HandleFunc("GET /api/queues", h.dashboardAdmin(h.apiQueues))
	mux.HandleFunc("GET /api/graphs", h.dashboardAdmin(h.apiGraphs))
	mux.HandleFunc("GET /api/graphs/{id}", h.dashboardAdmin(h.apiGraph))
	mux.HandleFunc("GET /api/tasks/{id...}", h.dashboardAdmin(h.apiTask))
	mux.HandleFunc("GET /api/events", h.apiEvents) // the applied index only
	mux.HandleFunc("GET /api/sandboxes", h.dashboardAdmin(h.apiSandboxes))
}

// dashboardAdmin guards a dashboard API handler on a head with ACLs on: the
// dashboard shows every tenant's graphs, tasks (their specs, env included)
// and sandboxes, so it needs an admin token in an "Authorization: Bearer"
// header (the page asks for one and keeps it in the browser's session
// storage). Refusals are 401 with {"error"}, counted in
// megaflow_acl_refusals_total{method="dashboard"} and logged as the
// gRPC ones are. Without ACLs it is f.
func (h *Head) dashboardAdmin(f http.HandlerFunc) http.HandlerFunc {
	return h.httpAdmin(dashboardSurface, f)
}

// adminSurface names an HTTP surface that needs an admin token with ACLs
// on, for its refusals.
type adminSurface struct {
	method string // the label of megaflow_acl_refusals_total and the log's method
	name   string // how the refusal names it: "the dashboard"
	shows  string // why it needs an admin token: "shows every tenant's work"
}

// dashboardSurface is the dashboard's JSON API (dashboardAdmin).
var dashboardSurface = adminSurface{method: "dashboard", name: "the dashboard", shows: "shows every tenant's work"}

// httpAdmin guards handler f of surface s on a head with ACLs on: it needs
// an admin token that has not expired, in an "Authorization: Bearer"
// header. Refusals are 401 with {"error"}, counted in
// megaflow_acl_refusals_total{method=s.method} and logged as the gRPC ones
// are. Without ACLs it is f.
func (h *Head) httpAdmin(s adminSurface, f http.HandlerFunc) http.HandlerFunc {
	if !h.cfg.ACL {
		return f
	}
	return func(w http.ResponseWriter, r *http.Request) {
		var tok *wire.Token
		presented, malformed := false, false
		if v := r.Header.Get("Authorization"); v != "" {
			presented = true
			if secret, ok := acl.BearerSecret(v); ok {
				tok = h.fsm.View().TokenByHash(acl.Hash(secret))
			} else {
				malformed = true
			}
		}
		ref := adminRefusal(s, tok, presented, malformed, h.clock.Now())
		if ref != nil {
			h.refuse(r.Context(), tok, s.method, ref)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": ref.Err.Message})
			return
		}
		f(w, r)
	}
}

// adminRefusal decides a call to surface s: nil for an admin token that
// has not expired.
func adminRefusal(s adminSurface, tok *wire.Token, presented, malformed bool, now time.Time) *acl.Refusal {
	switch {
	case malformed:
		return &acl.Refusal{Err: errs.New(errs.Unauthenticated, "%s: the Authorization header is not \"Bearer <token>\"", s.name), Reason: acl.ReasonBadToken}
	case !presented:
		return &acl.Refusal{Err: errs.New(errs.Unauthenticated, "%s %s: this cluster has ACLs on, so it needs an admin token (megaflow token create --role admin)", s.name, s.shows), Reason: acl.ReasonNoToken}
	case tok == nil:
		return &acl.Refusal{Err: errs.New(errs.Unauthenticated, "%s: the token is not one this cluster knows (revoked, mistyped, or from another cluster)", s.name), Reason: acl.ReasonUnknown}
	case tok.GetExpireUnixNanos() != 0 && now.UnixNano() >= tok.GetExpireUnixNanos():
		return &acl.Refusal{Err: errs.New(errs.Unauthenticated, "%s: your token (accessor %s) expired", s.name, acl.Short(tok.GetAccessor())), Reason: acl.ReasonExpired}
	case tok.GetRole() != wire.TokenRole_TOKEN_ROLE_ADMIN:
		return &acl.Refusal{Err: errs.New(errs.PermissionDenied, "%s %s and needs role admin; your token (accessor %s) has role %s",
			s.name, s.shows, acl.Short(tok.GetAccessor()), acl.RoleName(tok.GetRole())), Reason: acl.ReasonRole}
	}
	return nil
}

// pj renders a wire message as JSON with proto field names.
func pj(m proto.Message) json.RawMessage {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeErr answers with {"error": message} and the HTTP status of the
// error's class.
func writeErr(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch errs.ClassOf(err) {
	case errs.InvalidArgument:
		code = http.StatusBadRequest
	case errs.NotFound:
		code = http.StatusNotFound
	case errs.Unavailable, errs.NotLeader:
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// localRead returns this head's view and its freshness.
func (h *Head) localRead(ctx context.Context) (*state.View, json.RawMessage, error) {
	view, meta, err := h.read(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	return view, pj(meta), nil
}

func (h *Head) apiCluster(w http.ResponseWriter, r *http.Request) {
	resp, err := (&service{h: h}).ClusterStatus(r.Context(), &wire.ClusterStatusRequest{})
	if err != nil {
		writeErr(w, errs.FromStatus(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(pj(resp))
}

func (h *Head) apiWorkers(w http.ResponseWriter, r *http.Request) {
	view, meta, err := h.localRead(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	type row struct {
		Worker    json.RawMessage `json:"worker"`
		Connected *bool           `json:"connected,omitempty"` // known on the leader only
	}
	out := struct {
		Meta    json.RawMessage `json:"meta"`
		Workers []row           `json:"workers"`
	}{Meta: meta, Workers: []row{}}
	leader := h.IsLeader()
	for _, wk := range view.Workers() {
		rw := row{Worker: pj(wk.ToWire())}
		if leader {
			c := h.sessions.connected(wk.ID())
			rw.Connected = &c
		}
		out.Workers = append(out.Workers, rw)
	}
	writeJSON(w, http.StatusOK, out)
}

// queueRow is one queue in /api/queues.
type queueRow struct {
	Name              string  `json:"name"`
	Queued            int     `json:"queued"`
	Assigned          int     `json:"assigned"`
	Running           int     `json:"running"`
	Pending           int     `json:"pending"`
	OldestWaitSeconds float64 `json:"oldest_wait_seconds"`
}

func (h *Head) apiQueues(w http.ResponseWriter, r *http.Request) {
	view, meta, err := h.localRead(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	now := h.clock.Now().UnixNano()
	rows := map[string]*queueRow{"default": {Name: "default"}}
	for t := range view.Tasks() {
		q := queueName(t.Queue())
		row := rows[q]
		if row == nil { // every queue any task used, empty or not
			row = &queueRow{Name: q}
			rows[q] = row
		}
		switch t.State {
		case wire.TaskState_TASK_STATE_QUEUED:
			row.Queued++
			if t.QueuedUnixNanos > 0 {
				row.OldestWaitSeconds = max(row.OldestWaitSeconds, float64(now-t.QueuedUnixNanos)/1e9)
			}
		case wire.TaskState_TASK_STATE_ASSIGNED:
			row.Assigned++
		case wire.TaskState_TASK_STATE_RUNNING:
			row.Running++
		case wire.TaskState_TASK_STATE_PENDING:
			row.Pending++
		}
	}
	out := struct {
		Meta   json.RawMessage `json:"meta"`
		Queues []*queueRow     `json:"queues"`
	}{Meta: meta}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range rows {
			if !yield(k) {
				return
			}
		}
	}) {
		out.Queues = append(out.Queues, rows[name])
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Head) apiGraphs(w http.ResponseWriter, r *http.Request) {
	limit := 50
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			writeErr(w, errs.New(errs.InvalidArgument, "limit %q: give a whole number from 1 to 1000", s))
			return
		}
		limit = n
	}
	view, meta, err := h.localRead(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	var graphs []*state.Graph
	for g := range view.Graphs() {
		graphs = append(graphs, g)
	}
	// Newest first; unfinished graphs before finished ones of the same age.
	slices.SortFunc(graphs, func(a, b *state.Graph) int {
		if a.CreateUnixNanos != b.CreateUnixNanos {
			if a.CreateUnixNanos > b.CreateUnixNanos {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	out := struct {
		Meta   json.RawMessage   `json:"meta"`
		Total  int               `json:"total"`
		Graphs []json.RawMessage `json:"graphs"`
	}{Meta: meta, Total: len(graphs), Graphs: []json.RawMessage{}}
	for _, g := range graphs[:min(limit, len(graphs))] {
		out.Graphs = append(out.Graphs, pj(g.ToWire()))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Head) apiGraph(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	view, meta, err := h.localRead(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	g := view.Graph(id)
	if g == nil {
		writeErr(w, errs.New(errs.NotFound, "graph %q not found on head %s (at index %d); graph ids are listed by /api/graphs",
			id, h.cfg.NodeID, view.Index()))
		return
	}
	out := struct {
		Meta      json.RawMessage   `json:"meta"`
		Graph     json.RawMessage   `json:"graph"`
		Tasks     []json.RawMessage `json:"tasks"`
		Truncated bool              `json:"truncated"`
	}{Meta: meta, Graph: pj(g.ToWire()), Tasks: []json.RawMessage{}}
	for _, t := range view.TasksOfGraph(id) {
		if len(out.Tasks) == dashboardTaskLimit {
			out.Truncated = true
			break
		}
		out.Tasks = append(out.Tasks, pj(t.ToWire(state.OmitSpec)))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Head) apiTask(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if rest, ok := strings.CutSuffix(id, "/logs"); ok && strings.Count(rest, "/") == 1 {
		writeJSON(w, http.StatusNotImplemented, map[string]string{
			"error": fmt.Sprintf("logs of task %q: this head has no logs API yet; read <worker data-dir>/logs/<graph>+<task>/<attempt>.log on the worker that ran it", rest)})
		return
	}
	view, meta, err := h.localRead(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	t := view.Task(id)
	if t == nil {
		writeErr(w, errs.New(errs.NotFound, "task %q not found on head %s (at index %d); task ids are <graph id>/<task name>",
			id, h.cfg.NodeID, view.Index()))
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Meta    json.RawMessage `json:"meta"`
		Task    json.RawMessage `json:"task"`
		LogsURL string          `json:"logs_url"`
	}{meta, pj(t.ToWire()), "/api/tasks/" + id + "/logs"})
}

// apiEvents streams "index" events (server-sent events) carrying this
// head's applied index whenever the table changes, at most 4 per second,
// and a comment every 15 s to keep proxies from closing an idle stream. It
// ends when the client goes or the head stops.
func (h *Head) apiEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeErr(w, errors.New("streaming is not supported by this connection"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	throttle := time.NewTicker(250 * time.Millisecond)
	defer throttle.Stop()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	var sent uint64
	for {
		changed := h.fsm.Changed()
		if idx := h.fsm.AppliedIndex(); idx != sent {
			sent = idx
			if _, err := fmt.Fprintf(w, "event: index\ndata: {\"index\":%d,\"head\":%q,\"leader\":%t}\n\n", idx, h.cfg.NodeID, h.IsLeader()); err != nil {
				return
			}
			fl.Flush()
			select { // at most one event per tick
			case <-throttle.C:
			case <-r.Context().Done():
				return
			case <-h.stopped:
				return
			}
			continue
		}
		select {
		case <-changed:
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
			fl.Flush()
		case <-r.Context().Done():
			return
		case <-h.stopped:
			return
		}
	}
}
