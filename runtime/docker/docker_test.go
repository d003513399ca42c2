package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/testimage"
)

// TestMain removes the containers the tests left (label megaflow.test.run of
// this binary) and fails the run when there were any.
func TestMain(m *testing.M) {
	code := m.Run()
	if rt, err := New(Config{}); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		left, err := testimage.Sweep(ctx, rt.Client())
		cancel()
		if err == nil && len(left) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: tests left containers behind: %v\n", left)
			code = 1
		}
		rt.Close()
	}
	os.Exit(code)
}

// env is one test's runtime and image.
type env struct {
	t     *testing.T
	rt    *Runtime
	image string
	dir   string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	_, tag := testimage.Require(t)
	// The runtime logs into the test's output: a failure shows what it saw.
	rt, err := New(Config{CallTimeout: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return &env{t: t, rt: rt, image: tag, dir: t.TempDir()}
}

// fresh returns another runtime on the same engine, closed at the end of
// the test (a worker process before its crash, say).
func (e *env) fresh() *Runtime {
	e.t.Helper()
	rt, err := New(Config{CallTimeout: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(e.t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { rt.Close() })
	return rt
}

var nameRE = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// spec returns a spec named after the test and suffix, labelled as a test
// container, logging into the test's directory.
func (e *env) spec(suffix string, cmd ...string) contract.Spec {
	name := nameRE.ReplaceAllString(fmt.Sprintf("mf-%s-%s-%s", testimage.RunID(), e.t.Name(), suffix), "-")
	return contract.Spec{
		Name:    name,
		Image:   e.image,
		Command: cmd,
		Labels:  testimage.Labels(map[string]string{"megaflow.test.name": e.t.Name()}),
		LogPath: filepath.Join(e.dir, suffix+".log"),
	}
}

// start starts spec and removes the container when the test ends.
func (e *env) start(spec contract.Spec) string {
	e.t.Helper()
	id, err := e.rt.Start(context.Background(), spec)
	if err != nil {
		e.t.Fatalf("Start %s: %v", spec.Name, err)
	}
	e.t.Cleanup(func() {
		if err := e.rt.Remove(context.Background(), id); err != nil {
			e.t.Errorf("Remove %s: %v", spec.Name, err)
		}
	})
	return id
}

func (e *env) wait(id string) contract.Exit {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exit, err := e.rt.Wait(ctx, id)
	if err != nil {
		e.t.Fatalf("Wait: %v", err)
	}
	return exit
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStartWaitSuccess(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("ok", "sh", "-c", "echo to-stdout; echo to-stderr >&2; echo $GREETING")
	spec.Env = map[string]string{"GREETING": "hello"}
	before := time.Now()
	id := e.start(spec)
	exit := e.wait(id)
	if exit.Code != 0 || exit.OOMKilled {
		t.Fatalf("exit %+v, want code 0", exit)
	}
	// The engine stamps start and finish from different clocks (a quick
	// exit can read as finishing a millisecond before it started): sanity
	// within a second, not order.
	if exit.StartedAt.Before(before.Add(-time.Second)) || exit.FinishedAt.Before(exit.StartedAt.Add(-time.Second)) || time.Since(exit.FinishedAt) > time.Minute {
		t.Errorf("times: started %v finished %v (test began %v)", exit.StartedAt, exit.FinishedAt, before)
	}
	// Wait has returned: the whole output must be in the file already.
	log := readFile(t, spec.LogPath)
	for _, want := range []string{"to-stdout\n", "to-stderr\n", "hello\n"} {
		if !strings.Contains(log, want) {
			t.Errorf("log %q lacks %q", log, want)
		}
	}
	// A second Wait returns the same exit at once.
	again := e.wait(id)
	if again.Code != 0 || !again.FinishedAt.Equal(exit.FinishedAt) {
		t.Errorf("second Wait %+v, first %+v", again, exit)
	}
	// Logs gives the same output.
	rc, err := e.rt.Logs(context.Background(), id, false)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if !strings.Contains(string(b), "to-stderr") {
		t.Errorf("Logs: %q", b)
	}
}

func TestLogIsAppended(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("append", "echo", "second")
	if err := os.WriteFile(spec.LogPath, []byte("first\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.wait(e.start(spec))
	if got := readFile(t, spec.LogPath); got != "first\nsecond\n" {
		t.Fatalf("log %q, want the output appended", got)
	}
}

func TestNonzeroExit(t *testing.T) {
	e := newEnv(t)
	exit := e.wait(e.start(e.spec("fail", "sh", "-c", "exit 7")))
	if exit.Code != 7 || exit.OOMKilled {
		t.Fatalf("exit %+v, want code 7", exit)
	}
	// A signal N is 128+N.
	exit = e.wait(e.start(e.spec("sig", "sh", "-c", "kill -USR1 $$")))
	if exit.Code != 128+10 {
		t.Fatalf("exit %+v, want 138 (SIGUSR1)", exit)
	}
}

func TestOOMKilled(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("oom", "sh", "-c", `x=$(head -c 200m /dev/zero | tr '\0' a); echo survived ${#x}`)
	spec.MemoryBytes = 32 << 20
	exit := e.wait(e.start(spec))
	if !exit.OOMKilled || exit.Code != 137 {
		t.Fatalf("exit %+v, want OOMKilled with code 137; log: %q", exit, readFile(t, spec.LogPath))
	}
	if exit.Reason == "" {
		t.Error("no Reason for an OOM kill")
	}
}

func TestStopWithinGrace(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()

	// A command that ends on SIGTERM stops at once, with 128+15.
	polite := e.start(e.spec("polite", "sleep", "300"))
	// One that ignores SIGTERM (and whose children inherit that) is killed
	// after the grace.
	stubborn := e.start(e.spec("stubborn", "sh", "-c", `trap "" TERM; sleep 300; echo not-killed`))
	time.Sleep(200 * time.Millisecond) // let the shell install its trap

	t0 := time.Now()
	if err := e.rt.Stop(ctx, polite, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("stopping a command that honours SIGTERM took %v", d)
	}
	if exit := e.wait(polite); exit.Code != 143 {
		t.Errorf("polite exit %+v, want 143", exit)
	}

	const grace = time.Second
	t0 = time.Now()
	if err := e.rt.Stop(ctx, stubborn, grace); err != nil {
		t.Fatal(err)
	}
	d := time.Since(t0)
	if d < grace-100*time.Millisecond || d > grace+3*time.Second {
		t.Errorf("stop with grace %v took %v", grace, d)
	}
	if exit := e.wait(stubborn); exit.Code != 137 {
		t.Errorf("stubborn exit %+v, want 137 (SIGKILL)", exit)
	}
	// Stopping a stopped container is no error; an unknown one is ErrNotFound.
	if err := e.rt.Stop(ctx, stubborn, grace); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := e.rt.Stop(ctx, "mf-no-such-container", grace); !errors.Is(err, contract.ErrNotFound) {
		t.Errorf("Stop of an unknown container: %v, want ErrNotFound", err)
	}
}

func TestMissingImage(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("noimage", "true")
	spec.Image = "megaflow-test/no-such-image:1"
	t0 := time.Now()
	_, err := e.rt.Start(context.Background(), spec)
	if !errors.Is(err, contract.ErrImageNotFound) {
		t.Fatalf("Start: %v, want ErrImageNotFound", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	want := `image "megaflow-test/no-such-image:1" not found on this worker's Docker engine; build or load it (no registry is reachable)`
	if !strings.Contains(err.Error(), want) {
		t.Errorf("message %q lacks %q", err, want)
	}
}

func TestStartFailureLeavesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	mine := map[string]string{"megaflow.test.name": t.Name()}

	// The engine creates the container but cannot start it (its working
	// directory would be under a file): Start removes it.
	spec := e.spec("badwd", "true")
	spec.WorkingDir = "/bin/busybox/sub"
	if _, err := e.rt.Start(ctx, spec); err == nil {
		t.Fatal("Start with a working directory under a file succeeded")
	} else {
		t.Logf("error: %v", err)
	}
	// A network that does not exist: the create fails with "not found",
	// which must not read as a missing image.
	spec = e.spec("badnet", "true")
	spec.Network = "megaflow-no-such-network"
	if _, err := e.rt.Start(ctx, spec); err == nil || errors.Is(err, contract.ErrImageNotFound) {
		t.Fatalf("Start on a missing network: %v", err)
	} else {
		t.Logf("network error: %v", err)
	}
	// GPUs on an engine without the nvidia runtime: created, not started.
	spec = e.spec("nogpu", "true")
	spec.GPUUUIDs = []string{"GPU-00000000-0000-0000-0000-000000000000"}
	if id, err := e.rt.Start(ctx, spec); err == nil {
		e.rt.Remove(ctx, id)
		t.Log("this engine has a GPU device driver: the GPU start failure is not tested")
	} else {
		t.Logf("error: %v", err)
	}
	got, err := e.rt.List(ctx, mine)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("a failed start left %+v", got)
	}

	// A program that does not exist is the init's failure to exec it: the
	// container starts and exits 127, as in a shell.
	spec = e.spec("badcmd", "/no/such/program")
	exit := e.wait(e.start(spec))
	if exit.Code != 127 {
		t.Errorf("missing program: exit %+v, want 127; log %q", exit, readFile(t, spec.LogPath))
	}
}

func TestNameConflict(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("dup", "sleep", "300")
	id := e.start(spec)
	_, err := e.rt.Start(context.Background(), spec)
	if !errors.Is(err, contract.ErrConflict) {
		t.Fatalf("second Start: %v, want ErrConflict", err)
	}
	// The first container is untouched.
	got, err := e.rt.List(context.Background(), map[string]string{"megaflow.test.name": t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != id || !got[0].Running {
		t.Fatalf("after the conflict: %+v", got)
	}
}

func TestListAndRemove(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.spec("a", "sleep", "300")
	a.Labels["megaflow.attempt"] = "a"
	b := e.spec("b", "sh", "-c", "exit 3")
	b.Labels["megaflow.attempt"] = "b"
	idA := e.start(a)
	idB := e.start(b)
	e.wait(idB)

	all, err := e.rt.List(ctx, map[string]string{"megaflow.test.name": t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Fatalf("List: %+v", all)
	}
	for _, c := range all {
		switch c.ID {
		case idA:
			if !c.Running || c.Exit != nil || c.Name != a.Name || c.Labels["megaflow.attempt"] != "a" {
				t.Errorf("a: %+v", c)
			}
		case idB:
			if c.Running || c.Exit == nil || c.Exit.Code != 3 || c.Name != b.Name {
				t.Errorf("b: %+v (exit %+v)", c, c.Exit)
			}
		default:
			t.Errorf("unexpected %+v", c)
		}
	}
	one, err := e.rt.List(ctx, map[string]string{"megaflow.test.name": t.Name(), "megaflow.attempt": "b"})
	if err != nil || len(one) != 1 || one[0].ID != idB {
		t.Fatalf("List by two labels: %+v, %v", one, err)
	}
	none, err := e.rt.List(ctx, map[string]string{"megaflow.test.name": t.Name(), "megaflow.attempt": "c"})
	if err != nil || len(none) != 0 {
		t.Fatalf("List of no match: %+v, %v", none, err)
	}

	// Remove kills a running container; a second Remove is no error.
	if err := e.rt.Remove(ctx, idA); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Remove(ctx, idA); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if _, err := e.rt.Wait(ctx, idA); !errors.Is(err, contract.ErrNotFound) {
		t.Fatalf("Wait after Remove: %v, want ErrNotFound", err)
	}
	left, err := e.rt.List(ctx, map[string]string{"megaflow.test.name": t.Name()})
	if err != nil || len(left) != 1 || left[0].ID != idB {
		t.Fatalf("after Remove: %+v, %v", left, err)
	}
}

func TestIsolation(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("iso", "sh", "-c", "grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status; cat /proc/net/dev; cat /proc/1/cmdline | tr '\\0' ' '; echo")
	e.wait(e.start(spec))
	log := readFile(t, spec.LogPath)
	for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "NoNewPrivs:\t1", "lo:", "docker-init"} {
		if !strings.Contains(log, want) {
			t.Errorf("output lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "eth0") {
		t.Errorf("network none has eth0:\n%s", log)
	}

	// A capability asked for is kept (CAP_NET_RAW is bit 13: 0x2000).
	spec = e.spec("cap", "grep", "CapEff", "/proc/self/status")
	spec.Capabilities = []string{"NET_RAW"}
	e.wait(e.start(spec))
	if log := readFile(t, spec.LogPath); !strings.Contains(log, "CapEff:\t0000000000002000") {
		t.Errorf("with NET_RAW kept: %s", log)
	}

	// The pids limit holds.
	spec = e.spec("pids", "sh", "-c", "for i in $(seq 1 40); do sleep 30 & done; wait")
	spec.PidsLimit = 10
	exit := e.wait(e.start(spec))
	if log := readFile(t, spec.LogPath); !strings.Contains(log, "fork") && !strings.Contains(log, "Resource temporarily unavailable") {
		t.Errorf("40 processes under a pids limit of 10: exit %+v, log %q", exit, log)
	}
}

func TestUnreachableEngine(t *testing.T) {
	// A socket that accepts connections and never answers.
	dir, err := os.MkdirTemp("", "mfsock")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // hold it open, say nothing
			mu.Unlock()
		}
	}()
	defer func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()

	const timeout = 300 * time.Millisecond
	hung, err := New(Config{Host: "unix://" + sock, CallTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	absent, err := New(Config{Host: "unix://" + filepath.Join(dir, "absent.sock"), CallTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer absent.Close()

	for _, rt := range []*Runtime{hung, absent} {
		ctx := context.Background()
		spec := contract.Spec{Name: "mf-unreachable", Image: "x:1", Command: []string{"true"}, LogPath: filepath.Join(dir, "log")}
		calls := map[string]func() error{
			"Ping":  func() error { return rt.Ping(ctx) },
			"Start": func() error { _, err := rt.Start(ctx, spec); return err },
			"Wait":  func() error { _, err := rt.Wait(ctx, "abc"); return err },
			"Stop":  func() error { return rt.Stop(ctx, "abc", 0) },
			"Remove": func() error {
				return rt.Remove(ctx, "abc")
			},
			"List": func() error { _, err := rt.List(ctx, map[string]string{"a": "b"}); return err },
			"Exec": func() error { _, err := rt.Exec(ctx, "abc", spec); return err },
			"Logs": func() error { _, err := rt.Logs(ctx, "abc", true); return err },
		}
		for name, call := range calls {
			t0 := time.Now()
			err := call()
			d := time.Since(t0)
			t.Logf("%s on %s: %v after %v", name, rt.cli.DaemonHost(), err, d.Round(time.Millisecond))
			if !errors.Is(err, contract.ErrUnavailable) {
				t.Errorf("%s on %s: %v, want ErrUnavailable", name, rt.cli.DaemonHost(), err)
			}
			// Start spends a second timeout removing by name what the
			// engine may have created before it stopped answering.
			bound := timeout + 700*time.Millisecond
			if name == "Start" {
				bound += timeout
			}
			if d > bound {
				t.Errorf("%s on %s took %v with CallTimeout %v", name, rt.cli.DaemonHost(), d, timeout)
			}
		}
	}

	// The caller's own deadline is reported as such, not as ErrUnavailable.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := hung.Wait(ctx, "abc"); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, contract.ErrUnavailable) {
		t.Errorf("Wait with the caller's deadline: %v", err)
	}
}

func TestWaitHonoursContext(t *testing.T) {
	e := newEnv(t)
	id := e.start(e.spec("long", "sleep", "300"))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err := e.rt.Wait(ctx, id)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %v, want the context's deadline", err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("Wait returned %v after its context ended", d)
	}
}

// TestConcurrentTasks runs a few tasks at once through one Runtime, as a
// worker does, each with its own log.
func TestConcurrentTasks(t *testing.T) {
	e := newEnv(t)
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx := context.Background()
			spec := e.spec(fmt.Sprint("c", i), "sh", "-c", fmt.Sprintf("echo task-%d; exit %d", i, i))
			id, err := e.rt.Start(ctx, spec)
			if err != nil {
				errs <- err
				return
			}
			defer e.rt.Remove(ctx, id)
			exit, err := e.rt.Wait(ctx, id)
			if err != nil || exit.Code != i {
				errs <- fmt.Errorf("task %d: %+v %v", i, exit, err)
				return
			}
			if b, _ := os.ReadFile(spec.LogPath); string(b) != fmt.Sprintf("task-%d\n", i) {
				errs <- fmt.Errorf("task %d: log %q", i, b)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
