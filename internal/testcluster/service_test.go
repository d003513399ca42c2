package testcluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/process"
	"github.com/megaflow/megaflow/worker"
)

// The service test runs this test binary as the model server and as the
// rollout task (the os/exec tests' helper-process pattern): with
// MEGAFLOW_TEST_HELPER set, TestServiceHelper plays that role and exits.
const helperEnv = "MEGAFLOW_TEST_HELPER"

// TestServiceHelper is not a test: it is the model server ("server") and
// the rollout ("rollout") run by TestServiceTask.
func TestServiceHelper(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "server":
		os.Exit(modelServer())
	case "rollout":
		os.Exit(rollout())
	}
}

// chatReply is the mock chat-completions answer, with who served it.
type chatReply struct {
	Choices []struct {
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	PID  int `json:"megaflow_pid"`
	Port int `json:"megaflow_port"`
}

// modelServer serves a mock OpenAI-style /v1/chat/completions and /health
// on $PORT until killed.
func modelServer() int {
	port, err := strconv.Atoi(os.Getenv("PORT"))
	if err != nil || os.Getenv("MEGAFLOW_SERVICE_PORT") != os.Getenv("PORT") {
		fmt.Fprintf(os.Stderr, "bad PORT %q / MEGAFLOW_SERVICE_PORT %q\n", os.Getenv("PORT"), os.Getenv("MEGAFLOW_SERVICE_PORT"))
		return 2
	}
	mux := http.NewServeMux()
	var sick atomic.Bool // POST /sick: the server hangs on as a zombie whose health check fails
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		if sick.Load() {
			http.Error(w, "CUDA error: an illegal memory access was encountered", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("POST /sick", func(http.ResponseWriter, *http.Request) { sick.Store(true) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, "want a JSON body with messages", http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, `{"object":"chat.completion","choices":[{"message":{"role":"assistant","content":"echo: %s"}}],"megaflow_pid":%d,"megaflow_port":%d}`,
			req.Messages[0].Content, os.Getpid(), port)
	})
	fmt.Println("model server listening on", port)
	if err := http.ListenAndServe(":"+strconv.Itoa(port), mux); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return 1
}

// rollout calls the first endpoint of MEGAFLOW_SERVICE_MODEL_QWEN_7B (or
// of the variable MEGAFLOW_TEST_SERVICE_VAR names) and prints what it got
// as its result.
func rollout() int {
	v := "MEGAFLOW_SERVICE_MODEL_QWEN_7B"
	if o := os.Getenv("MEGAFLOW_TEST_SERVICE_VAR"); o != "" {
		v = o
	}
	eps := os.Getenv(v)
	first, _, _ := strings.Cut(eps, ",")
	if first == "" {
		fmt.Fprintln(os.Stderr, v+" is empty")
		return 3
	}
	resp, err := http.Post(first+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"qwen-7b","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	defer resp.Body.Close()
	var reply chatReply
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil || len(reply.Choices) == 0 {
		fmt.Fprintln(os.Stderr, "bad reply:", resp.Status, err)
		return 5
	}
	out, _ := json.Marshal(map[string]any{"endpoints": eps, "content": reply.Choices[0].Message.Content,
		"pid": reply.PID, "port": reply.Port})
	fmt.Printf("MEGAFLOW_RESULT %s\n", out)
	return 0
}

// rolloutResult is what the rollout task records.
type rolloutResult struct {
	Endpoints string `json:"endpoints"`
	Content   string `json:"content"`
	PID       int    `json:"pid"`
	Port      int    `json:"port"`
}

func helperTask(name, role string) *client.TaskSpec {
	exe, _ := os.Executable()
	return &client.TaskSpec{Name: name, Image: "none", Command: []string{exe, "-test.run=^TestServiceHelper$"},
		Env: map[string]string{helperEnv: role}, Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}}
}

// A model server task becomes ready, its endpoint is published, and a
// rollout that uses it receives it and calls it; killing the server
// restarts it and the endpoint list follows (the old endpoint withdrawn, the
// new one given to the next rollout); a graph's own service stops when its
// rollout ends; a clean worker stop stops the server process and withdraws
// its endpoint.
func TestServiceTask(t *testing.T) {
	t.Parallel() // it waits for a server process and its probes (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) {
		cfg.RetryBackoff, cfg.RetryBackoffMax = 20*time.Millisecond, 100*time.Millisecond
	}})
	rt, err := process.New(process.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Configure: func(cfg *worker.Config) {
		cfg.ServicePortMin, cfg.ServicePortMax = 42100, 42199
		cfg.ServiceProbeInterval = 20 * time.Millisecond
		cfg.ServiceLivenessInterval = 50 * time.Millisecond
		cfg.ServiceReadyTimeout = time.Minute
	}})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	server := helperTask("server", "server")
	server.Kind = client.KindService
	server.Service = &client.ServiceSpec{Name: "model/qwen-7b", ReadinessHttpPath: "/health"}
	// The server in a graph of its own, as a model served across rollout
	// steps is (a service in a graph with batch tasks stops with them).
	if _, err := cl.Submit(ctx, &client.GraphSpec{Id: "serving", Tasks: []*client.TaskSpec{server}}); err != nil {
		t.Fatal(err)
	}
	first := helperTask("rollout", "rollout")
	first.UsesServices = []string{"model/qwen-7b"}
	if _, err := cl.Submit(ctx, &client.GraphSpec{Id: "step-1", Tasks: []*client.TaskSpec{first}}); err != nil {
		t.Fatal(err)
	}

	// Ready and published: one endpoint on the loopback cluster's host,
	// a port of the worker's range.
	ep1 := waitEndpoints(ctx, t, cl, "", func(eps []string) bool { return len(eps) == 1 })[0]
	u, err := url.Parse(ep1)
	if err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" {
		t.Fatalf("endpoint %q: want http://127.0.0.1:<port>", ep1)
	}
	if p, _ := strconv.Atoi(u.Port()); p < 42100 || p > 42199 {
		t.Fatalf("endpoint %q: port outside the worker's range 42100-42199", ep1)
	}

	// The rollout received the endpoint and called the server through it.
	r1 := waitRollout(ctx, t, cl, "step-1/rollout")
	if r1.Endpoints != ep1 || r1.Content != "echo: hi" || r1.PID <= 0 || "http://127.0.0.1:"+strconv.Itoa(r1.Port) != ep1 {
		t.Fatalf("rollout result %+v; want the endpoint %s and its echo", r1, ep1)
	}

	// Kill the server process: the head restarts the service (policy
	// "always") as a new attempt on a new port; the endpoint list follows.
	if err := syscall.Kill(r1.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the model server (pid %d): %v", r1.PID, err)
	}
	ep2 := waitEndpoints(ctx, t, cl, "model/qwen-7b", func(eps []string) bool { return len(eps) == 1 && eps[0] != ep1 })[0]
	task, _, err := cl.GetTask(ctx, "serving/server", client.ReadOptions{RequireLeader: true})
	if err != nil {
		t.Fatal(err)
	}
	if task.State != client.TaskRunning || task.Restarts != 1 || len(task.Attempts) != 2 || task.Attempts[0].Endpoint != ep1 ||
		task.Attempts[1].Endpoint != ep2 || !strings.Contains(task.Attempts[0].Reason, "killed") {
		t.Fatalf("server task after the kill: %v", task)
	}
	if _, err := http.Get(ep1 + "/health"); err == nil {
		t.Fatalf("old endpoint %s still answers", ep1)
	}

	// A rollout of the next step (another graph) gets the new endpoint.
	second := helperTask("rollout", "rollout")
	second.UsesServices = []string{"model/qwen-7b"}
	if _, err := cl.Submit(ctx, &client.GraphSpec{Id: "step-2", Tasks: []*client.TaskSpec{second}}); err != nil {
		t.Fatal(err)
	}
	if r2 := waitRollout(ctx, t, cl, "step-2/rollout"); r2.Endpoints != ep2 || r2.PID == r1.PID {
		t.Fatalf("second rollout %+v; want endpoint %s served by a new process", r2, ep2)
	}

	// The server stops passing its health check while its process lives
	// on: after 3 failed probes in a row the worker stops it, its endpoint
	// is withdrawn and the restart policy starts a new one.
	resp, err := http.Post(ep2+"/sick", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ep3 := waitEndpoints(ctx, t, cl, "model/qwen-7b", func(eps []string) bool { return len(eps) == 1 && eps[0] != ep2 })[0]
	task, _, err = cl.GetTask(ctx, "serving/server", client.ReadOptions{RequireLeader: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(task.Attempts) != 3 || task.Attempts[2].Endpoint != ep3 ||
		!strings.Contains(task.Attempts[1].Reason, "service stopped answering its probe: 3 probes in a row failed") ||
		!strings.Contains(task.Attempts[1].Reason, "503") {
		t.Fatalf("server task after its health check failed: %v", task)
	}

	// A graph with a service of its own and a rollout: once the rollout
	// succeeded the graph SUCCEEDS and its service is stopped, its endpoint
	// withdrawn and its process gone.
	own := helperTask("server", "server")
	own.Kind = client.KindService
	own.Service = &client.ServiceSpec{Name: "model/own", ReadinessHttpPath: "/health"}
	third := helperTask("rollout", "rollout")
	third.UsesServices = []string{"model/own"}
	third.Env["MEGAFLOW_TEST_SERVICE_VAR"] = "MEGAFLOW_SERVICE_MODEL_OWN"
	if _, err := cl.Submit(ctx, &client.GraphSpec{Id: "step-3", Tasks: []*client.TaskSpec{own, third}}); err != nil {
		t.Fatal(err)
	}
	r3 := waitRollout(ctx, t, cl, "step-3/rollout")
	g3, err := cl.Wait(ctx, "step-3")
	if err != nil || g3.State != client.GraphSucceeded {
		t.Fatalf("graph step-3 with its own service: %v, %v; want SUCCEEDED once its rollout did", g3, err)
	}
	task, _, err = cl.GetTask(ctx, "step-3/server", client.ReadOptions{RequireLeader: true})
	if err != nil || task.State != client.TaskCancelled || !strings.Contains(task.Reason, "stopped with its graph") {
		t.Fatalf("step-3's service after its graph ended: %v, %v", task, err)
	}
	waitEndpoints(ctx, t, cl, "model/own", func(eps []string) bool { return len(eps) == 0 })
	testcluster.WaitFor(t, time.Minute, "step-3's server process to end", func() bool {
		return errors.Is(syscall.Kill(r3.PID, 0), syscall.ESRCH)
	})

	// A clean worker stop stops the server process (the process runtime's
	// children cannot be adopted later) and the endpoint is withdrawn.
	pid := serverPID(t, ep3)
	c.StopWorker(0)
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("model server pid %d after a clean worker stop: kill(0) = %v, want ESRCH", pid, err)
	}
	waitEndpoints(ctx, t, cl, "model/qwen-7b", func(eps []string) bool { return len(eps) == 0 })
	if _, err := cl.CancelGraph(ctx, "serving", "test over"); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, time.Minute, "no service left", func() bool {
		s, err := cl.ListServices(ctx, "", client.ReadOptions{RequireLeader: true})
		return err == nil && len(s) == 0
	})
}

