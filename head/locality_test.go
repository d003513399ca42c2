package head_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// named is a fake runtime under another name ("docker", "process"), with
// every extra of the fake (Execer, ImageLister) kept by embedding.
type named struct {
	*fake.Runtime
	name string
}

func (n named) Name() string { return n.name }

// workerImages returns the images the table holds for worker id.
func workerImages(ctx context.Context, t *testing.T, cl *client.Client, id string) []string {
	t.Helper()
	ws, err := cl.ListWorkers(ctx, client.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.GetInfo().GetId() == id {
			return w.GetInfo().GetImages()
		}
	}
	return nil
}

// ranOn returns the worker of each task's last attempt, by task name.
func ranOn(ctx context.Context, t *testing.T, cl *client.Client, graph string) map[string]string {
	out := map[string]string{}
	for _, task := range allTasks(ctx, t, cl, graph) {
		if n := len(task.Attempts); n > 0 {
			out[task.GetSpec().GetName()] = task.Attempts[n-1].GetWorkerId()
		}
	}
	return out
}

// Image locality with real data flow: a worker's runtime lists an image
// after the worker started; the worker's refresh advertises it, the leader
// commits it in the worker's row, and the scheduler then puts every task of
// that image on it, although spread alone would use all three workers.
func TestImageLocalityFromRuntimeImages(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	var rts []*fake.Runtime
	for range 3 {
		rt := fake.New(nil)
		rt.Default(fake.Behavior{Duration: time.Millisecond})
		rt.SetImages("busybox:latest")
		rts = append(rts, rt)
		c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Configure: func(cfg *worker.Config) {
			cfg.ImageRefreshInterval = 20 * time.Millisecond
			cfg.HeartbeatInterval = 20 * time.Millisecond
			cfg.MaxConcurrentStarts = 16 // the start cap must not be what spreads the tasks
		}})
	}
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testcluster.WaitFor(t, 20*time.Second, "w1's images in the table", func() bool {
		return slices.Equal(workerImages(ctx, t, cl, "w1"), []string{"busybox:latest"})
	})
	rts[1].SetImages("swe/django:1", "busybox:latest") // w2 "pulled" an image
	testcluster.WaitFor(t, 20*time.Second, "w2's new image in the table", func() bool {
		return slices.Equal(workerImages(ctx, t, cl, "w2"), []string{"busybox:latest", "swe/django:1"})
	})

	g := &client.GraphSpec{Id: "loc"}
	for i := range 6 {
		g.Tasks = append(g.Tasks, &client.TaskSpec{Name: fmt.Sprintf("t%d", i), Image: "swe/django:1",
			Command: []string{"/eval"}, Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}})
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	if got := waitGraph(ctx, t, cl, "loc"); got.State != client.GraphSucceeded {
		t.Fatalf("graph %v", got)
	}
	for name, w := range ranOn(ctx, t, cl, "loc") {
		if w != "w2" {
			t.Errorf("task %s ran on %s; want w2, the only worker holding swe/django:1", name, w)
		}
	}
}

// A task that requires the docker runtime never lands on a process worker,
// even one that is idle and holds its image; a process task goes to the
// process worker; a task naming no runtime may go anywhere.
func TestRuntimeRequirement(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	proc := fake.New(nil)
	proc.Default(fake.Behavior{Duration: time.Millisecond})
	proc.SetImages("swe/django:1")
	dock := fake.New(nil)
	dock.Default(fake.Behavior{Duration: time.Millisecond})
	c.AddWorker(testcluster.WorkerOptions{Runtime: named{proc, "process"}})
	c.AddWorker(testcluster.WorkerOptions{Runtime: named{dock, "docker"}})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	g := &client.GraphSpec{Id: "rt"}
	for i := range 4 {
		g.Tasks = append(g.Tasks, &client.TaskSpec{Name: fmt.Sprintf("d%d", i), Image: "swe/django:1", Runtime: "docker",
			Command: []string{"/eval"}, Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}})
	}
	g.Tasks = append(g.Tasks, &client.TaskSpec{Name: "p", Image: "none", Runtime: "process",
		Command: []string{"/work"}, Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}})
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	if got := waitGraph(ctx, t, cl, "rt"); got.State != client.GraphSucceeded {
		t.Fatalf("graph %v", got)
	}
	on := ranOn(ctx, t, cl, "rt")
	for name, w := range on {
		want := "w2"
		if name == "p" {
			want = "w1"
		}
		if w != want {
			t.Errorf("task %s ran on %s; want %s (w1 runs process, w2 docker)", name, w, want)
		}
	}
	if len(on) != 5 {
		t.Fatalf("ran %v; want 5 tasks", on)
	}
}
