package spec

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/megaflow/megaflow/internal/wire"
)

// newTask returns a valid batch task depending on deps.
func newTask(name string, deps ...string) *wire.TaskSpec {
	return &wire.TaskSpec{
		Name:      name,
		Image:     "python:3.12-slim",
		Command:   []string{"python", "run.py"},
		DependsOn: deps,
	}
}

// base returns a valid graph: setup <- rollout <- eval.
func base() *wire.GraphSpec {
	return &wire.GraphSpec{Id: "step-42", Tasks: []*wire.TaskSpec{
		newTask("setup"),
		newTask("rollout", "setup"),
		newTask("eval", "rollout"),
	}}
}

// named returns the task of g called name.
func named(g *wire.GraphSpec, name string) *wire.TaskSpec {
	for _, t := range g.Tasks {
		if t.GetName() == name {
			return t
		}
	}
	panic("no task " + name)
}

// unknownField encodes field number num as a varint, as a newer client would
// send a field this version does not know.
func unknownField(num protowire.Number) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), 1)
}

// service returns a valid service task.
func serviceTask(name string) *wire.TaskSpec {
	t := newTask(name)
	t.Kind = wire.TaskKind_TASK_KIND_SERVICE
	t.Service = &wire.ServiceSpec{Name: "model/qwen-7b", Port: 8000, ReadinessHttpPath: "/health"}
	return t
}

const gib = 1 << 30
