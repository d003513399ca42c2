// Command megaflow-init is the init of every task the worker starts: PID 1
// of its containers and, run once per worker with --spawn-fd, the parent
// of its process-runtime tasks. It reaps zombies, forwards signals to the
// task's process group, and kills the tasks' trees when the worker's lease
// lapses (internal/leaseinit). It is
// built static (CGO_ENABLED=0) so that it runs in any image, FROM scratch
// included; the worker finds it next to its own executable or through
// --init-path. `megaflow-init --version` prints its build and exits.
package main

import (
	"fmt"
	"os"

	"github.com/megaflow/megaflow/internal/leaseinit"
	"github.com/megaflow/megaflow/internal/version"
)

func main() {
	// --version alone, before leaseinit's flags: every other argument list
	// belongs to a task, whose own --version must reach it after "--".
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println("megaflow-init", version.Get())
		return
	}
	os.Exit(leaseinit.Main(os.Args[1:], os.Stderr))
}
