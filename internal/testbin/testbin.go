// Package testbin gives tests the module's commands as executables: the
// ones `make build` put in $MEGAFLOW_BIN_DIR when it is set (as `make
// test` sets it, after building them, so the tests run the binaries users
// run and no test package compiles them again), else each built once per
// test process with `go build`, as `make build` builds it (static, but
// megaflow-worker with cgo for NVML).
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// EnvDir names the environment variable holding a directory of built
// commands (`make build`'s bin/).
const EnvDir = "MEGAFLOW_BIN_DIR"

const module = "github.com/megaflow/megaflow/cmd/"

// built caches, per test process, the directory each command was built
// into when EnvDir is unset: a test binary is one process, and each of its
// tests asking for megaflow-init should not link it again.
var built = struct {
	sync.Mutex
	dirs map[string]string
}{dirs: map[string]string{}}

// Dir returns a directory holding every one of cmds (names of cmd/
// directories, e.g. "megaflow-worker"), side by side: a worker finds
// megaflow-init next to itself. From EnvDir when set (failing t, with what
// to run, when one is missing there); else built together into a
// directory of this test process (removed when the process exits only by
// the OS's temp cleanup: the binaries outlive one test, on purpose).
func Dir(t testing.TB, cmds ...string) string {
	t.Helper()
	if dir := os.Getenv(EnvDir); dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			t.Fatalf("%s=%s: %v", EnvDir, dir, err)
		}
		for _, c := range cmds {
			if _, err := os.Stat(filepath.Join(abs, c)); err != nil {
				t.Fatalf("%s=%s lacks %s (%v): run `make build`, or unset %s to build it here", EnvDir, dir, c, err, EnvDir)
			}
		}
		return abs
	}
	key := fmt.Sprint(cmds)
	built.Lock()
	defer built.Unlock()
	if d, ok := built.dirs[key]; ok {
		return d
	}
	d, err := os.MkdirTemp("", "megaflow-testbin-")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		cmd := exec.Command("go", "build", "-o", filepath.Join(d, c), module+c)
		if c != "megaflow-worker" { // the worker links NVML with cgo where a C compiler is
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", c, err, out)
		}
	}
	built.dirs[key] = d
	return d
}

// Path returns the path of one command, as Dir.
func Path(t testing.TB, cmd string) string {
	t.Helper()
	return filepath.Join(Dir(t, cmd), cmd)
}
