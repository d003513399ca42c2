package docker

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/megaflow/megaflow/internal/clock"
)

// fakeEngine answers the Docker API calls killExec makes: a ping, an exec
// inspect that always says "running, no process yet", and a container
// kill, which it records.
type fakeEngine struct {
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
		w.Write([]byte(`{"ID":"e1","ContainerID":"c1","Running":true,"Pid":0}`))
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

// killExec polls the engine on Config.Clock and gives up on the host kill
// after execKillWait on that clock: with a clock.Fake, it waits on the
// fake clock between polls, and kills the container only once the fake
// clock has passed execKillWait. On the system clock it would poll 40
// times and kill after 2 s of real time, with no timer on the fake clock.
func TestKillExecWaitsOnTheClock(t *testing.T) {
	engine := &fakeEngine{}
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: engine}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	rt, err := New(Config{Host: "unix://" + sock, CallTimeout: 30 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
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

	clk.Advance(execKillWait)
	select {
	case why := <-done:
		if !strings.Contains(why, "its container was killed") {
			t.Errorf("killExec = %q, want the container killed", why)
		}
	case <-ctx.Done():
		t.Fatal("killExec did not return after the fake clock passed execKillWait")
	}
	if n, kills := engine.counts(); n != 3 || len(kills) != 1 || kills[0] != "KILL" {
		t.Errorf("%d inspects, kills %v; want 3 inspects and one KILL", n, kills)
	}
}
