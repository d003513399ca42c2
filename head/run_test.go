package head_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/internal/lease"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// flatGraph is n independent tasks running `/bin/work`.
func flatGraph(id string, n int) *client.GraphSpec {
	g := &client.GraphSpec{Id: id}
	for i := range n {
		g.Tasks = append(g.Tasks, &client.TaskSpec{Name: fmt.Sprintf("t%03d", i), Image: "busybox",
			Command: []string{"/bin/work"}, Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}, MaxRetries: 1})
	}
	return g
}

// allTasks lists every task of a graph through the leader.
func allTasks(ctx context.Context, t *testing.T, cl *client.Client, graph string) []*client.Task {
	return testcluster.Tasks(ctx, t, cl, graph)
}

func waitGraph(ctx context.Context, t *testing.T, cl *client.Client, id string) *client.Graph {
	t.Helper()
	g, err := cl.Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait %s: %v", id, err)
	}
	return g
}

// Tasks run on two workers; every one succeeds with one attempt.
func TestTasksRunOnWorkers(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	for range 2 {
		rt := fake.New(nil)
		rt.Default(fake.Behavior{Duration: 5 * time.Millisecond, Output: "MEGAFLOW_RESULT {\"reward\": 1}\n"})
		c.AddWorker(testcluster.WorkerOptions{Runtime: rt})
	}
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cl.Submit(ctx, flatGraph("g", 200)); err != nil {
		t.Fatal(err)
	}
	g := waitGraph(ctx, t, cl, "g")
	if g.State != client.GraphSucceeded || g.Counts.GetSucceeded() != 200 {
		t.Fatalf("graph %v", g)
	}
	if m := g.GetMetrics(); m.Field != "reward" || m.Count != 200 || m.Mean != 1 || m.SuccessRate != 1 || m.Histogram[11] != 200 ||
		m.WallMillis <= 0 || m.LastFinishUnixNanos != g.FinishUnixNanos {
		t.Fatalf("metrics %v", m)
	}
	workers := map[string]int{}
	for _, task := range allTasks(ctx, t, cl, "g") {
		if len(task.Attempts) != 1 {
			t.Fatalf("task %s ran %d attempts, want 1", task.Id, len(task.Attempts))
		}
		workers[task.Attempts[0].WorkerId]++
	}
	if len(workers) != 2 {
		t.Fatalf("tasks ran on %v; want both workers used", workers)
	}
}

// A worker killed while its tasks run: they are re-run on the other
// worker and each task's result is recorded once.
func TestWorkerLossReRunsItsTasks(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	rts := []*fake.Runtime{fake.New(nil), fake.New(nil)}
	for _, rt := range rts {
		rt.Default(fake.Behavior{Duration: 2 * time.Second, Output: "MEGAFLOW_RESULT {\"ok\": true}\n"})
		c.AddWorker(testcluster.WorkerOptions{Runtime: rt})
	}
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cl.Submit(ctx, flatGraph("g", 50)); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 30*time.Second, "tasks running on both workers", func() bool {
		running := map[string]int{}
		for _, task := range allTasks(ctx, t, cl, "g") {
			if task.State == client.TaskRunning {
				running[task.Attempts[len(task.Attempts)-1].WorkerId]++
			}
		}
		return running["w1"] > 0 && running["w2"] > 0
	})
	c.KillWorker(0)
	g := waitGraph(ctx, t, cl, "g")
	if g.State != client.GraphSucceeded || g.Counts.GetSucceeded() != 50 {
		t.Fatalf("graph %v", g)
	}
	rerun := 0
	for _, task := range allTasks(ctx, t, cl, "g") {
		last := task.Attempts[len(task.Attempts)-1]
		if last.WorkerId != "w2" && len(task.Attempts) > 1 {
			t.Fatalf("task %s: last attempt on %s", task.Id, last.WorkerId)
		}
		if len(task.Attempts) > 1 {
			rerun++
			if task.Attempts[0].WorkerId != "w1" {
				t.Fatalf("task %s re-ran but its first attempt was on %s", task.Id, task.Attempts[0].WorkerId)
			}
		}
		if string(task.Result) != `{"ok": true}` {
			t.Fatalf("task %s result %q", task.Id, task.Result)
		}
	}
	if rerun == 0 {
		t.Fatal("no task was re-run after the worker died")
	}
}

