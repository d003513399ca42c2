package testcluster_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	dockerclient "github.com/moby/moby/client"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/artifact"
	"github.com/megaflow/megaflow/internal/blob"
	"github.com/megaflow/megaflow/internal/blob/spool"
	"github.com/megaflow/megaflow/internal/lease"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/docker"
	"github.com/megaflow/megaflow/runtime/testimage"
	"github.com/megaflow/megaflow/worker"
	"github.com/megaflow/megaflow/worker/attempt"
)

// dockerCluster starts 3 heads and n workers on the real Docker Engine. The
// workers' containers carry a cluster label unique to the test, so the test
// can check that none is left behind. Each start of a worker gets a runtime
// of its own, closed when the worker is killed: a restarted worker has
// only the engine to learn from, as after a crash of its process.
func dockerCluster(t *testing.T, n int, configure func(*worker.Config)) (*testcluster.Cluster, *dockerclient.Client, string, string) {
	t.Helper()
	return dockerClusterWithStore(t, n, nil, nil, configure)
}

// dockerClusterWithStore is dockerCluster with an artifact store shared by
// the heads and the workers (nil: none); each worker spools its uploads
// on disk, in a directory that survives its restarts. configureHead, when
// set, edits each head's config.
func dockerClusterWithStore(t *testing.T, n int, store blob.Store, configureHead func(*head.Config), configure func(*worker.Config)) (*testcluster.Cluster, *dockerclient.Client, string, string) {
	t.Helper()
	cli, image := testimage.Require(t)
	cluster := "mft-" + testimage.RunID() + "-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(cluster) > 60 {
		cluster = cluster[:60]
	}
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) {
		// A 10 s lease, not the test cluster's 3 s: the Docker tests load
		// the machine with the engine's work beside -race, and a leader
		// that changes every few seconds there (terms 2 to 31 in one CI
		// run) let 3 s leases lapse and re-ran tasks until their loss
		// budget was spent. Tests about the lease set their own.
		cfg.Lease = lease.Config{Duration: 10 * time.Second, Margin: 2 * time.Second}
		if store != nil {
			cfg.Artifacts = store
		}
		if configureHead != nil {
			configureHead(cfg)
		}
	}})
	initPath := filepath.Join(buildInit(t), "megaflow-init") // PID 1 of every container, as in production
	for range n {
		spoolDir := t.TempDir()
		var sp *spool.Spool
		t.Cleanup(func() {
			if sp != nil {
				sp.Close()
			}
		})
		c.AddWorker(testcluster.WorkerOptions{
			NewRuntime: func() contract.Runtime {
				rt, err := docker.New(docker.DefaultConfig())
				if err != nil {
					t.Fatal(err)
				}
				return rt
			},
			Capacity: worker.Capacity{CPUMillis: 4000, MemoryBytes: 8 << 30},
			Configure: func(cfg *worker.Config) {
				cfg.ClusterName = cluster
				cfg.ReconcileInterval = time.Second
				cfg.StopGrace = 2 * time.Second
				if store != nil {
					if sp != nil {
						sp.Close() // the previous start's, dead with it
					}
					sc := spool.DefaultConfig(spoolDir)
					sc.MinBackoff, sc.MaxBackoff = 10*time.Millisecond, 100*time.Millisecond
					var err error
					if sp, err = spool.New(sc, store); err != nil {
						t.Fatal(err)
					}
					cfg.Artifacts, cfg.Spool = store, sp
				}
				cfg.InitPath = initPath
				if configure != nil {
					configure(cfg)
				}
			}})
	}
	t.Cleanup(func() {
		// Runs after the cluster stopped (cleanups run last-in first-out):
		// nothing of ours may be left on the engine.
		left := containers(t, cli, cluster)
		for _, id := range left {
			_, _ = cli.ContainerRemove(context.Background(), id, dockerclient.ContainerRemoveOptions{Force: true})
		}
		if len(left) > 0 {
			t.Errorf("%d containers with label megaflow.cluster=%s left on the engine", len(left), cluster)
		}
	})
	return c, cli, image, cluster
}

