package spec

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/race"
	"github.com/megaflow/megaflow/internal/wire"
)

func limitsFor(c invalidCase) Limits {
	lim := DefaultLimits()
	if c.lim != nil {
		c.lim(&lim)
	}
	return lim
}

func TestValidateRejects(t *testing.T) {
	for _, c := range invalidCases {
		t.Run(c.name, func(t *testing.T) {
			g := c.mut(base())
			var before *wire.GraphSpec
			if g != nil {
				before = proto.Clone(g).(*wire.GraphSpec)
			}
			err := Validate(g, limitsFor(c))
			if err == nil {
				t.Fatalf("Validate accepted the graph; want an error containing %q", c.want)
			}
			if !errors.Is(err, errs.ErrInvalidArgument) {
				t.Errorf("error %q is not errs.InvalidArgument (class %v)", err, errs.ClassOf(err))
			}
			var e *errs.Error
			if !errors.As(err, &e) {
				t.Errorf("error %q is %T, not *errs.Error", err, err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error:\n  %s\nwant it to contain:\n  %s", err, c.want)
			}
			if g != nil && !proto.Equal(g, before) {
				t.Errorf("Validate modified its input")
			}
			// The verdict does not depend on normalization.
			if Validate(Normalize(g), limitsFor(c)) == nil {
				t.Errorf("Validate accepted Normalize(g) but rejected g: %s", err)
			}
		})
	}
}

// TestValidateNamesGraphTaskAndField checks the shape of task messages.
func TestValidateNamesGraphTaskAndField(t *testing.T) {
	for _, c := range invalidCases {
		if !strings.HasPrefix(c.want, `graph "step-42": task "`) {
			continue
		}
		err := Validate(c.mut(base()), limitsFor(c))
		if err == nil || !strings.HasPrefix(err.Error(), `graph "step-42": task "`) {
			t.Errorf("%s: error %v does not start by naming the graph and the task", c.name, err)
		}
	}
}

func TestValidateAccepts(t *testing.T) {
	cases := []struct {
		name string
		g    func() *wire.GraphSpec
		lim  func(l *Limits)
	}{
		{"chain", base, nil},
		{"diamond", func() *wire.GraphSpec {
			return &wire.GraphSpec{Id: "d", Tasks: []*wire.TaskSpec{
				newTask("a"), newTask("b", "a"), newTask("c", "a"), newTask("d", "c", "b"),
			}}
		}, nil},
		{"fan-out fan-in", func() *wire.GraphSpec {
			g := &wire.GraphSpec{Tasks: []*wire.TaskSpec{newTask("setup")}}
			var all []string
			for i := range 50 {
				name := fmt.Sprintf("rollout-%d", i)
				all = append(all, name)
				g.Tasks = append(g.Tasks, newTask(name, "setup"))
			}
			g.Tasks = append(g.Tasks, newTask("aggregate", all...))
			return g
		}, nil},
		{"dependency listed before its task", func() *wire.GraphSpec {
			return &wire.GraphSpec{Id: "x", Tasks: []*wire.TaskSpec{newTask("b", "a"), newTask("a")}}
		}, nil},
		{"everything set", func() *wire.GraphSpec {
			srv := serviceTask("vllm")
			srv.Service.RestartPolicy = RestartOnFailure
			srv.Resources = &wire.Resources{CpuMillis: 8000, MemoryBytes: 64 * gib, Gpus: 8, GpuModel: "H100 80GB", GpuMemoryBytes: 80 * gib}
			srv.NodeSelector = map[string]string{"megaflow.io/gpu": "h100", "zone": "us-east-1a"}
			srv.Network = "bridge"
			tcp := serviceTask("reward")
			tcp.Service = &wire.ServiceSpec{Name: "reward", TcpProbe: true, RestartPolicy: RestartNever}
			roll := newTask("rollout-0")
			roll.Type = TypeTrain
			roll.Mode = wire.ExecutionMode_EXECUTION_MODE_PERSISTENT
			roll.Session = "env-0"
			roll.Env = map[string]string{"OPENAI_BASE_URL": "http://x", "_X": "", "A1": "a=b"}
			roll.UsesServices = []string{"model/qwen-7b", "reward"}
			roll.Capabilities = []string{"NET_ADMIN", "CAP_SYS_PTRACE"}
			roll.OutputPaths = []string{"out/traj.jsonl", ".", "logs"}
			roll.WorkingDir = "/workspace"
			roll.MaxRetries = 100
			roll.TimeoutSeconds = 604800
			roll.Priority = -1000
			roll.RunOnUpstreamFailure = true
			ev := newTask("eval-0", "rollout-0")
			ev.Type = "my-queue-2"
			ev.Network = NetworkNone
			ev.Kind = wire.TaskKind_TASK_KIND_BATCH
			syn := newTask("synth.0_x", "eval-0")
			syn.Type = TypeSynth
			syn.Network = "host"
			return &wire.GraphSpec{
				Id: "step-42.a_b-c", Tenant: "team-a", Name: "Sweep über alles", Priority: 1000,
				Labels:          map[string]string{"step": "42", "megaflow.io/run": "exp 7"},
				DeadlineSeconds: 30 * 86400,
				Tasks:           []*wire.TaskSpec{srv, tcp, roll, ev, syn},
			}
		}, func(l *Limits) { l.MaxWorker = &wire.Resources{CpuMillis: 8000, MemoryBytes: 64 * gib, Gpus: 8} }},
		{"all-zero MaxWorker means unknown", func() *wire.GraphSpec {
			g := base()
			g.Tasks[0].Resources = &wire.Resources{Gpus: 4, MemoryBytes: 1 << 40}
			return g
		}, func(l *Limits) { l.MaxWorker = &wire.Resources{} }},
		{"zero limits mean defaults", base, func(l *Limits) { *l = Limits{} }},
		{"a plain process needs no image", func() *wire.GraphSpec {
			g := base()
			g.Tasks[0].Image, g.Tasks[0].Runtime = "", "process"
			return g
		}, nil},
		{"normalized", func() *wire.GraphSpec { return Normalize(base()) }, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lim := DefaultLimits()
			if c.lim != nil {
				c.lim(&lim)
			}
			g := c.g()
			before := proto.Clone(g)
			if err := Validate(g, lim); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if err := Validate(Normalize(g), lim); err != nil {
				t.Fatalf("Validate(Normalize(g)): %v", err)
			}
			if !proto.Equal(g, before) {
				t.Errorf("Validate modified its input")
			}
		})
	}
}