// Killing the head leader while tasks run restarts none of them.
func TestLeaderLossRestartsNoTask(t *testing.T) {
	t.Parallel() // it waits for 10 s tasks (see internal/testcluster)
	// A lease well above an election and a reconnection on a loaded
	// machine (the test cluster's 3 s lapsed once in CI): this test is
	// about the leader's loss, not the lease's.
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) {
		cfg.Lease = lease.Config{Duration: 10 * time.Second, Margin: 2 * time.Second}
	}})
	for range 2 {
		rt := fake.New(nil)
		rt.Default(fake.Behavior{Duration: 10 * time.Second})
		c.AddWorker(testcluster.WorkerOptions{Runtime: rt})
	}
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cl.Submit(ctx, flatGraph("g", 100)); err != nil {
		t.Fatal(err)
	}
	// Some attempts running: the kill lands while they run (waiting for
	// all 100 at once would race their ends on a slow machine). Tasks not
	// placed yet are placed by the next leader, still with one attempt.
	testcluster.WaitFor(t, 60*time.Second, "tasks running", func() bool {
		g, _, err := cl.GetGraph(ctx, "g", client.ReadOptions{RequireLeader: true})
		return err == nil && g.Counts.GetRunning() >= 10
	})
	c.Kill(c.WaitLeader(10 * time.Second))
	g := waitGraph(ctx, t, cl, "g")
	if g.State != client.GraphSucceeded {
		t.Fatalf("graph %v", g)
	}
	for _, task := range allTasks(ctx, t, cl, "g") {
		if len(task.Attempts) != 1 {
			t.Fatalf("task %s ran %d attempts after the leader died; want 1: %v", task.Id, len(task.Attempts), task.Attempts)
		}
	}
}

// Cancelling a running graph stops its attempts and frees the workers.
func TestCancelStopsRunningAttempts(t *testing.T) {
	t.Parallel() // it waits for its cluster (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Hang: true})
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.Submit(ctx, flatGraph("g", 10)); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 30*time.Second, "10 tasks running", func() bool {
		g, _, err := cl.GetGraph(ctx, "g", client.ReadOptions{RequireLeader: true})
		return err == nil && g.Counts.GetRunning() == 10
	})
	if _, err := cl.CancelGraph(ctx, "g", "enough"); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 10*time.Second, "every container stopped", func() bool {
		ctrs, err := rt.List(ctx, nil)
		if err != nil {
			return false
		}
		for _, ctr := range ctrs {
			if ctr.Running {
				return false
			}
		}
		return true
	})
	testcluster.WaitFor(t, 10*time.Second, "the worker's resources released", func() bool {
		for _, h := range c.Running() {
			if h.IsLeader() {
				w := h.FSM().View().Worker("w1")
				return w != nil && w.ActiveAttempts == 0
			}
		}
		return false
	})
}

