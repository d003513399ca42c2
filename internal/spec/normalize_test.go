package spec

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/wire"
)

func TestNormalizeDefaults(t *testing.T) {
	g := &wire.GraphSpec{Id: "g", Priority: 7, Tasks: []*wire.TaskSpec{
		{Name: "a", DependsOn: []string{"c", "b"}, Capabilities: []string{"SYS_PTRACE", "CAP_NET_ADMIN"},
			UsesServices: []string{"z", "a"}, OutputPaths: []string{"b", "a"}, Command: []string{"z", "a"}},
		{Name: "s", Priority: -3, Kind: wire.TaskKind_TASK_KIND_SERVICE, Mode: wire.ExecutionMode_EXECUTION_MODE_PERSISTENT,
			Network: "host", Service: &wire.ServiceSpec{Name: "svc"}, Resources: &wire.Resources{CpuMillis: 5}},
		nil,
		{Name: "s2", Kind: wire.TaskKind_TASK_KIND_SERVICE, Service: &wire.ServiceSpec{Name: "svc2", TcpProbe: true}},
		{Name: "b", Network: "none", UsesServices: []string{"svc"}},
	}}
	before := proto.Clone(g)
	n := Normalize(g)
	if !proto.Equal(g, before) {
		t.Fatal("Normalize modified its input")
	}
	want := &wire.GraphSpec{Id: "g", Tenant: DefaultTenant, Priority: 7, Tasks: []*wire.TaskSpec{
		{Name: "a", DependsOn: []string{"b", "c"}, Capabilities: []string{"NET_ADMIN", "SYS_PTRACE"},
			UsesServices: []string{"a", "z"}, OutputPaths: []string{"a", "b"}, Command: []string{"z", "a"},
			Kind: wire.TaskKind_TASK_KIND_BATCH, Mode: wire.ExecutionMode_EXECUTION_MODE_EPHEMERAL,
			Network: NetworkBridge, Priority: 7, Resources: &wire.Resources{}},
		{Name: "s", Priority: -3, Kind: wire.TaskKind_TASK_KIND_SERVICE, Mode: wire.ExecutionMode_EXECUTION_MODE_PERSISTENT,
			Network: "host", Service: &wire.ServiceSpec{Name: "svc", RestartPolicy: RestartAlways}, Resources: &wire.Resources{CpuMillis: 5}},
		{Kind: wire.TaskKind_TASK_KIND_BATCH, Mode: wire.ExecutionMode_EXECUTION_MODE_EPHEMERAL,
			Network: NetworkNone, Priority: 7, Resources: &wire.Resources{}},
		// A service without a network gets bridge (its port is published);
		// an explicit "none" is kept.
		{Name: "s2", Kind: wire.TaskKind_TASK_KIND_SERVICE, Mode: wire.ExecutionMode_EXECUTION_MODE_EPHEMERAL,
			Network: NetworkBridge, Priority: 7, Resources: &wire.Resources{},
			Service: &wire.ServiceSpec{Name: "svc2", TcpProbe: true, RestartPolicy: RestartAlways}},
		{Name: "b", Kind: wire.TaskKind_TASK_KIND_BATCH, Mode: wire.ExecutionMode_EXECUTION_MODE_EPHEMERAL,
			Network: NetworkNone, Priority: 7, Resources: &wire.Resources{}, UsesServices: []string{"svc"}},
	}}
	if !proto.Equal(n, want) {
		t.Errorf("Normalize:\n got %v\nwant %v", n, want)
	}
	if nn := Normalize(nil); !proto.Equal(nn, &wire.GraphSpec{Tenant: DefaultTenant}) {
		t.Errorf("Normalize(nil) = %v", nn)
	}
}

// normalizeInputs is every graph the tests build, valid or not.
func normalizeInputs() []*wire.GraphSpec {
	gs := []*wire.GraphSpec{nil, base(), {}}
	for _, c := range invalidCases {
		gs = append(gs, c.mut(base()))
	}
	caps := base()
	caps.Tasks[0].Capabilities = []string{"CAP_CAP_X", "CAP_", "X"}
	return append(gs, caps)
}