// TestValidateOrder checks that the first problem in the documented order is
// the one reported.
func TestValidateOrder(t *testing.T) {
	g := base()
	g.Priority = 9999                                               // graph field
	g.Tasks[0].Image = ""                                           // first task
	g.Tasks[2].Command = nil                                        // later task
	g.Tasks = append(g.Tasks, newTask("x", "y"), newTask("y", "x")) // cycle
	for _, want := range []string{"priority: 9999", `task "setup": image`, `task "eval": command`, "cycle: x -> y -> x"} {
		err := Validate(g, DefaultLimits())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want %q", err, want)
		}
		switch want {
		case "priority: 9999":
			g.Priority = 0
		case `task "setup": image`:
			g.Tasks[0].Image = "busybox"
		case `task "eval": command`:
			g.Tasks[2].Command = []string{"true"}
		}
	}
}

func TestValidateSuggestsNearestName(t *testing.T) {
	g := &wire.GraphSpec{Id: "big"}
	for i := range 1000 {
		g.Tasks = append(g.Tasks, newTask(fmt.Sprintf("rollout-%04d", i)))
	}
	g.Tasks = append(g.Tasks, newTask("aggregate", "rollout-0007", "rolout-0042"))
	err := Validate(g, DefaultLimits())
	want := `graph "big": task "aggregate": depends_on: unknown task "rolout-0042" (did you mean "rollout-0042"? the graph has 1001 tasks)`
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
	g.Tasks[1000].DependsOn = []string{"eval-3"}
	err = Validate(g, DefaultLimits())
	want = `depends_on: unknown task "eval-3" (none of the graph's 1001 tasks has that name)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
}

func TestValidateLongCycleIsElided(t *testing.T) {
	const n = 100
	g := &wire.GraphSpec{Id: "ring"}
	for i := range n {
		g.Tasks = append(g.Tasks, newTask(fmt.Sprintf("t%d", i), fmt.Sprintf("t%d", (i+1)%n)))
	}
	err := Validate(g, DefaultLimits())
	want := `task "t0": depends_on: cycle: t0 -> t1 -> t2 -> t3 -> t4 -> t5 -> t6 -> t7 -> t8 -> t9 -> t10 -> t11 -> t12 -> t13 -> t14 -> ... (84 more) -> t99 -> t0;`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
}

// TestValidateCycleBehindTail finds a cycle that the walk reaches only
// after passing tasks that are not on it.
func TestValidateCycleBehindTail(t *testing.T) {
	g := &wire.GraphSpec{Id: "tail", Tasks: []*wire.TaskSpec{
		newTask("head", "m"), newTask("m", "p"), newTask("p", "q"), newTask("q", "p"),
	}}
	err := Validate(g, DefaultLimits())
	want := `task "p": depends_on: cycle: p -> q -> p;`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
}

func bigGraph(n int, deps func(i int) []string) *wire.GraphSpec {
	g := &wire.GraphSpec{Id: "big", Tasks: make([]*wire.TaskSpec, n)}
	for i := range n {
		g.Tasks[i] = &wire.TaskSpec{Name: fmt.Sprintf("t%06d", i), Image: "img", Command: []string{"run"}, DependsOn: deps(i)}
	}
	return g
}

func TestValidateLargeGraphs(t *testing.T) {
	race.SkipPure(t)
	const n = 100_000
	name := func(i int) string { return fmt.Sprintf("t%06d", i) }
	cases := []struct {
		name string
		g    *wire.GraphSpec
		want string
	}{
		{"chain", bigGraph(n, func(i int) []string {
			if i == 0 {
				return nil
			}
			return []string{name(i - 1)}
		}), ""},
		{"reverse chain", bigGraph(n, func(i int) []string {
			if i == n-1 {
				return nil
			}
			return []string{name(i + 1)}
		}), ""},
		{"fan-out", bigGraph(n, func(i int) []string {
			if i == 0 {
				return nil
			}
			return []string{name(0)}
		}), ""},
		{"fan-in", bigGraph(n, func(i int) []string {
			if i < n-1 {
				return nil
			}
			all := make([]string, n-1)
			for j := range all {
				all[j] = name(j)
			}
			return all
		}), ""},
		{"closed chain", bigGraph(n, func(i int) []string { return []string{name((i + n - 1) % n)} }),
			`task "t000000": depends_on: cycle: t000000 -> t099999 -> t099998`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			err := Validate(c.g, DefaultLimits())
			took := time.Since(start)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want %q", err, c.want)
			}
			// Speed is measured by BenchmarkValidateChain100k, never asserted here.
			t.Logf("%d tasks in %v", n, took)
		})
	}
	t.Run("over the limit", func(t *testing.T) {
		g := bigGraph(n+1, func(int) []string { return nil })
		if err := Validate(g, DefaultLimits()); err == nil || !strings.Contains(err.Error(), "the graph has 100001 tasks; the limit is 100000") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestDefaultLimits(t *testing.T) {
	l := DefaultLimits()
	if l.MaxTasks != 100_000 || l.MaxNameLen != 128 || l.MaxRetries != 100 ||
		l.MaxTaskTimeout != 604800*time.Second || l.MaxGraphDeadline != 30*24*time.Hour ||
		l.MaxTaskSpecBytes != 64<<10 || l.MaxWorker != nil {
		t.Errorf("DefaultLimits() = %+v", l)
	}
	if got := (Limits{}).withDefaults(); got != l {
		t.Errorf("Limits{}.withDefaults() = %+v, want %+v", got, l)
	}
}

// TestValidateSizeIsOfNormalizedSpec checks the size limits at their
// boundaries give the same verdict before and after Normalize.
func TestValidateSizeIsOfNormalizedSpec(t *testing.T) {
	g := base()
	g.Priority = -7 // inherited: ten more bytes per task once normalized
	g.Tasks[1].Command = append(g.Tasks[1].Command, strings.Repeat("p", 300))
	n := Normalize(g)
	task := proto.Size(n.Tasks[1]) - (1 + 1 + len("setup"))
	graph := proto.Size(n)
	if task <= proto.Size(g.Tasks[1])-(1+1+len("setup")) || graph <= proto.Size(g) {
		t.Fatal("normalization should have grown the encoding")
	}
	for _, c := range []struct {
		name string
		lim  func(l *Limits)
		want string
	}{
		{"task at the limit", func(l *Limits) { l.MaxTaskSpecBytes = task }, ""},
		{"task over the limit", func(l *Limits) { l.MaxTaskSpecBytes = task - 1 },
			fmt.Sprintf(`task "rollout": the spec encodes to %d bytes (depends_on not counted); the limit is %d`, task, task-1)},
		{"graph at the limit", func(l *Limits) { l.MaxGraphSpecBytes = graph }, ""},
		{"graph over the limit", func(l *Limits) { l.MaxGraphSpecBytes = graph - 1 },
			fmt.Sprintf(`graph "step-42": the spec encodes to %d bytes; the limit is %d`, graph, graph-1)},
	} {
		lim := DefaultLimits()
		c.lim(&lim)
		for _, in := range []*wire.GraphSpec{g, n} {
			err := Validate(in, lim)
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("%s: got %v, want %q", c.name, err, c.want)
			}
		}
	}
}

// Gang members may share dependencies and have dependents; only a member
// waiting for another member of its gang is refused.
func TestValidateGangSharingDependencies(t *testing.T) {
	g := &wire.GraphSpec{Id: "train-1", Tasks: []*wire.TaskSpec{
		newTask("data"), newTask("rank0", "data"), newTask("rank1", "data"), newTask("eval", "rank0", "rank1"),
		newTask("other0", "rank0"), newTask("other1", "rank1"),
	}}
	for _, n := range []string{"rank0", "rank1"} {
		named(g, n).Gang = "train"
	}
	// A second gang whose members depend on the first gang's: fine.
	for _, n := range []string{"other0", "other1"} {
		named(g, n).Gang = "post"
	}
	if err := Validate(g, DefaultLimits()); err != nil {
		t.Fatal(err)
	}
}

// An empty image suggests runtime: process only to a task that did not
// ask for docker.
func TestEmptyImageHintFitsTheRuntime(t *testing.T) {
	for _, c := range []struct {
		runtime string
		hint    bool
	}{{"", true}, {"docker", false}} {
		g := base()
		g.Tasks[0].Image, g.Tasks[0].Runtime = "", c.runtime
		err := Validate(g, DefaultLimits())
		if err == nil || strings.Contains(err.Error(), "runtime: process") != c.hint {
			t.Errorf("runtime %q: %v; want the runtime: process hint %v", c.runtime, err, c.hint)
		}
	}
}
