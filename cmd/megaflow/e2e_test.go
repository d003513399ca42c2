package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/testbin"
	"github.com/megaflow/megaflow/internal/testcluster"
)

// syncBuffer is a bytes.Buffer safe to read while a process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// daemon is one process of the test's cluster.
type daemon struct {
	name string
	cmd  *exec.Cmd
	log  *syncBuffer
}

func startDaemon(t *testing.T, name, bin string, args ...string) *daemon {
	t.Helper()
	d := &daemon{name: name, log: &syncBuffer{}}
	d.cmd = exec.Command(bin, args...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
			_ = d.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("--- %s log:\n%s", name, d.log.String())
		}
	})
	return d
}

// The demo's rollout step, as a user runs it on a real cluster: three
// megaflow-head and two megaflow-worker processes (process runtime), the
// graph printed by `megaflow demo graph` and submitted with `megaflow
// submit --watch`; the leader is killed with SIGKILL half-way. The graph
// completes, the CLI's summary adds up, and every task's success (with its
// result) is recorded exactly once in the history of committed events.
func TestDemoStepSurvivesKill9OfLeader(t *testing.T) {
	t.Parallel() // it waits for processes and an election (see internal/testcluster)
	if testing.Short() {
		t.Skip("builds binaries and runs processes")
	}
	begin := time.Now()
	dir := t.TempDir()
	bins := map[string]string{}
	cmds := []string{"megaflow-head", "megaflow-worker", "megaflow", "megaflow-agent", "megaflow-model", "megaflow-init"}
	binDir := testbin.Dir(t, cmds...)
	for _, c := range cmds {
		bins[c] = filepath.Join(binDir, c)
	}
	t.Logf("%v: have the binaries", time.Since(begin).Round(time.Millisecond))
	model := testcluster.FreeAddr(t)
	startDaemon(t, "model", bins["megaflow-model"], "--addr", model)

	var heads []*daemon
	var grpc, gossip []string
	for range 3 {
		grpc, gossip = append(grpc, testcluster.FreeAddr(t)), append(gossip, testcluster.FreeAddr(t))
	}
	for i := range 3 {
		heads = append(heads, startDaemon(t, fmt.Sprintf("h%d", i+1), bins["megaflow-head"],
			"--node-id", fmt.Sprintf("h%d", i+1), "--data-dir", filepath.Join(dir, fmt.Sprintf("h%d", i+1)),
			"--raft-addr", testcluster.FreeAddr(t), "--grpc-addr", grpc[i], "--gossip-addr", gossip[i], "--http-addr", "127.0.0.1:0",
			"--bootstrap-expect", "3", "--join", strings.Join(gossip, ",")))
	}
	for i := range 2 {
		startDaemon(t, fmt.Sprintf("w%d", i+1), bins["megaflow-worker"],
			"--node-id", fmt.Sprintf("w%d", i+1), "--data-dir", filepath.Join(dir, fmt.Sprintf("w%d", i+1)),
			"--gossip-addr", testcluster.FreeAddr(t), "--http-addr", "127.0.0.1:0", "--join", strings.Join(gossip, ","), "--runtime", "process",
			"--cpu-millis", "2000", "--memory-bytes", "4294967296", "--nvml=false")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := client.Dial(ctx, grpc, client.WithBackoff(20*time.Millisecond, 300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	testcluster.WaitFor(t, 2*time.Minute, "a leader and two alive workers", func() bool {
		ws, err := cl.ListWorkers(ctx, client.ReadOptions{RequireLeader: true})
		alive := 0
		for _, w := range ws {
			if w.GetStatus().String() == "WORKER_STATUS_ALIVE" {
				alive++
			}
		}
		return err == nil && alive == 2
	})

	t.Logf("%v: cluster up", time.Since(begin).Round(time.Millisecond))
	// The graph file, as a user makes it.
	file := filepath.Join(dir, "step.yaml")
	out, err := exec.Command(bins["megaflow"], "demo", "graph", "--runtime", "process", "--instances", "4", "--speedup", "40",
		"--graph-id", "step-e2e", "--model-url", "http://"+model, "--work-root", filepath.Join(dir, "work")).Output()
	if err != nil {
		t.Fatalf("megaflow demo graph: %v", err)
	}
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	submit := startDaemon(t, "submit", bins["megaflow"], "--heads", strings.Join(grpc, ","), "submit", file, "--watch", "-o", "json")

	// Half-way: a third of the tasks done.
	testcluster.WaitFor(t, 3*time.Minute, "a third of the tasks done", func() bool {
		g, _, err := cl.GetGraph(ctx, "step-e2e", client.ReadOptions{})
		return err == nil && g.Counts.GetSucceeded() >= g.TaskCount/3
	})
	st, err := cl.ClusterStatus(ctx)
	if err != nil || st.LeaderId == "" {
		t.Fatalf("cluster status: %v %v", st, err)
	}
	leader := heads[st.LeaderId[1]-'1']
	if err := leader.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = leader.cmd.Wait()
	t.Logf("%v: killed leader %s", time.Since(begin).Round(time.Millisecond), st.LeaderId)

	if err := submit.cmd.Wait(); err != nil {
		t.Fatalf("megaflow submit --watch: %v\n%s", err, submit.log.String())
	}
	t.Logf("%v: graph done", time.Since(begin).Round(time.Millisecond))
	var sum Summary
	if err := json.Unmarshal([]byte(submit.log.String()[strings.Index(submit.log.String(), "{"):]), &sum); err != nil {
		t.Fatalf("summary is not one JSON object: %v\n%s", err, submit.log.String())
	}
	var total uint32
	for _, n := range sum.Counts {
		total += n
	}
	if sum.State != "succeeded" || sum.Tasks != 12 || total != 12 || sum.Counts["succeeded"] != 12 || sum.RewardCount != 4 || sum.ExitCode != 0 {
		t.Fatalf("summary %+v: want 12 tasks succeeded adding up, 4 rewards", sum)
	}

	// Every task succeeded once: one SUCCEEDED event per task in the
	// committed history, and its result recorded.
	succeeded := map[string]int{}
	for ev, err := range cl.Watch(ctx, client.WatchOptions{GraphID: "step-e2e"}) {
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if ev.TaskId != "" && ev.TaskState == client.TaskSucceeded {
			succeeded[ev.TaskId]++
		}
		if ev.TaskId == "" && client.GraphTerminal(ev.GraphState) {
			break
		}
	}
	tasks, _, err := cl.ListTasks(ctx, client.TaskFilter{GraphID: "step-e2e", PageSize: 100})
	if err != nil || len(tasks) != 12 {
		t.Fatalf("list tasks: %d, %v", len(tasks), err)
	}
	for _, task := range tasks {
		if succeeded[task.Id] != 1 {
			t.Errorf("task %s: %d SUCCEEDED events, want exactly 1", task.Id, succeeded[task.Id])
		}
		var res map[string]any
		if err := json.Unmarshal(task.Result, &res); err != nil {
			t.Errorf("task %s: result %q is not JSON: %v", task.Id, task.Result, err)
		}
		if strings.HasPrefix(task.Spec.GetName(), "rollout.") && res["steps"] == nil {
			t.Errorf("rollout %s: result %v has no steps", task.Id, res)
		}
		if strings.HasPrefix(task.Spec.GetName(), "eval.") && res["reward"] == nil {
			t.Errorf("eval %s: result %v has no reward", task.Id, res)
		}
	}
}
