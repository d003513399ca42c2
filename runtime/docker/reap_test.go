package docker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
)

// An exec's leftovers end with it: a task that leaves processes behind in
// a warm container (in its process group, its session, or a session of
// their own) does not leave them running beside the container's next
// tasks.
func TestExecLeavesNothingBehind(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	warm := e.start(e.spec("warm", "sleep", "600"))
	spec := contract.Spec{
		Command: []string{"sh", "-c", "sleep 301 & (sleep 302 &) ; setsid sleep 303 & echo started"},
		LogPath: filepath.Join(e.dir, "exec.log"),
	}
	exit, err := e.rt.Exec(ctx, warm, spec)
	if err != nil || exit.Code != 0 {
		t.Fatalf("exec: %+v, %v", exit, err)
	}
	ps := contract.Spec{Command: []string{"ps", "-o", "pid,args"}, LogPath: filepath.Join(e.dir, "ps.log")}
	if _, err := e.rt.Exec(ctx, warm, ps); err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(ps.LogPath)
	for _, left := range []string{"sleep 301", "sleep 302", "sleep 303"} {
		if strings.Contains(string(out), left) {
			t.Errorf("%q still runs in the container after its exec ended:\n%s", left, out)
		}
	}
	if !strings.Contains(string(out), "sleep 600") {
		t.Errorf("the container's own process is gone:\n%s", out)
	}
}
