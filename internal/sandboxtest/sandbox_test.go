package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/lease"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/testbin"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/docker"
	"github.com/megaflow/megaflow/runtime/testimage"
	"github.com/megaflow/megaflow/worker"
)

// env is one test's cluster: 3 heads and n Docker workers under
// megaflow-init, each serving sandboxes.
type env struct {
	t       *testing.T
	c       *testcluster.Cluster
	cl      *client.Client
	cli     *dockerclient.Client
	image   string
	cluster string
	// initPath is megaflow-init's, for the workers (buildInit).
	initPath string
}

// buildInit returns the path of megaflow-init (internal/testbin).
func buildInit(t *testing.T) string {
	t.Helper()
	return testbin.Path(t, "megaflow-init")
}

func newEnv(t *testing.T, workers int) *env {
	t.Helper()
	return newEnvWith(t, workers, nil)
}

// newEnvWith is newEnv with configureHead editing each head's config.
func newEnvWith(t *testing.T, workers int, configureHead func(*head.Config)) *env {
	t.Helper()
	return newEnvOpts(t, workers, configureHead, nil, nil)
}

// newEnvOpts is newEnvWith with configureWorker editing each worker's
// config last, and e.cl dialled with clientOpts (nil: the test
// cluster's client).
func newEnvOpts(t *testing.T, workers int, configureHead func(*head.Config), configureWorker func(*worker.Config), clientOpts []client.Option) *env {
	t.Helper()
	cli, image := testimage.Require(t)
	name := "mfs-" + testimage.RunID() + "-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(name) > 60 {
		name = name[:60]
	}
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) {
		// The Docker tests' 10 s lease (internal/testcluster's docker_test.go says why).
		cfg.Lease = lease.Config{Duration: 10 * time.Second, Margin: 2 * time.Second}
		if configureHead != nil {
			configureHead(cfg)
		}
	}})
	e := &env{t: t, c: c, cli: cli, image: image, cluster: name, initPath: buildInit(t)}
	for range workers {
		e.addWorker(configureWorker)
	}
	if clientOpts == nil {
		e.cl = c.Client()
	} else {
		cl, err := client.Dial(context.Background(), c.GRPCAddrs(), clientOpts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		e.cl = cl
	}
	t.Cleanup(func() {
		// Whatever a failed test left running (before the cluster stops).
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, id := range e.containers("") {
			_, _ = cli.ContainerRemove(ctx, id, dockerclient.ContainerRemoveOptions{Force: true})
		}
	})
	return e
}

