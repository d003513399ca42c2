package sandboxtest

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/obs"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
)

// sumHeads adds up one series over every running head's /metrics.
func (e *env) sumHeads(name string, labels ...string) float64 {
	e.t.Helper()
	var total float64
	for _, h := range e.c.Running() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		f, err := obs.Scrape(ctx, "http://"+h.HTTPAddr()+"/metrics")
		cancel()
		if err != nil {
			e.t.Fatal(err)
		}
		v, _ := f.Sum(name, labels...)
		total += v
	}
	return total
}

// apiSandboxes reads /api/sandboxes of head h.
func apiSandboxes(t *testing.T, h *head.Head, query string) (total int, rows []sandboxRow) {
	t.Helper()
	resp, err := http.Get("http://" + h.HTTPAddr() + "/api/sandboxes" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Total     int          `json:"total"`
		Sandboxes []sandboxRow `json:"sandboxes"`
		Error     string       `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/sandboxes%s: HTTP %d %s", query, resp.StatusCode, out.Error)
	}
	return out.Total, out.Sandboxes
}

type sandboxRow struct {
	Sandbox     json.RawMessage `json:"sandbox"`
	AgeSeconds  float64         `json:"age_seconds"`
	IdleSeconds *float64        `json:"idle_seconds"`
	Busy        int             `json:"busy"`
	info        *wire.Sandbox
}

// The sandbox series of /metrics follow a sandbox's life and its data
// path: megaflow_sandboxes by state on every head, the relay's exec
// latency histogram, exec failures by reason, file bytes by direction;
// the dashboard's /api/sandboxes lists it with its worker, age and idle
// time (busy while an exec runs).
func TestSandboxMetricsAndDashboard(t *testing.T) {
	e := newEnvWith(t, 1, func(cfg *head.Config) { cfg.HTTPAddr = "127.0.0.1:0" })
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.create(ctx, client.SandboxSpec{Tenant: "obs"})
	testcluster.WaitFor(t, 30*time.Second, "every head to count the sandbox READY", func() bool {
		return e.sumHeads("megaflow_sandboxes", "state", "ready") == float64(len(e.c.Running()))
	})

	for i := range 3 {
		if res, err := s.Exec(ctx, []string{"true"}, client.ExecOptions{}); err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %d: %+v, %v", i, res, err)
		}
	}
	// The relaying head counts an exec after it sent the exit, which the
	// client may read first: wait for the count, then check it is exact.
	testcluster.WaitFor(t, 30*time.Second, "the heads to count 3 exec latencies", func() bool {
		return e.sumHeads("megaflow_sandbox_exec_duration_seconds") >= 3
	})
	if got := e.sumHeads("megaflow_sandbox_exec_duration_seconds"); got != 3 {
		t.Fatalf("exec latency samples over the heads: %v; want 3", got)
	}
	if res, err := s.Exec(ctx, []string{"sleep", "5"}, client.ExecOptions{Timeout: 200 * time.Millisecond}); err != nil || !res.TimedOut {
		t.Fatalf("an exec past its timeout: %+v, %v", res, err)
	}
	testcluster.WaitFor(t, 30*time.Second, "the heads to count the timed-out exec", func() bool {
		return e.sumHeads("megaflow_sandbox_exec_failures_total", "reason", "exec_timeout") >= 1
	})
	if got := e.sumHeads("megaflow_sandbox_exec_failures_total", "reason", "exec_timeout"); got != 1 {
		t.Fatalf("exec failures (exec_timeout): %v; want 1", got)
	}
	data := make([]byte, 3000)
	if err := s.WriteFile(ctx, "/tmp/f", data, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadFile(ctx, "/tmp/f"); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 30*time.Second, "the heads to count the file bytes", func() bool {
		return e.sumHeads("megaflow_sandbox_file_bytes_total", "direction", "write") >= 3000 &&
			e.sumHeads("megaflow_sandbox_file_bytes_total", "direction", "read") >= 3000
	})
	if w, r := e.sumHeads("megaflow_sandbox_file_bytes_total", "direction", "write"), e.sumHeads("megaflow_sandbox_file_bytes_total", "direction", "read"); w != 3000 || r != 3000 {
		t.Fatalf("file bytes: write %v, read %v; want 3000 each", w, r)
	}

	// The dashboard, on the head the client calls: the sandbox, busy while
	// an exec runs, then idle.
	var relay *head.Head
	for _, h := range e.c.Running() {
		if h.GRPCAddr() == e.cl.Heads()[0] {
			relay = h
		}
	}
	if relay == nil {
		t.Fatalf("no running head at the client's address %s", e.cl.Heads()[0])
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Exec(ctx, []string{"sh", "-c", "touch /tmp/started; sleep 30"}, client.ExecOptions{Timeout: 3 * time.Second})
		done <- err
	}()
	testcluster.WaitFor(t, 30*time.Second, "the dashboard to show the sandbox busy", func() bool {
		_, rows := apiSandboxes(t, relay, "")
		return len(rows) == 1 && rows[0].Busy == 1 && rows[0].IdleSeconds != nil && *rows[0].IdleSeconds == 0
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	total, rows := apiSandboxes(t, relay, "?limit=10")
	if total != 1 || len(rows) != 1 {
		t.Fatalf("/api/sandboxes: total %d, %d rows; want 1", total, len(rows))
	}
	r := rows[0]
	r.info = &wire.Sandbox{}
	if err := protojson.Unmarshal(r.Sandbox, r.info); err != nil {
		t.Fatal(err)
	}
	if r.info.GetId() != s.ID() || r.info.GetTenant() != "obs" || r.info.GetState() != client.SandboxReady || r.info.GetWorkerId() == "" ||
		r.AgeSeconds <= 0 || r.Busy != 0 || r.IdleSeconds == nil || *r.IdleSeconds < 0 {
		t.Fatalf("/api/sandboxes row: %+v (%v); want the READY sandbox of tenant obs on a worker, not busy, with an age and an idle time", r, r.info)
	}
	for _, q := range []string{"?limit=0", "?limit=x", "?all=maybe"} {
		resp, err := http.Get("http://" + relay.HTTPAddr() + "/api/sandboxes" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("/api/sandboxes%s: HTTP %d; want 400", q, resp.StatusCode)
		}
	}

	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(ctx, []string{"true"}, client.ExecOptions{}); err == nil {
		t.Fatal("exec in a closed sandbox succeeded")
	}
	if got := e.sumHeads("megaflow_sandbox_exec_failures_total", "reason", "sandbox_closed"); got != 1 {
		t.Fatalf("exec failures (sandbox_closed): %v; want 1", got)
	}
	testcluster.WaitFor(t, 30*time.Second, "every head to count the sandbox CLOSED", func() bool {
		n := float64(len(e.c.Running()))
		return e.sumHeads("megaflow_sandboxes", "state", "closed") == n && e.sumHeads("megaflow_sandboxes", "state", "ready") == 0
	})
	if total, _ := apiSandboxes(t, relay, ""); total != 0 {
		t.Fatalf("/api/sandboxes after close: %d live; want 0", total)
	}
	if total, rows := apiSandboxes(t, relay, "?all=1"); total != 1 || rows[0].IdleSeconds != nil {
		t.Fatalf("/api/sandboxes?all=1 after close: %d, %+v; want the closed sandbox without an idle time", total, rows)
	}
}