func TestNormalizeIdempotent(t *testing.T) {
	for i, g := range normalizeInputs() {
		once := Normalize(g)
		twice := Normalize(once)
		if !proto.Equal(once, twice) {
			t.Errorf("input %d: Normalize(Normalize(g)) != Normalize(g):\n%v\n%v", i, once, twice)
		}
		if g != nil && once == g {
			t.Errorf("input %d: Normalize returned its input, not a copy", i)
		}
	}
}

func TestNormalizeIsDeep(t *testing.T) {
	g := base()
	g.Tasks[0].Resources = &wire.Resources{CpuMillis: 1}
	n := Normalize(g)
	n.Tasks[0].Resources.CpuMillis = 99
	n.Tasks[0].Command[0] = "changed"
	if g.Tasks[0].Resources.CpuMillis != 1 || g.Tasks[0].Command[0] != "python" {
		t.Error("Normalize's result shares memory with its input")
	}
}

func TestDigestEquivalentSpecs(t *testing.T) {
	pairs := []struct {
		name string
		a, b func(g *wire.GraphSpec)
	}{
		{"tenant default", func(g *wire.GraphSpec) {}, func(g *wire.GraphSpec) { g.Tenant = "default" }},
		{"kind and mode defaults", func(g *wire.GraphSpec) {}, func(g *wire.GraphSpec) {
			g.Tasks[0].Kind = wire.TaskKind_TASK_KIND_BATCH
			g.Tasks[0].Mode = wire.ExecutionMode_EXECUTION_MODE_EPHEMERAL
		}},
		{"network default", func(g *wire.GraphSpec) {}, func(g *wire.GraphSpec) { g.Tasks[1].Network = "none" }},
		{"empty resources", func(g *wire.GraphSpec) {}, func(g *wire.GraphSpec) { g.Tasks[1].Resources = &wire.Resources{} }},
		{"inherited priority", func(g *wire.GraphSpec) { g.Priority = 5 }, func(g *wire.GraphSpec) {
			g.Priority = 5
			for _, t := range g.Tasks {
				t.Priority = 5
			}
		}},
		{"depends_on order", func(g *wire.GraphSpec) { g.Tasks[2].DependsOn = []string{"rollout", "setup"} },
			func(g *wire.GraphSpec) { g.Tasks[2].DependsOn = []string{"setup", "rollout"} }},
		{"capability spelling and order", func(g *wire.GraphSpec) { g.Tasks[0].Capabilities = []string{"NET_ADMIN", "SYS_PTRACE"} },
			func(g *wire.GraphSpec) { g.Tasks[0].Capabilities = []string{"CAP_SYS_PTRACE", "CAP_NET_ADMIN"} }},
		{"restart policy default", func(g *wire.GraphSpec) { withService(g.Tasks[0], func(*wire.ServiceSpec) {}) },
			func(g *wire.GraphSpec) {
				withService(g.Tasks[0], func(s *wire.ServiceSpec) { s.RestartPolicy = RestartAlways })
			}},
		{"map insertion order", func(g *wire.GraphSpec) {
			g.Labels = map[string]string{}
			for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"} {
				g.Labels[k] = k
			}
		}, func(g *wire.GraphSpec) {
			g.Labels = map[string]string{}
			for _, k := range []string{"i", "h", "g", "f", "e", "d", "c", "b", "a"} {
				g.Labels[k] = k
			}
		}},
		{"id is not digested", func(g *wire.GraphSpec) { g.Id = "" }, func(g *wire.GraphSpec) { g.Id = "step-43" }},
		{"already normalized", func(g *wire.GraphSpec) {}, func(g *wire.GraphSpec) {
			n := Normalize(g)
			proto.Reset(g)
			proto.Merge(g, n)
		}},
	}
	for _, p := range pairs {
		a, b := base(), base()
		p.a(a)
		p.b(b)
		da, db := Digest(a), Digest(b)
		if len(da) != 32 {
			t.Fatalf("%s: digest has %d bytes, want 32", p.name, len(da))
		}
		if !bytes.Equal(da, db) {
			t.Errorf("%s: digests differ for equivalent specs", p.name)
		}
	}
}