// addWorker starts one more Docker worker of the test's cluster, serving
// sandboxes, configured by configure (nil: the defaults).
func (e *env) addWorker(configure func(*worker.Config)) *testcluster.WorkerMember {
	t := e.t
	t.Helper()
	return e.c.AddWorker(testcluster.WorkerOptions{
		NewRuntime: func() contract.Runtime {
			rt, err := docker.New(docker.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			return rt
		},
		Capacity: worker.Capacity{CPUMillis: 4000, MemoryBytes: 8 << 30},
		Configure: func(cfg *worker.Config) {
			cfg.ClusterName = e.cluster
			cfg.ReconcileInterval = time.Second
			cfg.StopGrace = 2 * time.Second
			cfg.InitPath = e.initPath
			if configure != nil {
				configure(cfg)
			}
		},
	})
}

// containers returns the engine's containers (running or not) of this
// test's cluster, of sandbox sbx only unless sbx is "".
func (e *env) containers(sbx string) []string {
	e.t.Helper()
	f := make(dockerclient.Filters).Add("label", worker.LabelCluster+"="+e.cluster)
	if sbx != "" {
		f = f.Add("label", worker.LabelTask+"="+spec.SandboxTaskID(sbx))
	}
	res, err := e.cli.ContainerList(context.Background(), dockerclient.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		e.t.Fatal(err)
	}
	var ids []string
	for _, c := range res.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

// create creates a sandbox of the test image and waits until it is READY.
func (e *env) create(ctx context.Context, sp client.SandboxSpec) *client.Sandbox {
	e.t.Helper()
	sp.Image = e.image
	if sp.WaitReady == 0 {
		sp.WaitReady = 2 * time.Minute
	}
	s, err := e.cl.CreateSandbox(ctx, sp)
	if err != nil {
		e.t.Fatalf("CreateSandbox: %v", err)
	}
	if st := s.Info().GetState(); st != client.SandboxReady || s.Info().GetWorkerId() == "" || s.Info().GetReadyUnixNanos() == 0 {
		e.t.Fatalf("created sandbox %s is %s on %q (ready at %d); want READY on a worker", s.ID(), st, s.Info().GetWorkerId(), s.Info().GetReadyUnixNanos())
	}
	if n := len(e.containers(s.ID())); n != 1 {
		e.t.Fatalf("sandbox %s has %d containers; want 1", s.ID(), n)
	}
	return s
}

// waitState waits until the sandbox is in state want and returns it.
func (e *env) waitState(ctx context.Context, s *client.Sandbox, want client.SandboxState, timeout time.Duration) *client.SandboxInfo {
	e.t.Helper()
	var last *client.SandboxInfo
	testcluster.WaitFor(e.t, timeout, fmt.Sprintf("sandbox %s to be %s", s.ID(), want), func() bool {
		info, err := s.Refresh(ctx)
		if err != nil {
			e.t.Fatalf("GetSandbox: %v", err)
		}
		last = info
		return info.GetState() == want
	})
	return last
}

// waitGone waits until the engine holds no container of the sandbox.
func (e *env) waitGone(s *client.Sandbox, timeout time.Duration) {
	e.t.Helper()
	testcluster.WaitFor(e.t, timeout, "the container of sandbox "+s.ID()+" to be removed", func() bool {
		return len(e.containers(s.ID())) == 0
	})
}

func sh(script string) []string { return []string{"sh", "-c", script} }

// Create, exec (output apart, exit code, stdin, env, cwd), files written
// and read back, a missing file, 8 execs at once, then close: CLOSED, the
// container gone from the engine, and an exec refused saying why.
func TestSandboxExecFilesAndClose(t *testing.T) {
	t.Parallel() // it waits for the engine (see internal/testcluster)
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.create(ctx, client.SandboxSpec{Env: map[string]string{"GREETING": "hi"}, WorkingDir: "/tmp"})

	res, err := s.Exec(ctx, sh(`echo "$GREETING out"; pwd; echo err >&2; exit 3`), client.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || string(res.Stdout) != "hi out\n/tmp\n" || string(res.Stderr) != "err\n" || res.TimedOut || res.Truncated {
		t.Fatalf("exec: %+v (stdout %q, stderr %q); want exit 3, stdout \"hi out\\n/tmp\\n\", stderr \"err\\n\"", res, res.Stdout, res.Stderr)
	}
	res, err = s.Exec(ctx, []string{"cat"}, client.ExecOptions{Stdin: []byte("from stdin"), Env: map[string]string{"X": "1"}, Cwd: "/"})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "from stdin" {
		t.Fatalf("cat with stdin: %+v, %v", res, err)
	}

	data := []byte("print('hello')\n\x00binary\xff")
	if err := s.WriteFile(ctx, "/work/dir/main.py", data, 0o755); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	got, err := s.ReadFile(ctx, "/work/dir/main.py")
	if err != nil || string(got) != string(data) {
		t.Fatalf("ReadFile: %q, %v; want %q", got, err, data)
	}
	res, err = s.Exec(ctx, sh(`stat -c %a /work/dir/main.py; wc -c < /work/dir/main.py`), client.ExecOptions{})
	if err != nil || strings.Fields(string(res.Stdout))[0] != "755" || strings.TrimSpace(strings.Fields(string(res.Stdout))[1]) != fmt.Sprint(len(data)) {
		t.Fatalf("the written file as the sandbox sees it: %q, %v; want mode 755 and %d bytes", res.Stdout, err, len(data))
	}
	// A 10 MiB file crosses every hop (client -> head -> worker and back,
	// read in 1 MiB chunks) whole.
	big := make([]byte, 10<<20)
	for i := range big {
		big[i] = byte(i * 7 % 251)
	}
	if err := s.WriteFile(ctx, "/tmp/big.bin", big, 0); err != nil {
		t.Fatalf("WriteFile of 10 MiB: %v", err)
	}
	if got, err := s.ReadFile(ctx, "/tmp/big.bin"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("ReadFile of 10 MiB: %d bytes, %v; want the same 10 MiB", len(got), err)
	}
	if _, err := s.ReadFile(ctx, "/no/such/file"); !errors.Is(err, errs.ErrNotFound) || errs.ReasonOf(err) != client.ReasonFileNotFound {
		t.Fatalf("reading a missing file: %v; want NotFound", err)
	}

	// 8 execs at once: each marks itself, then waits for all 8 marks,
	// which only happens when they run together.
	var wg sync.WaitGroup
	results := make([]*client.ExecResult, 8)
	errors8 := make([]error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errors8[i] = s.Exec(ctx, sh(`mkdir -p /tmp/c; touch /tmp/c/$I
for k in $(seq 300); do [ "$(ls /tmp/c | wc -l)" -ge 8 ] && { echo "ok $I"; exit 0; }; sleep 0.1; done; echo "alone $I"; exit 1`),
				client.ExecOptions{Env: map[string]string{"I": fmt.Sprint(i)}, Timeout: time.Minute})
		}()
	}
	wg.Wait()
	for i := range 8 {
		if errors8[i] != nil || results[i].ExitCode != 0 || string(results[i].Stdout) != fmt.Sprintf("ok %d\n", i) {
			t.Fatalf("concurrent exec %d: %+v, %v", i, results[i], errors8[i])
		}
	}

	// Any head relays: an exec through each head alone (a fresh client
	// knowing one address, no leader among them needed).
	for _, addr := range e.c.GRPCAddrs() {
		one, err := client.Dial(ctx, []string{addr})
		if err != nil {
			t.Fatal(err)
		}
		hs, err := one.GetSandbox(ctx, s.ID())
		if err != nil {
			t.Fatalf("GetSandbox through head %s: %v", addr, err)
		}
		res, err := hs.Exec(ctx, []string{"echo", addr}, client.ExecOptions{})
		one.Close()
		if err != nil || string(res.Stdout) != addr+"\n" {
			t.Fatalf("exec through head %s: %+v, %v", addr, res, err)
		}
	}

	list, err := e.cl.ListSandboxes(ctx, "", false)
	if err != nil || len(list) != 1 || list[0].GetId() != s.ID() {
		t.Fatalf("ListSandboxes: %v, %v; want the one sandbox", list, err)
	}

	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st := s.Info().GetState(); st != client.SandboxClosed {
		t.Fatalf("after Close: %s; want CLOSED", st)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("a second Close: %v; want none (idempotent)", err)
	}
	e.waitGone(s, time.Minute)
	_, err = s.Exec(ctx, []string{"true"}, client.ExecOptions{})
	if !errors.Is(err, errs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "CLOSED") || errs.ReasonOf(err) != client.ReasonSandboxClosed {
		t.Fatalf("exec after close: %v (reason %q); want FailedPrecondition saying CLOSED, reason %s", err, errs.ReasonOf(err), client.ReasonSandboxClosed)
	}
	if _, err := e.cl.GetSandbox(ctx, "sbx-nosuchsandbox"); !errors.Is(err, errs.ErrNotFound) || errs.ReasonOf(err) != client.ReasonSandboxNotFound {
		t.Fatalf("GetSandbox of an unknown id: %v; want NotFound, reason %s", err, client.ReasonSandboxNotFound)
	}
	if list, _ := e.cl.ListSandboxes(ctx, "", false); len(list) != 0 {
		t.Fatalf("ListSandboxes after close: %v; want none live", list)
	}
}

// An exec past its timeout is killed with its process group: a background
// child it started is gone too, and the sandbox stays READY.
func TestSandboxExecTimeoutKillsGroup(t *testing.T) {
	t.Parallel() // it waits out an exec timeout (see internal/testcluster)
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.create(ctx, client.SandboxSpec{})
	start := time.Now()
	res, err := s.Exec(ctx, sh(`sleep 300 & echo $! > /tmp/bg; echo started; wait`), client.ExecOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.ExitCode != 137 || string(res.Stdout) != "started\n" {
		t.Fatalf("exec past its timeout: %+v (stdout %q); want timed out, exit 137", res, res.Stdout)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the timed-out exec returned after %v", d)
	}
	res, err = s.Exec(ctx, sh(`P=$(cat /tmp/bg); for k in $(seq 100); do kill -0 $P 2>/dev/null || { echo gone; exit 0; }; sleep 0.1; done; echo alive; ps`), client.ExecOptions{})
	if err != nil || string(res.Stdout) != "gone\n" {
		t.Fatalf("the timed-out exec's background child: %q, %v; want gone", res.Stdout, err)
	}
	if info, err := s.Refresh(ctx); err != nil || info.GetState() != client.SandboxReady {
		t.Fatalf("after a timed-out exec: %v, %v; want READY", info, err)
	}
	// Output past 16 MiB per stream is dropped, and the exit says so.
	res, err = s.Exec(ctx, sh(`head -c 17000000 /dev/zero; echo small >&2`), client.ExecOptions{})
	if err != nil || !res.Truncated || len(res.Stdout) != spec.SandboxMaxOutput || string(res.Stderr) != "small\n" || res.ExitCode != 0 {
		t.Fatalf("17 MB of output: %v, %d bytes of stdout, stderr %q, truncated %v, exit %d; want 16 MiB kept, truncated", err, len(res.Stdout), res.Stderr, res.Truncated, res.ExitCode)
	}
}

// A sandbox idle past its idle timeout ends EXPIRED (SANDBOX_IDLE) and its
// container is removed; one past its lifetime ends EXPIRED
// (CANCELLED_DEADLINE) the same way. A running exec keeps a sandbox busy.
func TestSandboxExpiry(t *testing.T) {
	t.Parallel() // it waits out a lifetime and an idle timeout (see internal/testcluster)
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The lifetime counts from the create, so it must outlast the create
	// (3 s did not, on a loaded machine): 10 s, overlapping what follows.
	life := e.create(ctx, client.SandboxSpec{Lifetime: 10 * time.Second})
	idle := e.create(ctx, client.SandboxSpec{IdleTimeout: 2 * time.Second})
	// Busy for 4 s, twice the idle timeout: not expired meanwhile.
	res, err := idle.Exec(ctx, sh(`sleep 4; echo done`), client.ExecOptions{})
	if err != nil || string(res.Stdout) != "done\n" {
		t.Fatalf("a 4 s exec in a sandbox with a 2 s idle timeout: %+v, %v", res, err)
	}

	info := e.waitState(ctx, idle, client.SandboxExpired, time.Minute)
	if info.GetReasonCode() != wire.ReasonCode_REASON_CODE_SANDBOX_IDLE || !strings.Contains(info.GetReason(), "idle") {
		t.Fatalf("idle sandbox: %s %s %q; want EXPIRED, SANDBOX_IDLE, saying idle", info.GetState(), info.GetReasonCode(), info.GetReason())
	}
	info = e.waitState(ctx, life, client.SandboxExpired, time.Minute)
	if info.GetReasonCode() != wire.ReasonCode_REASON_CODE_CANCELLED_DEADLINE {
		t.Fatalf("sandbox past its lifetime: %s %s %q; want EXPIRED, CANCELLED_DEADLINE", info.GetState(), info.GetReasonCode(), info.GetReason())
	}
	e.waitGone(idle, time.Minute)
	e.waitGone(life, time.Minute)
	_, err = idle.Exec(ctx, []string{"true"}, client.ExecOptions{})
	if !errors.Is(err, errs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "EXPIRED") || !strings.Contains(err.Error(), "SANDBOX_IDLE") ||
		errs.ReasonOf(err) != client.ReasonSandboxExpired {
		t.Fatalf("exec in an expired sandbox: %v; want FailedPrecondition saying EXPIRED and SANDBOX_IDLE", err)
	}
}

// A sandbox whose worker dies is LOST (SANDBOX_LOST), never re-run on
// another worker; once the worker is back, it removes the container.
func TestSandboxWorkerLost(t *testing.T) {
	t.Parallel() // it waits out a 10 s lease (see internal/testcluster)
	e := newEnv(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.create(ctx, client.SandboxSpec{})
	if _, err := s.Exec(ctx, sh(`echo state > /tmp/state`), client.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	idx := -1
	for i, w := range e.c.Workers() {
		if w.ID == s.Info().GetWorkerId() {
			idx = i
		}
	}
	e.c.KillWorker(idx)
	// Until the heads declare the worker down (its 10 s lease) the
	// sandbox is still READY in the table: an exec reaches no worker and
	// says so, without a retry.
	_, err := s.Exec(ctx, []string{"true"}, client.ExecOptions{})
	if !errors.Is(err, errs.ErrUnavailable) || errs.ReasonOf(err) != client.ReasonWorkerUnreachable {
		t.Fatalf("exec while its worker is dead: %v (reason %q); want Unavailable, %s", err, errs.ReasonOf(err), client.ReasonWorkerUnreachable)
	}
	info := e.waitState(ctx, s, client.SandboxLost, 2*time.Minute)
	if info.GetReasonCode() != wire.ReasonCode_REASON_CODE_SANDBOX_LOST {
		t.Fatalf("after its worker died: %s %s %q; want LOST, SANDBOX_LOST", info.GetState(), info.GetReasonCode(), info.GetReason())
	}
	task, _, err := e.cl.GetTask(ctx, spec.SandboxTaskID(s.ID()), client.ReadOptions{})
	if err != nil || len(task.GetAttempts()) != 1 {
		t.Fatalf("the lost sandbox's task: %v, %v; want exactly 1 attempt (never re-run)", task, err)
	}
	if n := len(e.containers(s.ID())); n != 1 {
		t.Fatalf("while its worker is dead the container is still there (%d); want 1", n)
	}
	e.c.RestartWorker(idx)
	e.waitGone(s, 2*time.Minute)
}

// A worker that crashes and comes back before it is declared down adopts
// its sandbox: still READY, its files kept, and its idle timer still runs
// (from the container's label) and ends it EXPIRED.
func TestSandboxAdoptedKeepsIdleTimer(t *testing.T) {
	t.Parallel() // it waits out an idle timeout (see internal/testcluster)
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.create(ctx, client.SandboxSpec{IdleTimeout: 4 * time.Second})
	if err := s.WriteFile(ctx, "/tmp/kept", []byte("kept"), 0); err != nil {
		t.Fatal(err)
	}
	e.c.KillWorker(0)
	e.c.RestartWorker(0)
	// Busy with an exec as soon as the restarted worker serves it again,
	// so that the idle timer is what ends it afterwards.
	var got []byte
	testcluster.WaitFor(t, time.Minute, "the restarted worker to serve the sandbox", func() bool {
		b, err := s.ReadFile(ctx, "/tmp/kept")
		got = b
		return err == nil
	})
	if string(got) != "kept" {
		t.Fatalf("file after the worker's restart: %q", got)
	}
	info := e.waitState(ctx, s, client.SandboxExpired, time.Minute)
	if info.GetReasonCode() != wire.ReasonCode_REASON_CODE_SANDBOX_IDLE {
		t.Fatalf("adopted sandbox: %s %s %q; want EXPIRED, SANDBOX_IDLE", info.GetState(), info.GetReasonCode(), info.GetReason())
	}
	e.waitGone(s, time.Minute)
}

// Each exec is charged to the sandbox's tenant's API rate limit at the
// head relaying it: past the burst, ResourceExhausted with a retry-after,
// and the command does not run.
func TestSandboxExecRateLimited(t *testing.T) {
	t.Parallel() // it waits for the engine (see internal/testcluster)
	e := newEnvWith(t, 1, func(cfg *head.Config) { cfg.RateLimit, cfg.RateBurst = 0.01, 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.create(ctx, client.SandboxSpec{Tenant: "rl"}) // one call: the create
	for i := range 2 {
		if _, err := s.Exec(ctx, sh(`echo x >> /tmp/runs`), client.ExecOptions{}); err != nil {
			t.Fatalf("exec %d within the burst: %v", i, err)
		}
	}
	_, err := s.Exec(ctx, sh(`echo x >> /tmp/runs`), client.ExecOptions{})
	var ee *errs.Error
	if !errors.As(err, &ee) || ee.Class != errs.ResourceExhausted || ee.RetryAfter <= 0 || !strings.Contains(err.Error(), "tenant rl") {
		t.Fatalf("exec past the burst: %v; want ResourceExhausted for tenant rl with a retry-after", err)
	}
	// The runs, read without a charge: straight from the engine.
	ids := e.containers(s.ID())
	if len(ids) != 1 {
		t.Fatalf("%d containers", len(ids))
	}
	res, err := e.cli.ContainerStatPath(ctx, ids[0], dockerclient.ContainerStatPathOptions{Path: "/tmp/runs"})
	if err != nil || res.Stat.Size != 4 {
		t.Fatalf("/tmp/runs: %+v, %v; want 2 runs (4 bytes): the refused exec did not run", res, err)
	}
}
