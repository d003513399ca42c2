package client_test

import (
	"os"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/client"
)

// The Model Service examples parse and validate (TestExamplesParse), and
// say what their comments promise: the GPUs, the service names and the
// variables the rollouts read.
func TestModelServiceExamples(t *testing.T) {
	parse := func(name string) *client.GraphSpec {
		t.Helper()
		data, err := os.ReadFile("../examples/" + name)
		if err != nil {
			t.Fatal(err)
		}
		g, err := client.ParseGraphYAML(name, data)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for _, c := range []struct {
		file, service, cmd string
		gpus               int32
	}{
		{"vllm-server.yaml", "model/qwen-7b", `vllm serve Qwen/Qwen2.5-7B-Instruct`, 1},
		{"vllm-server-tp2.yaml", "model/qwen-32b", `--tensor-parallel-size 2`, 2},
		{"sglang-server.yaml", "model/qwen-7b-sglang", `sglang.launch_server`, 1},
	} {
		srv := parse(c.file).Tasks[0]
		if srv.Kind != client.KindService || srv.Service.GetName() != c.service || srv.Resources.GetGpus() != c.gpus ||
			srv.Service.GetReadinessHttpPath() != "/health" || !strings.Contains(strings.Join(srv.Command, " "), c.cmd) ||
			!strings.Contains(strings.Join(srv.Command, " "), `--port "$PORT"`) {
			t.Errorf("%s: server task %v", c.file, srv)
		}
	}
	g := parse("vllm-server.yaml")
	for _, r := range g.Tasks[1:] {
		if len(r.UsesServices) != 1 || r.UsesServices[0] != "model/qwen-7b" ||
			!strings.Contains(strings.Join(r.Command, " "), client.ServiceEnvVar("model/qwen-7b")) {
			t.Errorf("rollout %s does not read the endpoints of model/qwen-7b: %v", r.Name, r)
		}
	}
	train := parse("fsdp-train-8gpu.yaml").Tasks[0]
	if train.Kind == client.KindService || train.Resources.GetGpus() != 8 || !strings.Contains(strings.Join(train.Command, " "), "--nproc_per_node=8") {
		t.Errorf("trainer %v", train)
	}
	two := parse("fsdp-train-2node.yaml")
	for i, n := range two.Tasks {
		cmd := strings.Join(n.Command, " ")
		if n.Gang != "train" || n.Resources.GetGpus() != 8 || !strings.Contains(cmd, "--node_rank=$MEGAFLOW_GANG_RANK") ||
			!strings.Contains(cmd, "--master_addr=$MEGAFLOW_GANG_LEADER_HOST") || n.Name != []string{"node-0", "node-1"}[i] {
			t.Errorf("2-node trainer %v", n)
		}
	}
}
