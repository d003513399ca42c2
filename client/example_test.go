package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/megaflow/megaflow/client"
)

// Dial takes any number of head addresses (or MEGAFLOW_HEADS) and finds
// the leader on the first call.
func ExampleDial() {
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{"10.0.0.1:7070", "10.0.0.2:7070", "10.0.0.3:7070"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	st, err := c.ClusterStatus(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", st.LeaderId)
}

// A rollout step in code: setup -> rollout -> eval in one session
// container per instance, the rollout retried twice.
func ExampleNewGraph() {
	b := client.NewGraph("step-42").Tenant("team-a").Label("megaflow.io/metric", "reward")
	for _, id := range []string{"getmoto__moto-4950", "python__mypy-9380"} {
		img := "megaflow/swegym-moto:demo"
		setup := b.Task("setup."+id, img, "megaflow-agent", "setup", "--dir", "/work", "--repo", "getmoto/moto").
			Session(id).CPU(100).Memory(64 << 20)
		rollout := b.Task("rollout."+id, img, "megaflow-agent", "rollout", "--dir", "/work", "--step-ms", "300,250").
			After(setup).Session(id).Type("train").Retries(2).Timeout(30 * time.Minute).
			UsesServices("model").WorkDir("/work").Outputs("trajectory.jsonl")
		b.Task("eval."+id, img, "megaflow-agent", "eval", "--dir", "/work").After(rollout).Session(id).Type("eval")
	}
	g, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(g.Id, len(g.Tasks), "tasks")
	// Output: step-42 6 tasks
}

// Build reports a bad graph before anything is sent.
func ExampleGraphBuilder_Build() {
	b := client.NewGraph("step-42")
	b.Task("eval", "img", "true").AfterNames("rollot")
	_, err := b.Build()
	fmt.Println(err)
	// Output: graph "step-42": task "eval": depends_on: unknown task "rollot" (the graph has no other task)
}

// Submit is idempotent by graph id: a retry, or the same file submitted
// twice, returns the graph that exists.
func ExampleClient_Submit() {
	ctx := context.Background()
	c, err := client.Dial(ctx, nil) // MEGAFLOW_HEADS
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	g, err := client.NewGraph("step-42").Build()
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Submit(ctx, g)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.GraphId, "existed:", res.Existed)
}

// Watch yields a graph's committed events in order; it resumes through
// leader changes without gaps or duplicates.
func ExampleClient_Watch() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	c, err := client.Dial(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for ev, err := range c.Watch(ctx, client.WatchOptions{GraphID: "step-42"}) {
		if err != nil {
			log.Fatal(err)
		}
		if ev.TaskId != "" {
			fmt.Println(ev.TaskId, ev.TaskState, ev.Reason)
		} else if client.GraphTerminal(ev.GraphState) {
			break
		}
	}
}

// Wait blocks until a graph ends and returns its aggregate.
func ExampleClient_Wait() {
	ctx := context.Background()
	c, err := client.Dial(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	g, err := c.Wait(ctx, "step-42")
	if err != nil {
		log.Fatal(err)
	}
	m := g.GetMetrics()
	fmt.Printf("%v: success %.0f%%, mean reward %.3f over %d results\n", g.State, 100*m.GetSuccessRate(), m.GetMean(), m.GetCount())
}

// GetGraph reads a graph's counts; GetTask one task with its attempts.
func ExampleClient_GetGraph() {
	ctx := context.Background()
	c, err := client.Dial(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	g, meta, err := c.GetGraph(ctx, "step-42", client.ReadOptions{RequireLeader: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(g.State, g.Counts.GetSucceeded(), "of", g.TaskCount, "at index", meta.GetIndex())
	t, _, err := c.GetTask(ctx, "step-42/rollout.getmoto__moto-4950", client.ReadOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.State, len(t.Attempts), "attempts", string(t.Result))
}

// ListTasks pages through a graph's tasks.
func ExampleClient_ListTasks() {
	ctx := context.Background()
	c, err := client.Dial(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	f := client.TaskFilter{GraphID: "step-42", State: client.TaskFailed, PageSize: 500, OmitSpec: true}
	for {
		tasks, next, err := c.ListTasks(ctx, f)
		if err != nil {
			log.Fatal(err)
		}
		for _, t := range tasks {
			fmt.Println(t.Id, t.Reason)
		}
		if next == "" {
			break
		}
		f.PageToken = next
	}
}

// CancelGraph is idempotent: cancelling a finished graph cancels nothing.
func ExampleClient_CancelGraph() {
	ctx := context.Background()
	c, err := client.Dial(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	n, err := c.CancelGraph(ctx, "step-42", "superseded by step-43")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cancelled", n, "tasks")
}
