package sandboxtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/worker"
)

// TestSandboxFromWarmPool: through the heads, with a pre-warm target of
// the sandbox's image, tenant and limits (megaflow pool warm), a
// CreateSandbox is served from one of the worker's warm containers (the
// worker counts it warm, its container is one the pool held), is READY
// with its env and working dir in its execs, and the pool refills; a
// sandbox with a network (another key) is fresh; closing the warm-served
// sandbox removes its container.
func TestSandboxFromWarmPool(t *testing.T) {
	t.Parallel() // it waits for the engine (see internal/testcluster)
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := e.cl.PoolWarm(ctx, &client.PoolTarget{Image: e.image, Tenant: "default", Size: 2, CpuMillis: 500, MemoryBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	w := e.c.Workers()[0].Worker()
	idle := func() []string {
		var ids []string
		for _, p := range w.Pool() {
			if !p.Busy && p.Session == "" {
				ids = append(ids, p.ContainerID)
			}
		}
		return ids
	}
	testcluster.WaitFor(t, 2*time.Minute, "2 warm containers", func() bool { return len(idle()) == 2 })
	before := idle()

	s, err := e.cl.CreateSandbox(ctx, client.SandboxSpec{Image: e.image, CPUMillis: 500, MemoryBytes: 64 << 20,
		Env: map[string]string{"GREETING": "hi"}, WorkingDir: "/work/w", WaitReady: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Info().GetState(); st != client.SandboxReady {
		t.Fatalf("warm sandbox is %s", st)
	}
	res, err := s.Exec(ctx, sh(`echo "$GREETING $MEGAFLOW_TASK_ID"; pwd; cat /proc/1/cmdline | tr '\0' ' '`), client.ExecOptions{})
	if err != nil || res.ExitCode != 0 || !strings.HasPrefix(string(res.Stdout), "hi "+s.ID()+"/box\n/work/w\n") {
		t.Fatalf("exec in the warm-served sandbox: %+v (%q), %v; want its env and working dir", res, res.Stdout, err)
	}
	served := containerOf(w, s.ID())
	if served == "" || !contains(before, served) {
		t.Fatalf("sandbox %s runs in container %q, not one of the warm ones %v", s.ID(), served, before)
	}
	testcluster.WaitFor(t, 2*time.Minute, "the pool refilled", func() bool { ids := idle(); return len(ids) == 2 && !contains(ids, served) })

	fresh, err := e.cl.CreateSandbox(ctx, client.SandboxSpec{Image: e.image, CPUMillis: 500, MemoryBytes: 64 << 20, Network: "bridge", WaitReady: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(e.containers(fresh.ID())); n != 1 {
		t.Fatalf("the sandbox with a network has %d containers labelled its own; want 1 (fresh)", n)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 2*time.Minute, "the warm-served sandbox's container removed", func() bool { return !contains(e.containers(""), served) })
	if contains(idle(), served) {
		t.Fatal("the closed sandbox's container went back to the pool")
	}
	_ = fresh.Close(ctx)
}

// containerOf returns the container of sandbox id's attempt on w, or "".
func containerOf(w *worker.Worker, id string) string {
	for _, a := range w.Attempts() {
		if a.Key.TaskID == spec.SandboxTaskID(id) {
			return a.ContainerID
		}
	}
	return ""
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
