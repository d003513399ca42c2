package testcluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/artifact"
	"github.com/megaflow/megaflow/internal/blob"
	"github.com/megaflow/megaflow/internal/blob/spool"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// A worker restarted while an attempt's artifacts wait in its disk spool
// (the store was down) uploads them once the store is back and clears the
// attempt's artifacts_pending: the old process's watch on them died with
// it, and the new one finds them in the spool.
func TestArtifactsLandAfterAWorkerRestart(t *testing.T) {
	t.Parallel() // it waits for a worker's restart (see internal/testcluster)
	store := artifact.NewMemStore()
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) { cfg.Artifacts = store }})
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: 10 * time.Millisecond, Output: "hello\nMEGAFLOW_RESULT {\"ok\": true}\n"})
	spoolDir := t.TempDir()
	var sp *spool.Spool
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Configure: func(cfg *worker.Config) {
		sc := spool.DefaultConfig(spoolDir) // the same directory at each start, as on a real restart
		sc.MinBackoff, sc.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
		var err error
		if sp, err = spool.New(sc, store); err != nil {
			t.Fatal(err)
		}
		cfg.Artifacts, cfg.Spool = store, sp
	}})
	t.Cleanup(func() { sp.Close() })
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store.SetDown(true)
	if _, err := cl.Submit(ctx, &client.GraphSpec{Id: "g", Tasks: []*client.TaskSpec{{Name: "t", Image: "busybox",
		Command: []string{"/bin/work"}, Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}}}}); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 30*time.Second, "g/t SUCCEEDED with its artifacts pending", func() bool {
		task, _, err := cl.GetTask(ctx, "g/t", client.ReadOptions{RequireLeader: true})
		return err == nil && task.State == client.TaskSucceeded && task.Attempts[0].ArtifactsPending
	})
	c.KillWorker(0)
	sp.Close() // the old process's uploads stop with it
	store.SetDown(false)
	c.RestartWorker(0)
	testcluster.WaitFor(t, 30*time.Second, "the artifacts landed after the restart", func() bool {
		task, _, err := cl.GetTask(ctx, "g/t", client.ReadOptions{RequireLeader: true})
		return err == nil && len(task.Attempts) == 1 && !task.Attempts[0].ArtifactsPending
	})
	if _, err := store.Stat(ctx, artifact.ForTask("default", "g", "g/t", 1).ManifestKey()); err != nil {
		t.Fatalf("the manifest is not in the store: %v", err)
	}
}

// A worker that dies for good after its artifacts landed but before its
// ARTIFACTS_LANDED reached the head (its event queue is in memory): the
// leader finds the manifest in the store and clears artifacts_pending.
func TestLeaderClearsArtifactsPendingFromTheStore(t *testing.T) {
	t.Parallel() // it waits for sweeps (see internal/testcluster)
	store := artifact.NewMemStore()
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) {
		cfg.Artifacts, cfg.ArtifactSweepInterval = store, 50*time.Millisecond
	}})
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: 10 * time.Millisecond, Output: "hello\n"})
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Configure: func(cfg *worker.Config) {
		sc := spool.DefaultConfig(t.TempDir())
		sp, err := spool.New(sc, store)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sp.Close() })
		cfg.Artifacts, cfg.Spool = store, sp
	}})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store.SetDown(true)
	if _, err := cl.Submit(ctx, &client.GraphSpec{Id: "g", Tasks: []*client.TaskSpec{{Name: "t", Image: "busybox",
		Command: []string{"/bin/work"}, Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}}}}); err != nil {
		t.Fatal(err)
	}
	pending := func() bool {
		task, _, err := cl.GetTask(ctx, "g/t", client.ReadOptions{RequireLeader: true})
		return err != nil || task.State != client.TaskSucceeded || task.Attempts[0].ArtifactsPending
	}
	testcluster.WaitFor(t, 30*time.Second, "g/t SUCCEEDED with its artifacts pending", func() bool {
		task, _, err := cl.GetTask(ctx, "g/t", client.ReadOptions{RequireLeader: true})
		return err == nil && task.State == client.TaskSucceeded && task.Attempts[0].ArtifactsPending
	})
	c.KillWorker(0)
	store.SetDown(false)
	if !pending() {
		t.Fatal("artifacts_pending cleared before the manifest was in the store")
	}
	// What the dead worker's spool would have uploaded last.
	key := artifact.ForTask("default", "g", "g/t", 1).ManifestKey()
	if _, err := store.Put(ctx, key, strings.NewReader("{}"), blob.PutOptions{Size: 2}); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 30*time.Second, "the leader clearing artifacts_pending", func() bool { return !pending() })
}
