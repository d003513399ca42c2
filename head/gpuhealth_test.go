package head_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/gpu"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/internal/within"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// An NVML XID critical error on the GPU of a running attempt (go-nvml's
// mock behind the real gpu.Watcher) marks the GPU unhealthy in the table,
// fails the attempt with the XID in its reason, and re-places the task on
// the worker's healthy GPU; the unhealthy GPU gets no new work.
func TestXIDFailsAndReplacesTheRunningAttempt(t *testing.T) {
	t.Parallel() // it waits for its cluster (see internal/testcluster)
	s, err := server.New(server.WithGPUs(gpus.Multiple(2, gpus.H100_SXM5_80GB)...), server.WithDriverVersion("550.54.15"))
	if err != nil {
		t.Fatal(err)
	}
	xid := make(chan nvml.EventData, 1)
	set := &mock.EventSet{FreeFunc: func() nvml.Return { return nvml.SUCCESS }}
	var devs []*wire.GpuDevice
	byUUID := map[string]*server.Device{}
	for _, d := range s.Devices {
		d := d.(*server.Device)
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypeXidCriticalError, nvml.SUCCESS }
		d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
		devs = append(devs, &wire.GpuDevice{Uuid: d.UUID, Model: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30})
		byUUID[d.UUID] = d
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	s.EventSetWaitFunc = func(_ nvml.EventSet, ms uint32) (nvml.EventData, nvml.Return) {
		select {
		case e := <-xid:
			return e, nvml.SUCCESS
		case <-time.After(time.Duration(ms) * time.Millisecond):
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
	watcher, err := gpu.NewWatcher(s, gpu.WatcherConfig{WaitTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	health := make(chan worker.GPUHealthEvent)
	adapted := make(chan struct{})
	go func() { // the adapter megaflow-worker runs
		defer close(adapted)
		for ev := range watcher.Events() {
			health <- worker.GPUHealthEvent(ev)
		}
	}()

	c := testcluster.New(t, testcluster.Options{})
	t.Cleanup(func() { // after the cluster stopped (cleanups run last in, first out)
		watcher.Stop()
		go func() {
			for range health {
			}
		}()
		within.Recv(t, 30*time.Second, adapted, "the GPU health adapter to end once the watcher stopped")
		close(health)
	})
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: time.Hour}) // runs until stopped
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Configure: func(cfg *worker.Config) {
		cfg.GPUs = devs
		cfg.Capacity.GPUs = 2
		cfg.GPUHealth = health
	}})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.Submit(ctx, &client.GraphSpec{Id: "train", Tasks: []*client.TaskSpec{{Name: "fsdp", Image: "trainer:1",
		Command: []string{"/train"}, Resources: &client.Resources{CpuMillis: 100, Gpus: 1}}}}); err != nil {
		t.Fatal(err)
	}
	task := func() *client.Task {
		tk, _, err := cl.GetTask(ctx, "train/fsdp", client.ReadOptions{RequireLeader: true})
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	testcluster.WaitFor(t, 30*time.Second, "the task running", func() bool { return task().State == client.TaskRunning })
	first := task().Attempts[0].GetGpuUuids()
	if len(first) != 1 {
		t.Fatalf("attempt 1 holds GPUs %v", first)
	}
	bad := first[0]
	xid <- nvml.EventData{Device: byUUID[bad], EventType: nvml.EventTypeXidCriticalError, EventData: 79}

	testcluster.WaitFor(t, 30*time.Second, "attempt 2 running", func() bool {
		tk := task()
		return len(tk.Attempts) == 2 && tk.State == client.TaskRunning
	})
	tk := task()
	a1, a2 := tk.Attempts[0], tk.Attempts[1]
	if !strings.Contains(a1.GetReason(), "GPU "+bad+" unhealthy: XID 79 critical error") || a1.GetState() == wire.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("attempt 1: %s %q; want it ended with the XID reason", a1.GetState(), a1.GetReason())
	}
	if g := a2.GetGpuUuids(); len(g) != 1 || g[0] == bad {
		t.Fatalf("attempt 2 holds %v; want the healthy GPU, not %s", g, bad)
	}
	if tk.GetRetriesUsed() != 0 {
		t.Fatalf("retries used %d; a GPU failure is a lost attempt, not the task's failure", tk.GetRetriesUsed())
	}
	ws, err := cl.ListWorkers(ctx, client.ReadOptions{RequireLeader: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ws[0].GetInfo().GetGpus() {
		if want := d.GetUuid() == bad; (d.GetUnhealthy() != "") != want {
			t.Fatalf("GPU %s unhealthy %q in the table; want unhealthy: %v", d.GetUuid(), d.GetUnhealthy(), want)
		}
	}

	// The unhealthy GPU gets no new work: a second GPU task waits.
	if _, err := cl.Submit(ctx, &client.GraphSpec{Id: "more", Tasks: []*client.TaskSpec{{Name: "t", Image: "trainer:1",
		Command: []string{"/train"}, Resources: &client.Resources{CpuMillis: 100, Gpus: 1}}}}); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 30*time.Second, "a queueing reason for the second task", func() bool {
		tk, _, err := cl.GetTask(ctx, "more/t", client.ReadOptions{RequireLeader: true})
		return err == nil && tk.State == client.TaskQueued && tk.Reason != ""
	})
}
