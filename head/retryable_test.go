package head_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/fake"
)

// Failures a retry cannot fix (an image the worker does not hold, a
// command that is not found) fail the task at once with its retries
// unspent; an ordinary failure spends them.
func TestNotRetryableFailuresSpendNoRetries(t *testing.T) {
	t.Parallel() // it waits for retries (see internal/testcluster)
	// Which failures spend retries is the point, not the backoff's
	// length (TestRetriesBackOff's): 50 ms, not the default 1 s and 2 s.
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) {
		cfg.RetryBackoff = 50 * time.Millisecond
	}})
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: time.Millisecond})
	rt.OnCommand("/missing-image", fake.Behavior{StartErr: fmt.Errorf("fake start: %w: image %q", contract.ErrImageNotFound, "nope:1")})
	rt.OnCommand("/missing-command", fake.Behavior{ExitCode: 127})
	rt.OnCommand("/flaky", fake.Behavior{ExitCode: 1})
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	g := &client.GraphSpec{Id: "nr"}
	for _, name := range []string{"missing-image", "missing-command", "flaky"} {
		g.Tasks = append(g.Tasks, &client.TaskSpec{Name: name, Image: "busybox", Command: []string{"/" + name}, MaxRetries: 2,
			Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}})
	}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	waitGraph(ctx, t, cl, "nr")
	for _, task := range allTasks(ctx, t, cl, "nr") {
		name := task.GetSpec().GetName()
		wantAttempts, wantReason := 1, "not retried"
		if name == "flaky" {
			wantAttempts, wantReason = 3, "exit code 1"
		}
		if task.State != client.TaskFailed || len(task.Attempts) != wantAttempts || !strings.Contains(task.Reason, wantReason) {
			t.Errorf("task %s: %s after %d attempts (%q); want FAILED after %d, reason containing %q",
				name, task.State, len(task.Attempts), task.Reason, wantAttempts, wantReason)
		}
	}
}
