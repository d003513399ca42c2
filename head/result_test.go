package head_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/artifact"
	"github.com/megaflow/megaflow/internal/blob"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/process"
	"github.com/megaflow/megaflow/worker"
)

// Results on a real worker (process runtime) are never dropped without a
// word (issue 18): a MEGAFLOW_RESULT line that is not JSON, or over what
// the worker takes, leaves the task SUCCEEDED with the worker's note as
// its reason (GetTask, `megaflow tasks`); a result over 64 KiB with an
// artifact store is stored as result.json and the task's result points at
// it. Before, both notes were computed by the worker and lost at the head
// (reason "").
func TestResultsAreNeverDroppedWithoutAWord(t *testing.T) {
	big := func(n int) string {
		return `echo MEGAFLOW_RESULT "\"$(head -c ` + fmt.Sprint(n) + ` /dev/zero | tr '\0' x)\""`
	}
	run := func(t *testing.T, store blob.Store, tasks []*client.TaskSpec) map[string]*client.Task {
		var hc func(*head.Config)
		var wc func(*worker.Config)
		if store != nil {
			hc = func(cfg *head.Config) { cfg.Artifacts = store }
			wc = func(cfg *worker.Config) { cfg.Artifacts = store }
		}
		c := testcluster.New(t, testcluster.Options{Configure: hc})
		rt, err := process.New(process.Config{})
		if err != nil {
			t.Fatal(err)
		}
		c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Configure: wc})
		cl := c.Client()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := cl.Submit(ctx, &client.GraphSpec{Id: "results", Tasks: tasks}); err != nil {
			t.Fatal(err)
		}
		waitGraph(ctx, t, cl, "results")
		out := map[string]*client.Task{}
		for _, ts := range tasks {
			task, _, err := cl.GetTask(ctx, "results/"+ts.Name, client.ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if task.State != client.TaskSucceeded {
				t.Errorf("%s: %v (%s), want SUCCEEDED", ts.Name, task.State, task.Reason)
			}
			out[ts.Name] = task
		}
		if store != nil {
			var buf bytes.Buffer
			if _, err := cl.GetArtifact(ctx, "results/medium", 0, artifact.ResultName, &buf); err != nil {
				t.Errorf("result.json of medium: %v", err)
			} else if buf.Len() != 100<<10+2 {
				t.Errorf("result.json of medium: %d bytes, want %d", buf.Len(), 100<<10+2)
			}
		}
		return out
	}
	wantNote := func(t *testing.T, task *client.Task, note string) {
		t.Helper()
		if len(task.Result) != 0 || task.Reason != note {
			t.Errorf("%s: result %.40q, reason %q; want no result and %q", task.Id, task.Result, task.Reason, note)
		}
		if a := task.Attempts[len(task.Attempts)-1]; a.Reason != note {
			t.Errorf("%s: attempt reason %q, want %q", task.Id, a.Reason, note)
		}
	}
	t.Run("no artifact store", func(t *testing.T) {
		got := run(t, nil, []*client.TaskSpec{
			sh("ok", `echo MEGAFLOW_RESULT '{"reward": 1}'`),
			sh("invalid", `echo MEGAFLOW_RESULT '{oops'`),
			sh("medium", big(100<<10)),
		})
		if r := got["ok"]; string(r.Result) != `{"reward": 1}` || r.Reason != "" {
			t.Errorf("ok: result %q, reason %q", r.Result, r.Reason)
		}
		wantNote(t, got["invalid"], "MEGAFLOW_RESULT line ignored: not valid JSON")
		wantNote(t, got["medium"], fmt.Sprintf("MEGAFLOW_RESULT line ignored: the result is %d bytes, the limit is %d", 100<<10+2, worker.MaxResultBytes))
	})
	t.Run("artifact store", func(t *testing.T) {
		got := run(t, artifact.NewMemStore(), []*client.TaskSpec{
			sh("medium", big(100<<10)),
			sh("huge", big(2<<20)),
		})
		if m := got["medium"]; !strings.Contains(string(m.Result), `"megaflow_artifact":"result.json"`) || m.Reason != "" {
			t.Errorf("medium: result %q, reason %q; want a reference to result.json", m.Result, m.Reason)
		}
		wantNote(t, got["huge"], fmt.Sprintf("MEGAFLOW_RESULT line ignored: the result is %d bytes, the limit is %d", 2<<20+2, worker.ResultScanBytes))
	})
}
