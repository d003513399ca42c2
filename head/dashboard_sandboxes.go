package head

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// sandboxRow is one sandbox of /api/sandboxes: the API's view and what
// the dashboard shows beside it.
type sandboxRow struct {
	// Sandbox is wire.Sandbox as protojson.
	Sandbox json.RawMessage `json:"sandbox"`
	// AgeSeconds: since its creation (leader time), on this head's clock.
	AgeSeconds float64 `json:"age_seconds"`
	// IdleSeconds: for a READY sandbox, since the last exec or file call
	// this head relayed started or ended, or since it became READY when
	// none did; 0 while one is in flight; absent when not READY. Calls
	// through other heads are not seen here (the worker's idle timer,
	// which ends the sandbox, sees them all).
	IdleSeconds *float64 `json:"idle_seconds,omitempty"`
	// Busy: exec and file calls to it in flight through this head.
	Busy int `json:"busy"`
}

// apiSandboxes answers GET /api/sandboxes?limit=N&all=1: the sandboxes of
// this head's table, newest first, live ones unless all=1; at most N
// (default 100, at most 1000); "total" counts those that matched.
func (h *Head) apiSandboxes(w http.ResponseWriter, r *http.Request) {
	limit := 100
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			writeErr(w, errs.New(errs.InvalidArgument, "limit %q: give a whole number from 1 to 1000", s))
			return
		}
		limit = n
	}
	all := false
	switch v := r.URL.Query().Get("all"); v {
	case "", "0", "false":
	case "1", "true":
		all = true
	default:
		writeErr(w, errs.New(errs.InvalidArgument, "all %q: give 1 (every sandbox) or 0 (live ones)", v))
		return
	}
	view, meta, err := h.localRead(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	var list []*wire.Sandbox
	live := map[string]bool{}
	for g := range view.Graphs() {
		if spec.CheckSandboxID("id", g.ID) != nil {
			continue
		}
		t := view.Task(spec.SandboxTaskID(g.ID))
		if t == nil || t.Spec.GetSandbox() == nil {
			continue
		}
		sb := sandboxOf(g, t, view.Index())
		if spec.SandboxLive(sb.State) {
			live[sb.Id] = true
		}
		if all || spec.SandboxLive(sb.State) {
			list = append(list, sb)
		}
	}
	act := h.sandboxes.activity
	act.prune(func(id string) bool { return live[id] })
	slices.SortFunc(list, func(a, b *wire.Sandbox) int {
		if a.CreateUnixNanos != b.CreateUnixNanos {
			if a.CreateUnixNanos > b.CreateUnixNanos {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Id, b.Id)
	})
	now := h.clock.Now()
	out := struct {
		Meta      json.RawMessage `json:"meta"`
		Total     int             `json:"total"`
		Sandboxes []sandboxRow    `json:"sandboxes"`
	}{Meta: meta, Total: len(list), Sandboxes: []sandboxRow{}}
	for _, sb := range list[:min(limit, len(list))] {
		row := sandboxRow{Sandbox: pj(sb), AgeSeconds: max(0, float64(now.UnixNano()-sb.CreateUnixNanos)/1e9)}
		if sb.State == wire.SandboxState_SANDBOX_STATE_READY {
			busy, last := act.get(sb.Id)
			row.Busy = busy
			since := sb.ReadyUnixNanos
			if !last.IsZero() && last.UnixNano() > since {
				since = last.UnixNano()
			}
			idle := 0.0
			if busy == 0 {
				idle = max(0, float64(now.UnixNano()-since)/1e9)
			}
			row.IdleSeconds = &idle
		}
		out.Sandboxes = append(out.Sandboxes, row)
	}
	writeJSON(w, http.StatusOK, out)
}
