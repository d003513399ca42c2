package head_test

import (
	"context"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/process"
)

func sh(name, script string, deps ...string) *client.TaskSpec {
	return &client.TaskSpec{Name: name, Image: "none", Command: []string{"sh", "-c", script}, DependsOn: deps,
		Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 16 << 20}}
}

// Rollout graphs on real processes: a diamond whose join reads both
// parents' results, a fan-out/fan-in with one failing branch, an
// aggregation step that runs anyway (run_on_upstream_failure), and the
// graph's aggregate reward.
func TestGraphsOnRealProcesses(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	rt, err := process.New(process.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Diamond: a -> (b, c) -> d; d's result is built from b's and c's.
	diamond := &client.GraphSpec{Id: "diamond", Tasks: []*client.TaskSpec{
		sh("a", `echo MEGAFLOW_RESULT '{"reward": 1}'`),
		sh("b", `echo MEGAFLOW_RESULT "$MEGAFLOW_PARENT_A_RESULT"`, "a"),
		sh("c", `echo MEGAFLOW_RESULT '{"reward": 0.5}'`, "a"),
		sh("d", `echo MEGAFLOW_RESULT "{\"b\": $MEGAFLOW_PARENT_B_RESULT, \"c\": $MEGAFLOW_PARENT_C_RESULT}"`, "b", "c"),
	}}
	if _, err := cl.Submit(ctx, diamond); err != nil {
		t.Fatal(err)
	}
	g := waitGraph(ctx, t, cl, "diamond")
	if g.State != client.GraphSucceeded {
		t.Fatalf("diamond: %v", g.State)
	}
	d, _, err := cl.GetTask(ctx, "diamond/d", client.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"b": {"reward": 1}, "c": {"reward": 0.5}}`; string(d.Result) != want {
		t.Fatalf("d's result %q, want %q (its parents' results)", d.Result, want)
	}
	// a, b (a copy of a's) and c report rewards 1, 1 and 0.5; d has none.
	if m := g.GetMetrics(); m.GetCount() != 3 || m.GetSum() != 2.5 || m.GetMin() != 0.5 || m.GetMax() != 1 || m.GetSuccessRate() != 1 {
		t.Fatalf("diamond reward aggregate: %v, want 3 rewards summing to 2.5", m)
	}

	// Fan-out / fan-in with one failing branch: the join is cancelled
	// (upstream_failed), the aggregation runs anyway.
	fan := &client.GraphSpec{Id: "fan", Tasks: []*client.TaskSpec{sh("setup", "true")}}
	var branches []string
	for _, b := range []string{"r0", "r1", "r2"} {
		script := `echo MEGAFLOW_RESULT '{"reward": 1}'`
		if b == "r1" {
			script = "exit 3"
		}
		fan.Tasks = append(fan.Tasks, sh(b, script, "setup"))
		branches = append(branches, b)
	}
	fan.Tasks = append(fan.Tasks, sh("join", "true", branches...))
	agg := sh("aggregate", `echo MEGAFLOW_RESULT '{"reward": 0}'`, branches...)
	agg.RunOnUpstreamFailure = true
	fan.Tasks = append(fan.Tasks, agg)
	if _, err := cl.Submit(ctx, fan); err != nil {
		t.Fatal(err)
	}
	g = waitGraph(ctx, t, cl, "fan")
	want := map[string]client.TaskState{"fan/setup": client.TaskSucceeded, "fan/r0": client.TaskSucceeded,
		"fan/r1": client.TaskFailed, "fan/r2": client.TaskSucceeded, "fan/join": client.TaskCancelled,
		"fan/aggregate": client.TaskSucceeded}
	for _, task := range allTasks(ctx, t, cl, "fan") {
		if task.State != want[task.Id] {
			t.Errorf("%s: %v (%s), want %v", task.Id, task.State, task.Reason, want[task.Id])
		}
		if task.Id == "fan/join" && task.Reason != "upstream_failed" {
			t.Errorf("join's reason %q, want upstream_failed", task.Reason)
		}
		if task.Id == "fan/r1" && task.Reason != "exit code 3" {
			t.Errorf("r1's reason %q, want exit code 3", task.Reason)
		}
	}
	if g.State != client.GraphFailed || g.GetMetrics().GetSuccessRate() <= 0 {
		t.Fatalf("fan: %v, metrics %v", g.State, g.GetMetrics())
	}
}
