// Package deptest checks that imports flow one way (cmd -> head, worker, client -> runtime, gpu, internal): a user's
// program that imports the client library links no server code, and the
// pure packages (state, fsm, spec, the scheduler, the worker's attempt
// life cycle) link no consensus, gossip, storage, Docker or NVML code;
// nothing outside head/ imports head/state; the small programs that go
// into containers (megaflow-agent, megaflow-sh) link almost nothing.
// Every import rule of the module lives here. (Every package that speaks
// the wire API links gRPC: the generated stubs share the wire package.)
package deptest

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/megaflow/megaflow/"

func deps(t *testing.T, pkg string) map[string]bool {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", module+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	set := map[string]bool{}
	for _, line := range strings.Fields(string(out)) {
		set[line] = true
	}
	return set
}

func TestImportsFlowOneWay(t *testing.T) {
	cases := []struct {
		pkg       string
		forbidden []string
		why       string
	}{
		{"client", []string{"github.com/hashicorp/raft", "github.com/hashicorp/memberlist", "github.com/hashicorp/go-memdb",
			"go.etcd.io/bbolt", "github.com/moby/moby", "github.com/NVIDIA/go-nvml", module + "head", module + "worker",
			module + "runtime", module + "gpu"},
			"a user's binary links the wire API only: no Raft, gossip, Docker or NVML"},
		{"examples/demo", []string{"github.com/hashicorp/raft", "github.com/hashicorp/memberlist", "github.com/moby/moby",
			"github.com/NVIDIA/go-nvml", module + "head", module + "worker", module + "runtime", module + "gpu"},
			"the demo's graph builder, agent and model server are client code: they link the client library only"},
		{"cmd/megaflow-agent", []string{"google.golang.org/grpc", module + "client", module + "head", module + "worker"},
			"the agent inside a task's container is a small static program: no RPC stack, no MegaFlow code"},
		{"head/state", []string{"github.com/hashicorp/raft", "github.com/hashicorp/memberlist", "go.etcd.io/bbolt",
			module + "head/fsm", module + "head/consensus", module + "internal/gossip", "github.com/prometheus/client_golang"},
			"the state store is pure: no consensus, gossip, disk or metrics"},
		{"head/fsm", []string{"go.etcd.io/bbolt", "github.com/hashicorp/raft-boltdb", "github.com/hashicorp/memberlist",
			module + "head/consensus", module + "internal/gossip", "github.com/prometheus/client_golang"},
			"the FSM is pure: applying a log entry does no I/O and keeps no metrics (head/metrics.go reads views)"},
		{"internal/cluster", []string{module + "internal/testcluster", module + "runtime/fake", module + "runtime/docker", module + "runtime/process"},
			"the in-process cluster serves `megaflow up`, the benchmark harness and the tests alike: the caller gives the runtime, and the test helpers wrap it (internal/testcluster), not the other way"},
		{"internal/spec", []string{"github.com/hashicorp/", module + "head", module + "client"},
			"validation is pure and shared by the head and the client"},
		{"internal/admission", []string{"github.com/hashicorp/", module + "head", module + "worker", module + "client", module + "runtime"},
			"the admission policy's logic is pure and shared by the head's state store, its service and the worker"},
		{"internal/acl", []string{"github.com/hashicorp/", module + "head", module + "worker", module + "client", module + "runtime"},
			"the ACL decision is pure: roles, the method table and Authorize; the head keeps the tokens"},
		{"internal/blob/spool", []string{"github.com/aws/", module + "internal/blob/s3blob"},
			"the blob contract, the file store and the spool link no S3 SDK; only composition roots pick s3blob"},
		{"internal/blob/fileblob", []string{"github.com/aws/", module + "internal/blob/s3blob"},
			"the file store links no S3 SDK"},
		{"internal/chaos/harness", []string{"github.com/hashicorp/raft", "github.com/hashicorp/memberlist", module + "head", module + "worker",
			module + "runtime"},
			"the chaos harness drives the real binaries from outside, through the client library: it links no head or worker code"},
		{"internal/chaos/check", []string{"google.golang.org/grpc", module + "client", module + "internal/wire"},
			"the verdict is pure: histories and tables in, a verdict out"},
		{"client", []string{"github.com/goreleaser/nfpm"}, "packaging (nFPM and its Git, PGP and template dependencies) is cmd/megaflow-release's alone"},
		{"cmd/megaflow-head", []string{"github.com/goreleaser/nfpm"}, "packaging is cmd/megaflow-release's alone"},
		{"cmd/megaflow-worker", []string{"github.com/goreleaser/nfpm"}, "packaging is cmd/megaflow-release's alone"},
		{"cmd/megaflow", []string{"github.com/goreleaser/nfpm"}, "packaging is cmd/megaflow-release's alone"},
		{"head/fsm", []string{module + "internal/clock"},
			"the FSM reads no clock: the leader stamps times into the command"},
		{"internal/tlsconfig", []string{"github.com/hashicorp/", module + "head", module + "worker", module + "client", module + "runtime"},
			"the TLS package is a leaf the client library, the head, the worker and cmd/ share: certificates, roles and tls.Configs only"},
		{"head/scheduler", []string{module + "internal/clock"},
			"the scheduler has no hidden clock: the time it needs comes in its parameters"},
		{"worker/attempt", []string{module + "runtime/docker", module + "runtime/process", module + "runtime/fake",
			module + "internal/gossip", "github.com/hashicorp/memberlist", "github.com/moby/moby", "os/exec"},
			"the life cycle must stay a pure state machine: no runtime implementation, gossip, Docker client or process spawning " +
				"(the wire types it uses link gRPC and net/http, which it never calls)"},
		{"worker/attempt", []string{module + "worker"},
			"the life cycle must stay a pure state machine, apart from the worker that drives it"},
	}
	for _, tc := range cases {
		t.Run(tc.pkg, func(t *testing.T) {
			got := deps(t, tc.pkg)
			// A rule about a parent (worker) never forbids the package
			// under test (worker/attempt) or what is below it.
			delete(got, module+tc.pkg)
			for d := range got {
				if strings.HasPrefix(d, module+tc.pkg+"/") {
					delete(got, d)
				}
			}
			for _, f := range tc.forbidden {
				for d := range got {
					if d == f || strings.HasPrefix(d, f+"/") {
						t.Errorf("%s imports %s: %s", tc.pkg, d, tc.why)
					}
				}
			}
		})
	}
}

