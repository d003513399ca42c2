package head_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
)

// Every validation rule, through a head's real SubmitGraph (the raw API, so
// the client library's own check does not stop it first): the answer is
// InvalidArgument naming the graph, the task and the field, and the table
// does not change. internal/spec has the exhaustive table of rules; this
// checks each kind end to end.
func TestInvalidGraphsAreRefusedAndChangeNothing(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leaderIdx := c.WaitLeader(10 * time.Second)
	leader := c.Members[leaderIdx].Head()
	follower := c.Members[(leaderIdx+1)%3].Head()

	valid := func() *wire.GraphSpec {
		return &wire.GraphSpec{Id: "step-42", Tasks: []*wire.TaskSpec{
			{Name: "rollout", Image: "img:1", Command: []string{"/agent"}},
			{Name: "eval", Image: "img:1", Command: []string{"/eval"}, DependsOn: []string{"rollout"}},
		}}
	}
	cases := []struct {
		name  string
		edit  func(g *wire.GraphSpec)
		wants []string
	}{
		{"no tasks", func(g *wire.GraphSpec) { g.Tasks = nil }, []string{`graph "step-42"`, "task"}},
		{"bad graph id", func(g *wire.GraphSpec) { g.Id = "a/b" }, []string{"id", `'/'`}},
		{"duplicate task name", func(g *wire.GraphSpec) { g.Tasks[1].Name = "rollout"; g.Tasks[1].DependsOn = nil }, []string{`"rollout"`, "name"}},
		{"unknown dependency", func(g *wire.GraphSpec) { g.Tasks[1].DependsOn = []string{"rollot"} }, []string{`task "eval"`, "depends_on", `"rollot"`}},
		{"self dependency", func(g *wire.GraphSpec) { g.Tasks[0].DependsOn = []string{"rollout"} }, []string{`task "rollout"`, "depends_on"}},
		{"cycle", func(g *wire.GraphSpec) { g.Tasks[0].DependsOn = []string{"eval"} }, []string{"cycle", "rollout", "eval"}},
		{"empty image", func(g *wire.GraphSpec) { g.Tasks[0].Image = "" }, []string{`task "rollout"`, "image"}},
		{"empty command", func(g *wire.GraphSpec) { g.Tasks[0].Command = nil }, []string{`task "rollout"`, "command"}},
		{"negative cpu", func(g *wire.GraphSpec) { g.Tasks[0].Resources = &wire.Resources{CpuMillis: -5} }, []string{`task "rollout"`, "resources.cpu_millis", "-5"}},
		{"negative memory", func(g *wire.GraphSpec) { g.Tasks[0].Resources = &wire.Resources{MemoryBytes: -1} }, []string{"resources.memory_bytes"}},
		{"retries out of range", func(g *wire.GraphSpec) { g.Tasks[0].MaxRetries = 1000 }, []string{`task "rollout"`, "max_retries"}},
		{"timeout out of range", func(g *wire.GraphSpec) { g.Tasks[0].TimeoutSeconds = -1 }, []string{`task "rollout"`, "timeout_seconds"}},
		{"bad env key", func(g *wire.GraphSpec) { g.Tasks[0].Env = map[string]string{"A=B": "x"} }, []string{`task "rollout"`, "env"}},
		{"output path escapes", func(g *wire.GraphSpec) { g.Tasks[0].OutputPaths = []string{"../etc/passwd"} }, []string{`task "rollout"`, "output_paths"}},
		{"session without persistent mode", func(g *wire.GraphSpec) { g.Tasks[0].Session = "s" }, []string{`task "rollout"`, "session"}},
		{"service task without service spec", func(g *wire.GraphSpec) { g.Tasks[0].Kind = wire.TaskKind_TASK_KIND_SERVICE }, []string{`task "rollout"`, "service"}},
		{"unknown queue type", func(g *wire.GraphSpec) { g.Tasks[0].Type = "Not A Queue" }, []string{`task "rollout"`, "type"}},
		{"priority out of range", func(g *wire.GraphSpec) { g.Tasks[0].Priority = 5000 }, []string{`task "rollout"`, "priority"}},
		// Only the heads fill a snapshot fork's fields (CreateSandbox).
		{"snapshot_worker from a client", func(g *wire.GraphSpec) { g.Tasks[0].Sandbox = &wire.SandboxSpec{SnapshotWorker: "w1"} },
			[]string{`"rollout"`, "snapshot_worker is set by the heads", "from_snapshot"}},
		{"from_snapshot from a client", func(g *wire.GraphSpec) {
			g.Tasks[0].Image = "megaflow-snapshot:snap-a"
			g.Tasks[0].Sandbox = &wire.SandboxSpec{FromSnapshot: "snap-a", SnapshotWorker: "w1"}
		}, []string{`"rollout"`, "snapshot_worker is set by the heads"}},
		{"a snapshot's image", func(g *wire.GraphSpec) { g.Tasks[1].Image = "megaflow-snapshot:snap-a" },
			[]string{`"eval"`, "megaflow-snapshot:snap-a", "from_snapshot"}},
	}
	// A valid graph first, so "unchanged" compares against a non-empty table.
	if _, err := wire.NewMegaflowServiceClient(dial(t, leader.GRPCAddr())).SubmitGraph(ctx, &wire.SubmitGraphRequest{Graph: &wire.GraphSpec{Id: "base",
		Tasks: []*wire.TaskSpec{{Name: "a", Image: "img", Command: []string{"true"}}}}}); err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(leader.AppliedIndex(), 10*time.Second)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := valid()
			tc.edit(g)
			sent := proto.Clone(g)
			for _, h := range []struct {
				role string
				addr string
			}{{"leader", leader.GRPCAddr()}, {"follower", follower.GRPCAddr()}} {
				before, digest := leader.AppliedIndex(), tableDigest(t, leader)
				_, err := wire.NewMegaflowServiceClient(dial(t, h.addr)).SubmitGraph(ctx, &wire.SubmitGraphRequest{Graph: g})
				err = errs.FromStatus(err)
				if !errors.Is(err, errs.ErrInvalidArgument) {
					t.Fatalf("%s: err %v, want InvalidArgument", h.role, err)
				}
				for _, w := range tc.wants {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: error %q does not mention %s", h.role, err, w)
					}
				}
				if leader.AppliedIndex() != before || tableDigest(t, leader) != digest {
					t.Fatalf("%s: a refused graph changed the table", h.role)
				}
				if !proto.Equal(sent, g) {
					t.Fatalf("%s: the request was modified", h.role)
				}
			}
		})
	}
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
