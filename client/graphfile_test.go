package client_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
)

func TestParseGraphYAMLErrors(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"empty", "", "empty file"},
		{"not yaml", "tasks: [a", "graph.yaml:"},
		{"unknown top field", "id: g\ntaks: []\n", "graph.yaml:2: taks: unknown field (known: id, tenant"},
		{"unknown task field", "tasks:\n  - name: a\n    image: x\n    comand: [true]\n", "graph.yaml:4: tasks[0].comand: unknown field"},
		{"bad int", "tasks:\n  - name: a\n    image: x\n    command: [\"true\"]\n    resources: {cpu_millis: lots}\n",
			`graph.yaml:5: tasks[0].resources.cpu_millis: "lots" is not a whole number of millicores`},
		{"bad enum", "tasks:\n  - name: a\n    image: x\n    command: [\"true\"]\n    mode: warm\n",
			`graph.yaml:5: tasks[0].mode: "warm" is not one of ephemeral, persistent`},
		{"list expected", "tasks:\n  - name: a\n    image: x\n    command: true\n", "graph.yaml:4: tasks[0].command: want a list"},
		{"int32 overflow", "priority: 99999999999\ntasks: []\n", "graph.yaml:1: priority: 99999999999 is out of range"},
		{"invalid graph", "id: step-42\ntasks:\n  - name: eval\n    image: x\n    command: [\"true\"]\n    depends_on: [rollot]\n",
			`graph.yaml:6: graph "step-42": task "eval": depends_on: unknown task "rollot"`},
		{"invalid nested field", "id: g\ntasks:\n  - name: a\n    image: x\n    command: [\"true\"]\n    resources:\n      cpu_millis: -5\n",
			`graph.yaml:7: graph "g": task "a": resources.cpu_millis: -5 is negative`},
		{"gang member waits for another", "id: g\ntasks:\n  - {name: a, image: x, command: [\"true\"], gang: train}\n" +
			"  - name: b\n    image: x\n    command: [\"true\"]\n    depends_on: [a]\n    gang: train\n",
			`graph.yaml:8: graph "g": task "b": gang: "train": the task depends, directly or through other tasks, on task "a" of its own gang`},
		{"a task as a whole", "id: g\ntasks:\n  - name: a\n    image: x\n    command: [\"true\"]\n  - name: a\n    image: y\n    command: [\"true\"]\n",
			`graph.yaml:6: graph "g": tasks[1]: name: "a" is also the name of tasks[0]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := client.ParseGraphYAML("graph.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("parsed %v; want an error containing %q", g, tc.want)
			}
			if !errors.Is(err, errs.ErrInvalidArgument) {
				t.Errorf("error class %v, want invalid argument", errs.ClassOf(err))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\n does not contain %q", err, tc.want)
			}
		})
	}
}

func TestParseGraphYAMLMapsOntoTheAPI(t *testing.T) {
	g, err := client.ParseGraphYAML("g.yaml", []byte(`
id: step-1
tenant: team-a
labels: {experiment: demo}
tasks:
  - &base
    name: setup
    image: swe/django:1
    command: [/bin/sh, -c, "echo hi"]
    resources: {cpu_millis: 500, memory_bytes: 512Mi, gpus: 1, gpu_model: H100}
    mode: persistent
    session: s1
    kind: TASK_KIND_BATCH
  - name: rollout
    image: swe/django:1
    command: [/agent]
    depends_on: [setup]
    max_retries: 2
    timeout_seconds: 1_800
    env: {STEPS: "20"}
    run_on_upstream_failure: true
`))
	if err != nil {
		t.Fatal(err)
	}
	if g.Id != "step-1" || g.Tenant != "team-a" || g.Labels["experiment"] != "demo" || len(g.Tasks) != 2 {
		t.Fatalf("graph header: %v", g)
	}
	s := g.Tasks[0]
	if s.Resources.MemoryBytes != 512<<20 || s.Resources.Gpus != 1 || s.Resources.GpuModel != "H100" ||
		s.Mode != client.ModePersistent || s.Session != "s1" || len(s.Command) != 3 {
		t.Fatalf("setup task: %v", s)
	}
	r := g.Tasks[1]
	if r.TimeoutSeconds != 1800 || r.MaxRetries != 2 || r.Env["STEPS"] != "20" || !r.RunOnUpstreamFailure || r.DependsOn[0] != "setup" {
		t.Fatalf("rollout task: %v", r)
	}
}

func TestExamplesParse(t *testing.T) {
	files, _ := filepath.Glob("../examples/*.yaml")
	if len(files) == 0 {
		t.Fatal("no example graph files found in examples/")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.ParseGraphYAML(f, data); err != nil {
			t.Errorf("%v", err)
		}
	}
}

func TestParseGraphYAMLMergeKeys(t *testing.T) {
	g, err := client.ParseGraphYAML("g.yaml", []byte(`
tasks:
  - &base
    name: a
    image: img
    command: [x, y]
    env: {A: "1"}
  - {<<: *base, name: b, command: [z], depends_on: [a]}
`))
	if err != nil {
		t.Fatal(err)
	}
	b := g.Tasks[1]
	if b.Name != "b" || b.Image != "img" || len(b.Command) != 1 || b.Command[0] != "z" || b.Env["A"] != "1" {
		t.Fatalf("merged task %v", b)
	}
}
