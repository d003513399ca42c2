package head_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/obs"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// withHTTP gives every head of a test cluster an HTTP listener on a free
// loopback port.
func withHTTP(c *head.Config) { c.HTTPAddr = "127.0.0.1:0" }

// scrape reads a head's /metrics.
func scrape(t *testing.T, h *head.Head) obs.Families {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, err := obs.Scrape(ctx, "http://"+h.HTTPAddr()+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func value(f obs.Families, name string, labels ...string) float64 {
	v, _ := f.Sum(name, labels...)
	return v
}

// The key series of /metrics move as a graph runs, on every head: the queue
// depth rises while no worker can take the tasks and falls to 0 when they
// ran; the stage histograms and the ended-attempt counters count every
// attempt exactly once on each head, although the leader is killed in the
// middle of the run.
func TestMetricsFollowAGraphAcrossALeaderChange(t *testing.T) {
	t.Parallel() // it waits for an election (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{Configure: withHTTP})
	leader := c.WaitLeader(30 * time.Second)
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const n = 24 // 23 tasks that succeed and one that fails twice (one retry)
	g := &client.GraphSpec{Id: "metrics"}
	for i := range n {
		cmd := "/bin/work"
		if i == 0 {
			cmd = "/bin/fail"
		}
		g.Tasks = append(g.Tasks, &client.TaskSpec{Name: fmt.Sprintf("t%02d", i), Type: "eval", Image: "busybox",
			Command: []string{cmd}, Resources: &client.Resources{CpuMillis: 500, MemoryBytes: 64 << 20}, MaxRetries: 1})
	}
	sub, err := cl.Submit(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(sub.Index, 30*time.Second)

	// No worker yet: every task waits in the eval queue, on every head.
	for _, h := range c.Running() {
		testcluster.WaitFor(t, 30*time.Second, h.ID()+" shows the eval queue full", func() bool {
			f := scrape(t, h)
			return value(f, "megaflow_queue_depth", "queue", "eval") == n && value(f, "megaflow_tasks", "state", "queued", "type", "eval") == n
		})
	}
	if f := scrape(t, c.Running()[0]); value(f, "megaflow_queue_oldest_wait_seconds", "queue", "eval") <= 0 {
		t.Errorf("oldest wait of a full queue is %v, want > 0", value(f, "megaflow_queue_oldest_wait_seconds", "queue", "eval"))
	}

	// A worker that runs two tasks at a time; the leader dies mid-run.
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: 40 * time.Millisecond, Output: "MEGAFLOW_RESULT {\"reward\": 1}\n"})
	rt.OnCommand("/bin/fail", fake.Behavior{Duration: 10 * time.Millisecond, ExitCode: 3})
	t.Log(time.Now().Format("15:04:05.000"), "add worker")
	wm := c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Capacity: worker.Capacity{CPUMillis: 1000, MemoryBytes: 1 << 30},
		Configure: func(wc *worker.Config) { wc.HTTPAddr = "127.0.0.1:0" }})
	testcluster.WaitFor(t, 60*time.Second, "a few tasks done", func() bool {
		gr, _, err := cl.GetGraph(ctx, "metrics", client.ReadOptions{})
		return err == nil && gr.Counts.GetSucceeded() >= 4
	})
	t.Log(time.Now().Format("15:04:05.000"), "kill")
	c.Kill(leader)
	c.WaitLeader(30 * time.Second)
	t.Log(time.Now().Format("15:04:05.000"), "new leader")
	final, err := cl.Wait(ctx, "metrics")
	t.Log(time.Now().Format("15:04:05.000"), "done")
	if err != nil {
		t.Fatal(err)
	}
	if final.Counts.GetSucceeded() != n-1 || final.Counts.GetFailed() != 1 {
		t.Fatalf("graph ended with %v; want %d succeeded and 1 failed", final.Counts, n-1)
	}

	// What the table says happened: attempts, which of them started, how
	// they ended. (On a loaded machine the leader change may also cost an
	// attempt or two: they count like the others.)
	var attempts, started, succeeded, exitCode float64
	for _, task := range testcluster.Tasks(ctx, t, cl, "metrics") {
		for _, a := range task.Attempts {
			attempts++
			if a.StartUnixNanos != 0 {
				started++
			}
			if a.State == client.TaskSucceeded {
				succeeded++
			}
			if a.Reason == "exit code 3" {
				exitCode++
			}
		}
	}
	if attempts < n+1 || exitCode != 2 {
		t.Fatalf("the table holds %v attempts, %v failed with exit code 3; want at least %d, and 2 (the failing task retried once)", attempts, exitCode, n+1)
	}

	for _, h := range c.Running() {
		testcluster.WaitFor(t, 30*time.Second, h.ID()+" counts every attempt once", func() bool {
			f := scrape(t, h)
			return value(f, "megaflow_queue_depth", "queue", "eval") == 0 &&
				value(f, "megaflow_attempt_stage_duration_seconds", "stage", "queued", "queue", "eval") == attempts &&
				value(f, "megaflow_attempt_stage_duration_seconds", "stage", "starting", "queue", "eval") == started &&
				value(f, "megaflow_attempt_stage_duration_seconds", "stage", "running", "queue", "eval") == started &&
				value(f, "megaflow_attempts_ended_total") == attempts &&
				value(f, "megaflow_attempts_ended_total", "outcome", "succeeded") == succeeded &&
				value(f, "megaflow_attempts_ended_total", "outcome", "failed", "reason_class", "exit_code") == exitCode
		})
		f := scrape(t, h)
		t.Logf("%s: queued %v, starting %v, running %v attempts; ended %v; tasks succeeded %v",
			h.ID(), value(f, "megaflow_attempt_stage_duration_seconds", "stage", "queued"),
			value(f, "megaflow_attempt_stage_duration_seconds", "stage", "starting"),
			value(f, "megaflow_attempt_stage_duration_seconds", "stage", "running"),
			value(f, "megaflow_attempts_ended_total"), value(f, "megaflow_tasks", "state", "succeeded"))
		if got := value(f, "megaflow_tasks", "state", "succeeded", "type", "eval"); got != n-1 {
			t.Errorf("%s: megaflow_tasks{state=succeeded} = %v, want %d", h.ID(), got, n-1)
		}
		if got := value(f, "megaflow_raft_has_leader"); got != 1 {
			t.Errorf("%s: megaflow_raft_has_leader = %v", h.ID(), got)
		}
		if got := value(f, "megaflow_worker_cpu_capacity_cores", "worker", "w1"); got != 1 {
			t.Errorf("%s: worker w1 capacity %v cores, want 1", h.ID(), got)
		}
		if _, ok := f.Sum("go_goroutines"); !ok {
			t.Errorf("%s: the Go runtime collector is missing", h.ID())
		}
	}
	leaders := 0.0
	for _, h := range c.Running() {
		leaders += value(scrape(t, h), "megaflow_raft_leader")
		resp, err := http.Get("http://" + h.HTTPAddr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: /readyz %s", h.ID(), resp.Status)
		}
	}
	if leaders != 1 {
		t.Errorf("%v heads report megaflow_raft_leader 1, want 1", leaders)
	}

	// The worker's own page: connected, and one container start per attempt.
	wf, err := obs.Scrape(ctx, "http://"+wm.Worker().HTTPAddr()+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if got := value(wf, "megaflow_worker_container_start_duration_seconds", "result", "ok"); got != attempts {
		t.Errorf("worker: %v container starts observed, want %v", got, attempts)
	}
	if got := value(wf, "megaflow_worker_connected"); got != 1 {
		t.Errorf("worker: megaflow_worker_connected = %v", got)
	}
}