// The tasks of a session (setup -> rollout -> eval) run on one worker, in
// one warm container, even with another worker free; containers of ended
// sessions make room for the next ones.
func TestSessionTasksFollowTheirWorker(t *testing.T) {
	t.Parallel() // it waits for its cluster (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	for range 2 {
		rt := fake.New(nil)
		rt.Default(fake.Behavior{Hang: true}) // the warm containers' keepers
		for _, step := range []string{"/bin/setup", "/bin/rollout", "/bin/eval"} {
			rt.OnCommand(step, fake.Behavior{Duration: 5 * time.Millisecond})
		}
		c.AddWorker(testcluster.WorkerOptions{Runtime: rt})
	}
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// 12 sessions on 2 workers: more than a worker's pool (4 containers)
	// holds at once, so a session's container must go when the session's
	// last task ends, or later sessions would wait for ever.
	g := &client.GraphSpec{Id: "sessions"}
	for i := range 12 {
		prev := ""
		for _, step := range []string{"setup", "rollout", "eval"} {
			name := fmt.Sprintf("%s-%d", step, i)
			task := &client.TaskSpec{Name: name, Image: "env:1", Command: []string{"/bin/" + step}, Mode: client.ModePersistent,
				Session: fmt.Sprintf("s%d", i), Resources: &client.Resources{CpuMillis: 500, MemoryBytes: 64 << 20}}
			if prev != "" {
				task.DependsOn = []string{prev}
			}
			g.Tasks = append(g.Tasks, task)
			prev = name
		}
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
	defer wcancel()
	if res, err := cl.Wait(wctx, "sessions"); err != nil {
		for _, task := range allTasks(ctx, t, cl, "sessions") {
			t.Logf("%s %v %q attempts=%d", task.Id, task.State, task.Reason, len(task.Attempts))
		}
		t.Fatalf("wait: %v", err)
	} else if res.State != client.GraphSucceeded {
		for _, task := range allTasks(ctx, t, cl, "sessions") {
			if task.State == client.TaskFailed {
				t.Errorf("task %s failed: %s", task.Id, task.Reason)
			}
		}
		t.Fatalf("graph %v", res.State)
	}
	sessionWorker := map[string]string{}
	used := map[string]bool{}
	for _, task := range allTasks(ctx, t, cl, "sessions") {
		w := task.Attempts[len(task.Attempts)-1].WorkerId
		used[w] = true
		if prev, ok := sessionWorker[task.Spec.Session]; ok && prev != w {
			t.Fatalf("session %s ran on %s and %s", task.Spec.Session, prev, w)
		}
		sessionWorker[task.Spec.Session] = w
	}
	if len(used) != 2 {
		t.Fatalf("sessions used workers %v; want both workers busy", used)
	}
}

// A session task whose worker is away (its stream dropped, but the worker
// is not declared down) waits for that worker to reconnect instead of
// splitting the session onto another worker.
func TestSessionWaitsForItsReconnectingWorker(t *testing.T) {
	t.Parallel() // it waits for a worker's return (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) {
		cfg.Lease.Duration, cfg.Lease.Margin = time.Minute, time.Second // the killed worker stays ALIVE in the table
	}})
	clk := clock.NewFake(time.Now())
	rts := []*fake.Runtime{fake.New(nil), fake.New(clk)}
	for i, rt := range rts {
		rt.Default(fake.Behavior{Hang: true}) // the warm containers' keepers
		for _, step := range []string{"/bin/setup", "/bin/rollout"} {
			rt.OnCommand(step, fake.Behavior{Duration: 5 * time.Millisecond})
		}
		rt.OnCommand("/bin/gate", fake.Behavior{Duration: time.Hour}) // on w2's fake clock
		c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Labels: map[string]string{"pool": []string{"a", "b"}[i]}})
	}
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := &client.Resources{CpuMillis: 500, MemoryBytes: 64 << 20}
	g := &client.GraphSpec{Id: "g", Tasks: []*client.TaskSpec{
		{Name: "setup", Image: "env:1", Command: []string{"/bin/setup"}, Mode: client.ModePersistent, Session: "s",
			Resources: res, NodeSelector: map[string]string{"pool": "a"}},
		{Name: "gate", Image: "env:1", Command: []string{"/bin/gate"}, Resources: res, NodeSelector: map[string]string{"pool": "b"}},
		{Name: "rollout", Image: "env:1", Command: []string{"/bin/rollout"}, Mode: client.ModePersistent, Session: "s",
			Resources: res, DependsOn: []string{"setup", "gate"}},
	}}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	task := func(name string) *client.Task {
		task, _, err := cl.GetTask(ctx, "g/"+name, client.ReadOptions{RequireLeader: true})
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	testcluster.WaitFor(t, 30*time.Second, "setup succeeded on w1 and gate running on w2", func() bool {
		return task("setup").State == client.TaskSucceeded && task("gate").State == client.TaskRunning
	})
	c.KillWorker(0)
	testcluster.WaitFor(t, 30*time.Second, "w1's stream gone", func() bool {
		h := c.Running()[c.WaitLeader(10*time.Second)]
		return !h.WorkerConnected("w1")
	})
	clk.Advance(time.Hour) // gate ends: rollout is queued while w1 is away
	testcluster.WaitFor(t, 30*time.Second, "rollout waiting for w1", func() bool {
		r := task("rollout")
		if r.State != client.TaskQueued && r.State != client.TaskPending {
			t.Fatalf("rollout %v on %v while its session's worker w1 is away; want it queued", r.State, r.Attempts)
		}
		return r.State == client.TaskQueued && strings.Contains(r.Reason, "waiting for session s's worker w1 to reconnect")
	})
	c.RestartWorker(0)
	if got := waitGraph(ctx, t, cl, "g"); got.State != client.GraphSucceeded {
		t.Fatalf("graph %v", got)
	}
	if r := task("rollout"); len(r.Attempts) != 1 || r.Attempts[0].WorkerId != "w1" {
		t.Fatalf("rollout attempts %v; want one, on w1", r.Attempts)
	}
}

