package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/artifact"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// TestLogsOfASilentTask: `megaflow logs` of a task that printed nothing
// (its worker made no log file: the file comes with the first byte)
// prints nothing and succeeds; the log of a task that printed is printed
// whole.
func TestLogsOfASilentTask(t *testing.T) {
	store := artifact.NewMemStore()
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) { cfg.Artifacts = store }})
	rt := fake.New(nil)
	rt.OnCommand("silent", fake.Behavior{Duration: time.Millisecond})
	rt.OnCommand("loud", fake.Behavior{Duration: time.Millisecond, Output: "hello\nworld\n"})
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Configure: func(cfg *worker.Config) { cfg.Artifacts = store }})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.Client()
	g := &client.GraphSpec{Id: "g", Tasks: []*client.TaskSpec{
		{Name: "silent", Image: "img", Command: []string{"silent"}},
		{Name: "loud", Image: "img", Command: []string{"loud"}},
	}}
	if _, err := cl.Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	if res, err := cl.Wait(ctx, "g"); err != nil || res.State != client.GraphSucceeded {
		t.Fatalf("graph: %v, %v", res, err)
	}
	heads := "--heads=" + strings.Join(c.GRPCAddrs(), ",")
	if code, out, errOut := cli(t, heads, "logs", "g/silent"); code != 0 || out != "" {
		t.Errorf("logs g/silent: %d %q %q; want 0 and no output", code, out, errOut)
	}
	if code, out, errOut := cli(t, heads, "logs", "g/loud"); code != 0 || out != "hello\nworld\n" {
		t.Errorf("logs g/loud: %d %q %q", code, out, errOut)
	}
}
