package sandboxtest

import (
	"context"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
)

// An exec returns once its command ended, even when a background child
// keeps the exec's stdout open (the engine would hold the output stream
// until the child exits): within the output grace after the end, with
// the command's exit and the output written before it, and the child
// keeps running in the sandbox.
func TestSandboxExecReturnsWhenCommandEnds(t *testing.T) {
	t.Parallel() // it waits for the engine (see internal/testcluster)
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.create(ctx, client.SandboxSpec{})
	start := time.Now()
	res, err := s.Exec(ctx, sh(`sleep 120 & echo $! > /tmp/child; echo started; exit 7`), client.ExecOptions{Timeout: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 || res.TimedOut || string(res.Stdout) != "started\n" {
		t.Fatalf("exec leaving a child on its stdout: %+v (stdout %q); want exit 7, not timed out, \"started\"", res, res.Stdout)
	}
	// Not a timed assertion on speed: the exec's 90 s timeout did not end
	// it (TimedOut is false), and it did not wait for the 120 s child.
	t.Logf("returned after %v", time.Since(start).Round(time.Millisecond))
	res, err = s.Exec(ctx, sh(`kill -0 $(cat /tmp/child) && echo alive`), client.ExecOptions{})
	if err != nil || string(res.Stdout) != "alive\n" {
		t.Fatalf("the background child: %+v, %v; want alive", res, err)
	}
}