// A worker restarted while its tasks run takes them over as soon as the
// leader welcomes it, not at its next reconcile round (30 s by default):
// the tasks finish with one attempt each, shortly after they end.
func TestRestartedWorkerTakesOverAtWelcome(t *testing.T) {
	t.Parallel() // it waits for 3 s tasks (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: 3 * time.Second})
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.Submit(ctx, flatGraph("g", 4)); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 10*time.Second, "4 tasks running", func() bool {
		g, _, err := cl.GetGraph(ctx, "g", client.ReadOptions{RequireLeader: true})
		return err == nil && g.Counts.GetRunning() == 4
	})
	c.KillWorker(0)
	c.RestartWorker(0) // same id, same runtime: its containers are still there
	testcluster.WaitFor(t, 15*time.Second, "the graph to finish well before a 30 s reconcile round", func() bool {
		g, _, err := cl.GetGraph(ctx, "g", client.ReadOptions{RequireLeader: true})
		return err == nil && g.State == client.GraphSucceeded
	})
	for _, task := range allTasks(ctx, t, cl, "g") {
		if len(task.Attempts) != 1 {
			t.Fatalf("task %s ran %d attempts; want the container taken over", task.Id, len(task.Attempts))
		}
	}
}

// GPU tasks are placed on a worker's devices by UUID: a 2-GPU task gets
// two, and no device is held by two running attempts at once.
func TestGPUTasksGetDistinctDevices(t *testing.T) {
	t.Parallel() // it waits for tasks of 200 ms (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: 200 * time.Millisecond})
	var devs []*wire.GpuDevice
	for i := range 4 {
		devs = append(devs, &wire.GpuDevice{Uuid: fmt.Sprintf("GPU-%d", i), Model: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30})
	}
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Configure: func(cfg *worker.Config) { cfg.GPUs = devs }})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := flatGraph("gpu", 8)
	for i, task := range g.Tasks {
		task.Resources.Gpus = 1 + int32(i%2)
		task.Resources.GpuModel = "H100"
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	if res := waitGraph(ctx, t, cl, "gpu"); res.State != client.GraphSucceeded {
		t.Fatalf("graph %v", res.State)
	}
	type use struct {
		task       string
		start, end int64
	}
	byDevice := map[string][]use{}
	for _, task := range allTasks(ctx, t, cl, "gpu") {
		a := task.Attempts[len(task.Attempts)-1]
		if len(a.GpuUuids) != int(task.Spec.Resources.Gpus) {
			t.Fatalf("task %s asked for %d GPUs, got %v", task.Id, task.Spec.Resources.Gpus, a.GpuUuids)
		}
		for _, u := range a.GpuUuids {
			byDevice[u] = append(byDevice[u], use{task.Id, a.AssignUnixNanos, a.FinishUnixNanos})
		}
	}
	for dev, uses := range byDevice {
		for i, a := range uses {
			for _, b := range uses[i+1:] {
				if a.start < b.end && b.start < a.end {
					t.Fatalf("device %s held by %s and %s at once", dev, a.task, b.task)
				}
			}
		}
	}
}