func TestDigestDifferentSpecs(t *testing.T) {
	muts := map[string]func(g *wire.GraphSpec){
		"tenant":        func(g *wire.GraphSpec) { g.Tenant = "other" },
		"graph name":    func(g *wire.GraphSpec) { g.Name = "x" },
		"priority":      func(g *wire.GraphSpec) { g.Priority = 1 },
		"label":         func(g *wire.GraphSpec) { g.Labels = map[string]string{"a": "b"} },
		"deadline":      func(g *wire.GraphSpec) { g.DeadlineSeconds = 60 },
		"image":         func(g *wire.GraphSpec) { g.Tasks[0].Image = "python:3.13" },
		"command order": func(g *wire.GraphSpec) { g.Tasks[0].Command = []string{"run.py", "python"} },
		"env":           func(g *wire.GraphSpec) { g.Tasks[0].Env = map[string]string{"A": "1"} },
		"cpu":           func(g *wire.GraphSpec) { g.Tasks[0].Resources = &wire.Resources{CpuMillis: 1} },
		"task order":    func(g *wire.GraphSpec) { g.Tasks[0], g.Tasks[1] = g.Tasks[1], g.Tasks[0] },
		"extra task":    func(g *wire.GraphSpec) { g.Tasks = append(g.Tasks, newTask("more")) },
		"dependency":    func(g *wire.GraphSpec) { g.Tasks[2].DependsOn = append(g.Tasks[2].DependsOn, "setup") },
		"mode":          func(g *wire.GraphSpec) { g.Tasks[0].Mode = wire.ExecutionMode_EXECUTION_MODE_PERSISTENT },
		"network":       func(g *wire.GraphSpec) { g.Tasks[0].Network = "host" },
		"retries":       func(g *wire.GraphSpec) { g.Tasks[0].MaxRetries = 3 },
	}
	seen := map[string]string{string(Digest(base())): "base"}
	for name, mut := range muts {
		g := base()
		mut(g)
		d := string(Digest(g))
		if other, dup := seen[d]; dup {
			t.Errorf("%s: same digest as %s", name, other)
		}
		seen[d] = name
	}
}

func TestDigestDoesNotModifyInput(t *testing.T) {
	g := base()
	g.Tasks[0].DependsOn = []string{"z", "a"}
	before := proto.Clone(g)
	Digest(g)
	if !proto.Equal(g, before) {
		t.Error("Digest modified its input")
	}
}

func TestDigestUnencodable(t *testing.T) {
	g := base()
	g.Name = "bad \xff"
	if d := Digest(g); d != nil {
		t.Errorf("Digest of an unencodable spec = %x, want nil", d)
	}
	if Validate(g, DefaultLimits()) == nil {
		t.Error("Validate accepted a spec Digest cannot encode")
	}
}

func TestServiceEnvVar(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"model/qwen-7b", "MEGAFLOW_SERVICE_MODEL_QWEN_7B"},
		{"model", "MEGAFLOW_SERVICE_MODEL"},
		{"Model.v2/A_b", "MEGAFLOW_SERVICE_MODEL_V2_A_B"},
	} {
		if got := ServiceEnvVar(c.name); got != c.want {
			t.Errorf("ServiceEnvVar(%q) = %q, want %q", c.name, got, c.want)
		}
	}
	if err := CheckServiceName("model//x"); err == nil || !strings.Contains(err.Error(), `service name: "model//x" has an empty part`) {
		t.Errorf("CheckServiceName(model//x) = %v", err)
	}
	if err := CheckServiceName("model/qwen-7b"); err != nil {
		t.Errorf("CheckServiceName(model/qwen-7b) = %v", err)
	}
}