// waitEndpoints waits until the ready endpoints of service name ("" for
// the only service) satisfy ok, and returns them.
func waitEndpoints(ctx context.Context, t *testing.T, cl *client.Client, name string, ok func([]string) bool) []string {
	t.Helper()
	var eps []string
	testcluster.WaitFor(t, time.Minute, "service endpoints", func() bool {
		svcs, err := cl.ListServices(ctx, name, client.ReadOptions{RequireLeader: true})
		if err != nil || len(svcs) > 1 {
			t.Fatalf("list services: %v %v", svcs, err)
		}
		eps = nil
		if len(svcs) == 1 {
			if svcs[0].Name != "model/qwen-7b" {
				t.Fatalf("service %v", svcs[0])
			}
			for _, e := range svcs[0].Endpoints {
				eps = append(eps, e.Url)
			}
		}
		return ok(eps)
	})
	return eps
}

// waitRollout waits for a rollout task to succeed and decodes its result.
func waitRollout(ctx context.Context, t *testing.T, cl *client.Client, id string) rolloutResult {
	t.Helper()
	var task *client.Task
	testcluster.WaitFor(t, time.Minute, id+" to end", func() bool {
		var err error
		task, _, err = cl.GetTask(ctx, id, client.ReadOptions{RequireLeader: true})
		return err == nil && task.State >= client.TaskSucceeded
	})
	var r rolloutResult
	if task.State != client.TaskSucceeded || json.Unmarshal(task.Result, &r) != nil {
		t.Fatalf("%s: %v (result %s)", id, task, task.Result)
	}
	return r
}

// serverPID asks the model server at endpoint for its process id.
func serverPID(t *testing.T, endpoint string) int {
	t.Helper()
	resp, err := http.Post(endpoint+"/v1/chat/completions", "application/json",
		bytes.NewReader([]byte(`{"messages":[{"content":"pid?"}]}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r chatReply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.PID <= 0 {
		t.Fatalf("pid from %s: %v", endpoint, err)
	}
	return r.PID
}