// containers lists the ids of the engine's containers of a cluster.
func containers(t *testing.T, cli *dockerclient.Client, cluster string) []string {
	t.Helper()
	res, err := cli.ContainerList(context.Background(), dockerclient.ContainerListOptions{All: true,
		Filters: make(dockerclient.Filters).Add("label", worker.LabelCluster+"="+cluster)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range res.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

func shTask(name, image, script string) *client.TaskSpec {
	return &client.TaskSpec{Name: name, Image: image, Command: []string{"sh", "-c", script},
		Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}}
}

// TestDockerManyTasksAcrossTwoWorkers: 60 one-line containers spread
// over two workers with room for 40 at once (200 millicores each, 4,000
// per worker), each result the task's own, every container removed. (It
// ran 200, then 100 with room for all at once: the same assertions, more
// engine time, 201 s under a load of 35 here.)
func TestDockerManyTasksAcrossTwoWorkers(t *testing.T) {
	c, cli, image, cluster := dockerCluster(t, 2, nil)
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g := &client.GraphSpec{Id: "many"}
	const n = 60
	for i := range n {
		task := shTask(fmt.Sprintf("t%03d", i), image, fmt.Sprintf(`echo MEGAFLOW_RESULT '{"i": %d}'`, i))
		task.Resources.CpuMillis = 200
		g.Tasks = append(g.Tasks, task)
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	res, err := cl.Wait(ctx, "many")
	if err != nil {
		t.Fatal(err)
	}
	if res.State != client.GraphSucceeded || res.Counts.GetSucceeded() != n {
		t.Fatalf("graph %v", res)
	}
	perWorker := map[string]int{}
	for _, task := range testcluster.Tasks(ctx, t, cl, "many") {
		want := fmt.Sprintf(`{"i": %s}`, strings.TrimLeft(strings.TrimPrefix(task.Id, "many/t"), "0"))
		if want == `{"i": }` {
			want = `{"i": 0}`
		}
		if string(task.Result) != want {
			t.Fatalf("task %s: result %q (want %q)", task.Id, task.Result, want)
		}
		// A start that times out on a busy engine is retried (tasks run
		// at least once): every attempt but the last must have ended
		// without success, and the result is the last one's.
		n := len(task.Attempts)
		for _, a := range task.Attempts[:n-1] {
			if a.State == client.TaskSucceeded {
				t.Fatalf("task %s: attempt %d succeeded but attempt %d ran after it", task.Id, a.Number, n)
			}
			t.Logf("task %s: attempt %d on %s ended %v: %s", task.Id, a.Number, a.WorkerId, a.State, a.Reason)
		}
		if last := task.Attempts[n-1]; last.State != client.TaskSucceeded {
			t.Fatalf("task %s: last attempt %v", task.Id, last)
		}
		perWorker[task.Attempts[n-1].WorkerId]++
	}
	if len(perWorker) != 2 {
		t.Fatalf("tasks per worker %v: want both workers used", perWorker)
	}
	testcluster.WaitFor(t, 30*time.Second, "every container removed", func() bool {
		return len(containers(t, cli, cluster)) == 0
	})
}

func TestDockerOOMTimeoutAndCancel(t *testing.T) {
	c, cli, image, cluster := dockerCluster(t, 1, nil)
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	oom := shTask("oom", image, `x=$(head -c 200m /dev/zero | tr '\0' a); echo never`)
	oom.Resources.MemoryBytes = 32 << 20
	slow := shTask("slow", image, "sleep 60")
	slow.TimeoutSeconds = 2
	if _, err := cl.Submit(ctx, &client.GraphSpec{Id: "limits", Tasks: []*client.TaskSpec{oom, slow}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Wait(ctx, "limits"); err != nil {
		t.Fatal(err)
	}
	got, _, err := cl.GetTask(ctx, "limits/oom", client.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != client.TaskFailed || !strings.Contains(got.Reason, "OOM") {
		t.Fatalf("oom task: %v %q, want FAILED with an OOM reason", got.State, got.Reason)
	}
	// The code says it too, on the task and its attempt, without reading the text.
	if at := got.Attempts[len(got.Attempts)-1]; got.ReasonCode != client.ReasonOOM || at.ReasonCode != client.ReasonOOM {
		t.Fatalf("oom task's reason codes: task %s, attempt %s; want %s", got.ReasonCode, at.ReasonCode, client.ReasonOOM)
	}
	got, _, err = cl.GetTask(ctx, "limits/slow", client.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := got.Attempts[len(got.Attempts)-1]
	if took := time.Duration(a.FinishUnixNanos - a.AssignUnixNanos); got.State != client.TaskTimedOut || took > 7*time.Second {
		t.Fatalf("slow task: %v after %v, want TIMED_OUT within 2 s + 5 s", got.State, took)
	}
	if got.ReasonCode != client.ReasonTimeout || a.ReasonCode != client.ReasonTimeout {
		t.Fatalf("slow task's reason codes: task %s, attempt %s; want %s", got.ReasonCode, a.ReasonCode, client.ReasonTimeout)
	}

	// Cancelling a running graph stops all its containers within 10 s.
	g := &client.GraphSpec{Id: "cancel-me"}
	for i := range 6 {
		g.Tasks = append(g.Tasks, shTask(fmt.Sprintf("s%d", i), image, "sleep 300"))
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 60*time.Second, "6 tasks running", func() bool {
		gr, _, err := cl.GetGraph(ctx, "cancel-me", client.ReadOptions{RequireLeader: true})
		return err == nil && gr.Counts.GetRunning() == 6
	})
	cancelled := time.Now()
	if _, err := cl.CancelGraph(ctx, "cancel-me", "test"); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 10*time.Second, "every container of the cancelled graph stopped", func() bool {
		res, err := cli.ContainerList(ctx, dockerclient.ContainerListOptions{
			Filters: make(dockerclient.Filters).Add("label", worker.LabelCluster+"="+cluster).Add("label", worker.LabelGraph+"=cancel-me")})
		return err == nil && len(res.Items) == 0 // running ones only
	})
	t.Logf("containers stopped %v after the cancel", time.Since(cancelled).Round(time.Millisecond))
	if s0, _, err := cl.GetTask(ctx, "cancel-me/s0", client.ReadOptions{RequireLeader: true}); err != nil || s0.ReasonCode != client.ReasonCancelledByUser {
		t.Fatalf("cancelled task: %v, err %v; want reason code %s", s0.GetReasonCode(), err, client.ReasonCancelledByUser)
	}
	testcluster.WaitFor(t, 30*time.Second, "every container removed", func() bool {
		return len(containers(t, cli, cluster)) == 0
	})
}

// kill of a worker in the middle of 50 running tasks: every task re-runs on
// the other worker and completes, its result recorded once; the killed
// worker, restarted, removes the containers of attempts re-placed meanwhile.
func TestDockerWorkerKilledMidRun(t *testing.T) {
	t.Parallel() // it waits out a lease and tasks of 4 s (see internal/testcluster)
	c, cli, image, cluster := dockerCluster(t, 2, func(cfg *worker.Config) { cfg.MaxConcurrentStarts = 8 })
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g := &client.GraphSpec{Id: "victim"}
	for i := range 50 {
		task := shTask(fmt.Sprintf("t%02d", i), image, `sleep 4; echo MEGAFLOW_RESULT '{"done": true}'`)
		task.Resources.MemoryBytes = 16 << 20
		g.Tasks = append(g.Tasks, task)
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 120*time.Second, "tasks running on both workers", func() bool {
		on := map[string]int{}
		for _, task := range testcluster.Tasks(ctx, t, cl, "victim") {
			if task.State == client.TaskRunning {
				on[task.Attempts[len(task.Attempts)-1].WorkerId]++
			}
		}
		return on["w1"] > 0 && on["w2"] > 0
	})
	c.KillWorker(0)
	res, err := cl.Wait(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	if res.State != client.GraphSucceeded || res.Counts.GetSucceeded() != 50 {
		for _, task := range testcluster.Tasks(ctx, t, cl, "victim") {
			if task.State != client.TaskSucceeded {
				t.Logf("task %s %v %q attempts %v", task.Id, task.State, task.Reason, task.Attempts)
			}
		}
		t.Fatalf("graph %v", res)
	}
	rerun := 0
	for _, task := range testcluster.Tasks(ctx, t, cl, "victim") {
		if string(task.Result) != `{"done": true}` {
			t.Fatalf("task %s result %q", task.Id, task.Result)
		}
		if n := len(task.Attempts); n > 1 {
			rerun++
			if task.Attempts[n-1].WorkerId != "w2" {
				t.Fatalf("task %s finished on %s", task.Id, task.Attempts[n-1].WorkerId)
			}
		}
	}
	if rerun == 0 {
		t.Fatal("no task re-ran after its worker was killed")
	}
	// The killed worker comes back: its stale containers are removed.
	c.RestartWorker(0)
	testcluster.WaitFor(t, 60*time.Second, "no container of ours left", func() bool {
		return len(containers(t, cli, cluster)) == 0
	})
}

// A worker restarted while its tasks run re-adopts their containers: the
// container ids do not change and each task completes once.
func TestDockerWorkerRestartReadopts(t *testing.T) {
	t.Parallel() // it waits for tasks of 6 s (see internal/testcluster)
	c, cli, image, cluster := dockerCluster(t, 1, nil)
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g := &client.GraphSpec{Id: "adopt"}
	for i := range 4 {
		g.Tasks = append(g.Tasks, shTask(fmt.Sprintf("t%d", i), image, `sleep 6; echo MEGAFLOW_RESULT '{"ok": 1}'`))
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 60*time.Second, "4 tasks running", func() bool {
		gr, _, err := cl.GetGraph(ctx, "adopt", client.ReadOptions{RequireLeader: true})
		return err == nil && gr.Counts.GetRunning() == 4
	})
	before := containers(t, cli, cluster)
	c.KillWorker(0)
	c.RestartWorker(0)
	// Once the restarted worker is back on its stream, the same containers
	// run: none was stopped or started again.
	testcluster.WaitFor(t, 30*time.Second, "the worker to reconnect", func() bool {
		return c.Workers()[0].Worker().Leader() != ""
	})
	if after := containers(t, cli, cluster); !sameSet(before, after) {
		t.Fatalf("containers before the restart %v, after %v; want the same ids", before, after)
	}
	res, err := cl.Wait(ctx, "adopt")
	if err != nil {
		t.Fatal(err)
	}
	if res.State != client.GraphSucceeded {
		t.Fatalf("graph %v", res)
	}
	for _, task := range testcluster.Tasks(ctx, t, cl, "adopt") {
		if len(task.Attempts) != 1 || string(task.Result) != `{"ok": 1}` {
			t.Fatalf("task %s: %d attempts, result %q; want one attempt, re-adopted", task.Id, len(task.Attempts), task.Result)
		}
	}
	if len(before) != 4 {
		t.Fatalf("%d containers before the restart, want 4", len(before))
	}
	testcluster.WaitFor(t, 30*time.Second, "the adopted containers removed after they finished", func() bool {
		return len(containers(t, cli, cluster)) == 0
	})
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]bool{}
	for _, x := range a {
		seen[x] = true
	}
	for _, x := range b {
		if !seen[x] {
			return false
		}
	}
	return true
}

// taskLog reads a task's log from the artifact store through the heads,
// once it is complete.
func taskLog(ctx context.Context, t *testing.T, cl *client.Client, taskID string) []byte {
	t.Helper()
	rc := cl.LogsReader(ctx, taskID, client.LogsOptions{Follow: true})
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("logs of %s: %v", taskID, err)
	}
	return b
}

// A task printing 8 MB at once and then its result line: Docker 20.10's
// follow stream of its output ends early (5.9 MB of 8.1 MB were stored and
// the result was lost); the log in the store must hold every byte and the
// result must be recorded.
func TestDockerLargeOutputKeepsEveryByteAndTheResult(t *testing.T) {
	store := artifact.NewMemStore()
	c, cli, image, cluster := dockerClusterWithStore(t, 1, store, nil, nil)
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g := &client.GraphSpec{Id: "big", Tasks: []*client.TaskSpec{
		shTask("t", image, `head -c 6000000 /dev/zero | base64 -w 100; echo MEGAFLOW_RESULT '{"reward": 1}'`)}}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	res, err := cl.Wait(ctx, "big")
	if err != nil || res.State != client.GraphSucceeded {
		t.Fatalf("graph %v, %v", res, err)
	}
	task, _, err := cl.GetTask(ctx, "big/t", client.ReadOptions{RequireLeader: true})
	if err != nil {
		t.Fatal(err)
	}
	if string(task.Result) != `{"reward": 1}` || task.Reason != "" {
		t.Errorf("result %q, reason %q; want the result and no reason", task.Result, task.Reason)
	}
	want := strings.Repeat(strings.Repeat("A", 100)+"\n", 80000) + `MEGAFLOW_RESULT {"reward": 1}` + "\n"
	if got := taskLog(ctx, t, cl, "big/t"); string(got) != want {
		t.Fatalf("stored log: %d bytes, want %d", len(got), len(want))
	}
	testcluster.WaitFor(t, 30*time.Second, "the container removed", func() bool { return len(containers(t, cli, cluster)) == 0 })
}

// A worker killed (its process gone: the runtime's copies of container
// output die with it) under 10 running tasks and restarted on its data
// directory takes their containers over: each task ends with one attempt,
// its result recorded and its log in the store complete, byte for byte,
// including what the containers printed while no worker ran.
func TestDockerWorkerRestartKeepsResultsAndLogs(t *testing.T) {
	t.Parallel() // it waits for tasks of 15 s (see internal/testcluster)
	store := artifact.NewMemStore()
	// The worker is down for a few seconds: within its lease, so that the
	// heads wait for it rather than re-queue its attempts and the
	// containers' init does not end them.
	c, cli, image, cluster := dockerClusterWithStore(t, 1, store, func(cfg *head.Config) {
		cfg.Lease.Duration, cfg.Lease.Margin = time.Minute, 30*time.Second
	}, nil)
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const lines = 150
	g := &client.GraphSpec{Id: "crash"}
	want := map[string]string{}
	for i := range 10 {
		name := fmt.Sprintf("t%d", i)
		// 150 lines over 15 s, a burst of 300 KB, the result.
		script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "%s line $i"; i=$((i+1)); sleep 0.1; done; `+
			`head -c 225000 /dev/zero | base64 -w 100; echo MEGAFLOW_RESULT '{"task": %d}'`, lines, name, i)
		g.Tasks = append(g.Tasks, shTask(name, image, script))
		var b strings.Builder
		for j := range lines {
			fmt.Fprintf(&b, "%s line %d\n", name, j)
		}
		b.WriteString(strings.Repeat(strings.Repeat("A", 100)+"\n", 3000))
		fmt.Fprintf(&b, "MEGAFLOW_RESULT {\"task\": %d}\n", i)
		want["crash/"+name] = b.String()
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 90*time.Second, "10 tasks running and printing", func() bool {
		gr, _, err := cl.GetGraph(ctx, "crash", client.ReadOptions{RequireLeader: true})
		if err != nil || gr.Counts.GetRunning() != 10 {
			return false
		}
		for _, id := range containers(t, cli, cluster) {
			if len(engineLog(t, cli, id)) < 200 {
				return false
			}
		}
		return true
	})
	before := containers(t, cli, cluster)
	c.KillWorker(0)
	printed := map[string]int{}
	for _, id := range before {
		printed[id] = len(engineLog(t, cli, id))
	}
	// Down until every container printed 20 more lines (2 s) that no
	// worker copied.
	testcluster.WaitFor(t, 60*time.Second, "the containers printing while no worker copies their output", func() bool {
		for _, id := range before {
			if len(engineLog(t, cli, id)) < printed[id]+20*len("t0 line 100\n") {
				return false
			}
		}
		return true
	})
	c.RestartWorker(0)
	res, err := cl.Wait(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	if res.State != client.GraphSucceeded {
		t.Fatalf("graph %v", res)
	}
	for _, task := range testcluster.Tasks(ctx, t, cl, "crash") {
		name := strings.TrimPrefix(task.Id, "crash/")
		if len(task.Attempts) != 1 {
			t.Errorf("task %s: %d attempts; want one, re-adopted", task.Id, len(task.Attempts))
		}
		if wantRes := fmt.Sprintf(`{"task": %s}`, strings.TrimPrefix(name, "t")); string(task.Result) != wantRes {
			t.Errorf("task %s: result %q, want %q", task.Id, task.Result, wantRes)
		}
		if got := taskLog(ctx, t, cl, task.Id); string(got) != want[task.Id] {
			t.Errorf("task %s: stored log %d bytes, want %d (%s)", task.Id, len(got), len(want[task.Id]), diffAt(got, []byte(want[task.Id])))
		}
	}
	testcluster.WaitFor(t, 30*time.Second, "the adopted containers removed after they finished", func() bool {
		return len(containers(t, cli, cluster)) == 0
	})
}

// engineLog is the engine's stored output of container id.
func engineLog(t *testing.T, cli *dockerclient.Client, id string) string {
	t.Helper()
	rc, err := cli.ContainerLogs(context.Background(), id, dockerclient.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var b strings.Builder
	if _, err := stdcopy.StdCopy(&b, &b, rc); err != nil {
		return ""
	}
	return b.String()
}

// diffAt says where got first differs from want.
func diffAt(got, want []byte) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			lo := max(i-40, 0)
			return fmt.Sprintf("first difference at byte %d: got %q, want %q", i, got[lo:min(i+40, len(got))], want[lo:min(i+40, len(want))])
		}
	}
	return "one is a prefix of the other"
}

// A stale container holding the name of a task's next attempt does not
// fail the attempt (with max_retries 0 it used to fail the task with
// "container name already in use"): one that is not the worker's (no
// labels) is left alone and the attempt starts under another name; one
// that is the worker's by its labels (cluster name and id, worker id) is
// removed and the attempt takes the name.
func TestDockerStaleContainerWithTheAttemptsName(t *testing.T) {
	t.Parallel() // it waits for the engine (see internal/testcluster)
	c, cli, image, cluster := dockerCluster(t, 1, nil)
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	scope := cluster + "-" + c.Workers()[0].ID
	foreign := worker.ContainerName(scope, attempt.Key{TaskID: "stale/foreign", Attempt: 1})
	ours := worker.ContainerName(scope, attempt.Key{TaskID: "stale/ours", Attempt: 1})
	var foreignID string
	for _, n := range []struct {
		name   string
		labels map[string]string
	}{
		{foreign, map[string]string{"megaflow.test.stale": cluster}},
		{ours, map[string]string{worker.LabelCluster: cluster, worker.LabelWorker: c.Workers()[0].ID,
			worker.LabelClusterID: clusterID(ctx, t, cl), worker.LabelTask: "stale/ours", worker.LabelAttempt: "1"}},
	} {
		res, err := cli.ContainerCreate(ctx, dockerclient.ContainerCreateOptions{Name: n.name,
			Config: &container.Config{Image: image, Cmd: []string{"sleep", "600"}, Labels: n.labels}})
		if err != nil {
			t.Fatal(err)
		}
		if n.name == foreign {
			foreignID = res.ID
		}
	}
	t.Cleanup(func() {
		_, _ = cli.ContainerRemove(context.Background(), foreignID, dockerclient.ContainerRemoveOptions{Force: true})
	})
	g := &client.GraphSpec{Id: "stale"}
	for _, name := range []string{"foreign", "ours"} {
		task := shTask(name, image, `echo MEGAFLOW_RESULT '{"ok": true}'`)
		task.MaxRetries = 0
		g.Tasks = append(g.Tasks, task)
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	res, err := cl.Wait(ctx, "stale")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range testcluster.Tasks(ctx, t, cl, "stale") {
		if task.State != client.TaskSucceeded || string(task.Result) != `{"ok": true}` || len(task.Attempts) != 1 {
			t.Errorf("task %s: %v %q, result %q, %d attempts; want SUCCEEDED at the first attempt", task.Id, task.State, task.Reason, task.Result, len(task.Attempts))
		}
	}
	if res.State != client.GraphSucceeded {
		t.Fatalf("graph %v", res)
	}
	if _, err := cli.ContainerInspect(ctx, foreignID, dockerclient.ContainerInspectOptions{}); err != nil {
		t.Errorf("the container that is not the worker's: %v; want it left alone", err)
	}
	testcluster.WaitFor(t, 30*time.Second, "the worker's stale container and the tasks' removed", func() bool {
		return len(containers(t, cli, cluster)) == 0
	})
}
