package docker

import (
	"context"
	"io/fs"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/clock"
)

// fakeEngine answers the Docker API calls killExec makes: a ping, an exec
// inspect (exec's answer to the nth, from 1; nil: always "running, no
// process yet"), a container inspect (init PID 42), and a container kill,
// which it records.
type fakeEngine struct {
	exec func(n int) string

	mu       sync.Mutex
	inspects int
	kills    []string
}

func (f *fakeEngine) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch p := req.URL.Path; {
	case strings.HasSuffix(p, "/_ping"):
		w.Header().Set("API-Version", "1.47")
		w.Write([]byte("OK"))
	case strings.HasSuffix(p, "/exec/e1/json"):
		f.inspects++
		w.Header().Set("Content-Type", "application/json")
		answer := `{"ID":"e1","ContainerID":"c1","Running":true,"Pid":0}`
		if f.exec != nil {
			answer = f.exec(f.inspects)
		}
		w.Write([]byte(answer))
	case strings.HasSuffix(p, "/containers/c1/json"):
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"Id":"c1","State":{"Running":true,"Pid":42}}`))
	case strings.HasSuffix(p, "/containers/c1/kill") && req.Method == http.MethodPost:
		f.kills = append(f.kills, req.URL.Query().Get("signal"))
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, req)
	}
}

func (f *fakeEngine) counts() (inspects int, kills []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inspects, append([]string(nil), f.kills...)
}

// newFakeEngine serves engine on a Unix socket and returns a Runtime on
// it with clk.
func newFakeEngine(t *testing.T, engine *fakeEngine, clk clock.Clock) *Runtime {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: engine}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	rt, err := New(Config{Host: "unix://" + sock, CallTimeout: 30 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// killExec polls the engine on Config.Clock and, while the engine has not
// started the exec (running, no PID: seen for over a second on a loaded
// host), waits for CallTimeout on that clock before it kills the
// container: with a clock.Fake, it waits on the fake clock between polls,
// and kills the container only once the fake clock has passed
// CallTimeout. On the system clock it would poll for 30 s of real time,
// with no timer on the fake clock.
func TestKillExecWaitsOnTheClock(t *testing.T) {
	engine := &fakeEngine{}
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	rt := newFakeEngine(t, engine, clk)
	rt.killGroup = func(int, string) error {
		t.Error("killGroup called for an exec with no PID")
		return nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan string, 1)
	go func() { done <- rt.killExec(ctx, "c1", "e1") }()

	waitPoll := func(what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for clk.Waiters() != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("after 10s: no timer on the fake clock (%s)", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitPoll("the first poll's wait")
	if n, kills := engine.counts(); n != 1 || len(kills) != 0 {
		t.Fatalf("before the clock moved: %d inspects, kills %v; want 1 inspect, no kill", n, kills)
	}
	clk.Advance(50 * time.Millisecond)
	waitPoll("the second poll's wait")
	if n, kills := engine.counts(); n != 2 || len(kills) != 0 {
		t.Fatalf("after one poll interval: %d inspects, kills %v; want 2 inspects, no kill", n, kills)
	}

	// execKillWait is for a PID that cannot be killed, not for an exec
	// the engine is still starting: no kill yet.
	clk.Advance(execKillWait)
	waitPoll("the poll after execKillWait")
	if _, kills := engine.counts(); len(kills) != 0 {
		t.Fatalf("after execKillWait with no PID: kills %v; want none (the engine has CallTimeout to start it)", kills)
	}
	clk.Advance(30 * time.Second)
	select {
	case why := <-done:
		if !strings.Contains(why, "its container was killed") {
			t.Errorf("killExec = %q, want the container killed", why)
		}
	case <-ctx.Done():
		t.Fatal("killExec did not return after the fake clock passed CallTimeout")
	}
	if n, kills := engine.counts(); n != 4 || len(kills) != 1 || kills[0] != "KILL" {
		t.Errorf("%d inspects, kills %v; want 4 inspects and one KILL", n, kills)
	}
	r := rt
	r.mu.Lock()
	why := r.killed["c1"]
	r.mu.Unlock()
	if !strings.Contains(why, "cancelled exec") {
		t.Errorf("the reason recorded for Wait is %q; want why the container was killed", why)
	}
}

// What killExec does for each answer of the engine and /proc: nothing to
// kill when the exec ended, failed to start, or its PID is gone while the
// container's processes are visible; the container killed only when the
// exec's PID can be neither killed nor seen gone.
func TestKillExecOutcomes(t *testing.T) {
	gone := &fs.PathError{Op: "open", Path: "/proc/7/cgroup", Err: fs.ErrNotExist}
	for _, tc := range []struct {
		name       string
		exec       string
		killErr    error // killGroup's answer
		visible    bool  // procVisible's answer for the container's init
		wantKilled bool  // the container killed
		wantGroup  bool  // killGroup called
	}{
		{name: "ended", exec: `{"Running":false,"Pid":7,"ExitCode":0}`},
		{name: "failed to start", exec: `{"Running":false,"Pid":0,"ExitCode":126}`},
		{name: "group killed", exec: `{"Running":true,"Pid":7}`, wantGroup: true},
		{name: "pid gone, container visible", exec: `{"Running":true,"Pid":7}`, killErr: gone, visible: true, wantGroup: true},
		{name: "pid gone, container not visible", exec: `{"Running":true,"Pid":7}`, killErr: gone, wantGroup: true, wantKilled: true},
		{name: "not ours", exec: `{"Running":true,"Pid":7}`, killErr: errNotOurs, visible: true, wantGroup: true, wantKilled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			engine := &fakeEngine{exec: func(int) string {
				return `{"ID":"e1","ContainerID":"c1",` + strings.TrimPrefix(tc.exec, "{")
			}}
			clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			rt := newFakeEngine(t, engine, clk)
			var grouped atomic.Bool
			rt.killGroup = func(pid int, id string) error {
				grouped.Store(true)
				if pid != 7 || id != "c1" {
					t.Errorf("killGroup(%d, %q); want (7, c1)", pid, id)
				}
				return tc.killErr
			}
			rt.procVisible = func(pid int, id string) bool { return pid == 42 && id == "c1" && tc.visible }
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan string, 1)
			go func() { done <- rt.killExec(ctx, "c1", "e1") }()
			var why string
		wait:
			for {
				select {
				case why = <-done:
					break wait
				case <-ctx.Done():
					t.Fatal("killExec did not return")
				case <-time.After(time.Millisecond):
					if clk.Waiters() > 0 {
						clk.Advance(50 * time.Millisecond)
					}
				}
			}
			_, kills := engine.counts()
			if killed := len(kills) > 0; killed != tc.wantKilled || (why != "") != tc.wantKilled {
				t.Errorf("kills %v, why %q; want the container killed: %v", kills, why, tc.wantKilled)
			}
			if grouped.Load() != tc.wantGroup {
				t.Errorf("killGroup called: %v; want %v", grouped.Load(), tc.wantGroup)
			}
		})
	}
}
