package head_test

import (
	"context"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// A second worker process announcing an id already in use by a live worker
// is refused; the first keeps its stream and its row in the table. Once the
// first is gone (killed, its stream closed), the id is free again.
func TestDuplicateWorkerIDRefused(t *testing.T) {
	t.Parallel() // it waits out a 2 s window (see internal/testcluster)
	c := testcluster.New(t, testcluster.Options{})
	first := c.AddWorker(testcluster.WorkerOptions{Runtime: fake.New(nil), Configure: func(cfg *worker.Config) {
		cfg.HeartbeatInterval = 50 * time.Millisecond
	}})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	instanceInTable := func() string {
		ws, err := cl.ListWorkers(ctx, client.ReadOptions{RequireLeader: true})
		if err != nil || len(ws) != 1 {
			return ""
		}
		return ws[0].GetInfo().GetInstance()
	}
	testcluster.WaitFor(t, 30*time.Second, "w1 connected", func() bool {
		return first.Worker().Leader() != "" && instanceInTable() == first.Worker().Instance()
	})

	second := c.AddWorker(testcluster.WorkerOptions{Runtime: fake.New(nil), Configure: func(cfg *worker.Config) {
		cfg.NodeID = "w1" // the same id as the first
	}})
	// The second keeps trying and keeps being refused while the first speaks.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); <-tick.C {
		if second.Worker().Leader() != "" {
			t.Fatal("the second worker with id w1 was taken")
		}
		if got := instanceInTable(); got != first.Worker().Instance() {
			t.Fatalf("the table's w1 is instance %q; want the first's %q", got, first.Worker().Instance())
		}
	}
	if first.Worker().Leader() == "" {
		t.Fatal("the first worker lost its stream")
	}
	c.KillWorker(0)
	testcluster.WaitFor(t, 30*time.Second, "the second worker taking over id w1", func() bool {
		return second.Worker().Leader() != "" && instanceInTable() == second.Worker().Instance()
	})
}