// TestOnlyAllowedImports checks the packages that may link nothing but the
// standard library and a short list: each package that pkg links, outside
// the standard library, must be one of allowed or, for an entry ending in
// "/", below it.
func TestOnlyAllowedImports(t *testing.T) {
	cases := []struct {
		pkg     string
		allowed []string
		why     string
	}{
		{"head/scheduler", []string{module + "head/scheduler", module + "internal/resources", module + "gpu/alloc"},
			"it must stay a pure function of its input (no state store, Raft, gRPC or I/O packages of the module)"},
		{"cmd/megaflow-sh", []string{"mvdan.cc/sh/", "golang.org/x/", module + "internal/shellbox", module + "internal/version", module + "cmd/megaflow-sh"},
			"it goes into every demo image as their shell, and must stay a small static program (mvdan.cc/sh and the standard library)"},
		{"examples/demo/agent", []string{module + "examples/demo/agent"},
			"the agent's steps run inside every demo image (cmd/megaflow-agent) and in megaflow demo --mode sandbox: the standard library only"},
	}
	for _, tc := range cases {
		t.Run(tc.pkg, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+tc.pkg).Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", tc.pkg, err)
			}
			for _, d := range strings.Fields(string(out)) {
				ok := false
				for _, a := range tc.allowed {
					ok = ok || d == a || strings.HasSuffix(a, "/") && strings.HasPrefix(d, a)
				}
				if !ok {
					t.Errorf("%s links %s: %s", tc.pkg, d, tc.why)
				}
			}
		})
	}
}

// internal/clock imports nothing of the module: the head, the worker and
// the fake runtime all take it, so anything it imported could never import
// a clock.
func TestClockIsALeaf(t *testing.T) {
	const pkg = module + "internal/clock"
	for d := range deps(t, "internal/clock") {
		if strings.HasPrefix(d, module) && d != pkg {
			t.Errorf("internal/clock imports %s: it is a leaf that every layer injects", d)
		}
	}
}

// Nothing outside head/ imports head/state (in its code or its tests): the
// table's Go types and constants are the head's inside. Everyone else reads
// tasks through the wire API (client, internal/wire), where a reason is
// classified by its ReasonCode, never by comparing the head's prose, so the
// head may reword a reason or reshape its rows without breaking the CLI,
// the dashboard, the bench or the chaos checks.
func TestOnlyTheHeadImportsState(t *testing.T) {
	out, err := exec.Command("go", "list", "-f",
		`{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`, module+"...").Output()
	if err != nil {
		t.Fatalf("go list %s...: %v", module, err)
	}
	const state = module + "head/state"
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg := fields[0]
		if pkg == module+"head" || strings.HasPrefix(pkg, module+"head/") {
			continue
		}
		for _, imp := range fields[1:] {
			if imp == state {
				t.Errorf("%s imports %s: outside head/, read tasks through the wire API and compare ReasonCode, not the head's types or prose", pkg, state)
			}
		}
	}
}
