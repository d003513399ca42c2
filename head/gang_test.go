package head_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// A gang across two workers starts all at once or not at all: while one
// worker is full, no task of it is placed; once both have room, each task
// runs on its own worker with its rank, the gang's size and its peers'
// hosts. When one task's attempt fails, the other is stopped and the gang
// starts again as a whole.
func TestGangStartsTogetherAndRestartsWhole(t *testing.T) {
	t.Parallel() // it waits for its cluster (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	var mu sync.Mutex
	envs := map[string]map[string]string{} // task/attempt -> env of its start
	for range 2 {
		rt := fake.New(nil)
		rt.OnFunc(func(s contract.Spec) (fake.Behavior, bool) {
			id, attempt := s.Env["MEGAFLOW_TASK_ID"], s.Env["MEGAFLOW_ATTEMPT"]
			switch {
			case id == "blocker/b":
				return fake.Behavior{Hang: true}, true
			case strings.HasPrefix(id, "g/"):
				mu.Lock()
				envs[id+"/"+attempt] = s.Env
				mu.Unlock()
				if id == "g/rank-0" && attempt == "1" {
					return fake.Behavior{Duration: 200 * time.Millisecond, ExitCode: 3}, true
				}
				if attempt == "1" {
					return fake.Behavior{Hang: true}, true // waits for its peer, as NCCL would
				}
				return fake.Behavior{Duration: 10 * time.Millisecond}, true
			}
			return fake.Behavior{}, false
		})
		c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Capacity: worker.Capacity{CPUMillis: 2000, MemoryBytes: 4 << 30}})
	}
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := &client.Resources{CpuMillis: 1500, MemoryBytes: 1 << 30}
	// The blocker fills one worker.
	if _, err := cl.Submit(ctx, &client.GraphSpec{Id: "blocker", Tasks: []*client.TaskSpec{
		{Name: "b", Image: "busybox", Command: []string{"/bin/block"}, Resources: res}}}); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 30*time.Second, "the blocker running", func() bool {
		task, _, err := cl.GetTask(ctx, "blocker/b", client.ReadOptions{RequireLeader: true})
		return err == nil && task.State == client.TaskRunning
	})
	g := &client.GraphSpec{Id: "g"}
	for _, name := range []string{"rank-10", "rank-0"} { // ranks follow names, digits as numbers
		g.Tasks = append(g.Tasks, &client.TaskSpec{Name: name, Image: "busybox", Command: []string{"/bin/train"},
			Resources: res, Gang: "train", MaxRetries: 1})
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 30*time.Second, "the gang waiting for a second worker", func() bool {
		for _, task := range allTasks(ctx, t, cl, "g") {
			if len(task.Attempts) > 0 {
				t.Fatalf("task %s placed while its gang cannot start whole: %v", task.Id, task.Attempts)
			}
			if !strings.Contains(task.Reason, `gang "train": 1 of its 2 tasks`) {
				return false
			}
		}
		return true
	})
	if _, err := cl.CancelGraph(ctx, "blocker", "make room"); err != nil {
		t.Fatal(err)
	}
	if got := waitGraph(ctx, t, cl, "g"); got.State != client.GraphSucceeded {
		t.Fatalf("graph %v", got)
	}
	tasks := map[string]*client.Task{}
	for _, task := range allTasks(ctx, t, cl, "g") {
		tasks[task.Id] = task
		if len(task.Attempts) != 2 {
			t.Fatalf("task %s ran %d attempts; want 2 (the gang restarted once): %v", task.Id, len(task.Attempts), task.Attempts)
		}
	}
	if a := tasks["g/rank-10"].Attempts[0]; a.State != wire.TaskState_TASK_STATE_CANCELLED || !strings.Contains(a.Reason, `gang "train" restarts: task "rank-0": exit code 3`) {
		t.Fatalf("rank-10's first attempt %v %q; want stopped for the gang's restart", a.State, a.Reason)
	}
	for n := range 2 {
		if w0, w1 := tasks["g/rank-0"].Attempts[n].WorkerId, tasks["g/rank-10"].Attempts[n].WorkerId; w0 == w1 {
			t.Fatalf("attempt %d: both tasks of the gang on %s; want one worker each", n+1, w0)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, rank := range map[string]string{"g/rank-0": "0", "g/rank-10": "1"} {
		for _, attempt := range []string{"1", "2"} {
			env := envs[id+"/"+attempt]
			want := map[string]string{"MEGAFLOW_GANG": "train", "MEGAFLOW_GANG_RANK": rank, "MEGAFLOW_GANG_SIZE": "2",
				"MEGAFLOW_GANG_HOSTS": "127.0.0.1,127.0.0.1", "MEGAFLOW_GANG_LEADER_HOST": "127.0.0.1"}
			for k, v := range want {
				if env[k] != v {
					t.Errorf("%s attempt %s: %s=%q; want %q", id, attempt, k, env[k], v)
				}
			}
		}
	}
}

// A gang of two 8-GPU tasks on two 8-GPU workers: each task gets every
// device of its own worker, pinned by UUID.
func TestGPUGangTakesAWholeWorkerEach(t *testing.T) {
	t.Parallel() // it waits for its cluster (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	var mu sync.Mutex
	pinned := map[string][]string{} // task -> the GPUs its container was given
	for w := range 2 {
		rt := fake.New(nil)
		rt.OnFunc(func(s contract.Spec) (fake.Behavior, bool) {
			mu.Lock()
			pinned[s.Env["MEGAFLOW_TASK_ID"]] = s.GPUUUIDs
			mu.Unlock()
			return fake.Behavior{Duration: 10 * time.Millisecond}, true
		})
		var devs []*wire.GpuDevice
		for i := range 8 {
			d := &wire.GpuDevice{Uuid: fmt.Sprintf("GPU-w%d-%d", w, i), Model: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30}
			for j := range 8 { // one NVSwitch: every device linked to every other
				if j != i {
					d.NvlinkPeers = append(d.NvlinkPeers, fmt.Sprintf("GPU-w%d-%d", w, j))
				}
			}
			devs = append(devs, d)
		}
		c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Configure: func(cfg *worker.Config) { cfg.GPUs = devs }})
	}
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := &client.GraphSpec{Id: "train"}
	for _, name := range []string{"node-0", "node-1"} {
		g.Tasks = append(g.Tasks, &client.TaskSpec{Name: name, Image: "trainer", Command: []string{"torchrun"}, Gang: "fsdp",
			Resources: &client.Resources{CpuMillis: 1000, MemoryBytes: 1 << 30, Gpus: 8, GpuModel: "H100"}})
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	if res := waitGraph(ctx, t, cl, "train"); res.State != client.GraphSucceeded {
		t.Fatalf("graph %v", res.State)
	}
	workers := map[string]bool{}
	mu.Lock()
	defer mu.Unlock()
	for _, task := range allTasks(ctx, t, cl, "train") {
		a := task.Attempts[0]
		workers[a.WorkerId] = true
		own := fmt.Sprintf("GPU-w%d-", mustAtoi(t, strings.TrimPrefix(a.WorkerId, "w"))-1) // worker w1 has GPU-w0-*
		if len(a.GpuUuids) != 8 {
			t.Fatalf("task %s got GPUs %v; want 8", task.Id, a.GpuUuids)
		}
		for _, u := range a.GpuUuids {
			if !strings.HasPrefix(u, own) {
				t.Fatalf("task %s on %s got GPU %s of another worker", task.Id, a.WorkerId, u)
			}
		}
		if got, want := strings.Join(pinned[task.Id], ","), strings.Join(a.GpuUuids, ","); got != want {
			t.Fatalf("task %s: its container was given GPUs %s; its attempt holds %s", task.Id, got, want)
		}
	}
	if len(workers) != 2 {
		t.Fatalf("the gang ran on %v; want one worker each", workers)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
