package attempt

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPure checks that the state machine links no I/O of its own: no
// runtime implementation, gossip, Docker client, process spawning or the
// worker that drives it. (The wire types it uses link gRPC and net/http,
// which it never calls.)
func TestPure(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/megaflow/megaflow/worker/attempt").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := []string{
		"github.com/megaflow/megaflow/runtime/docker", "github.com/megaflow/megaflow/runtime/process",
		"github.com/megaflow/megaflow/runtime/fake", "github.com/megaflow/megaflow/internal/gossip",
		"github.com/hashicorp/memberlist", "github.com/moby/moby", "os/exec",
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "github.com/megaflow/megaflow/worker" {
			t.Errorf("worker/attempt depends on the worker that drives it")
		}
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("worker/attempt depends on %s: the life cycle must stay a pure state machine", dep)
			}
		}
	}
}
