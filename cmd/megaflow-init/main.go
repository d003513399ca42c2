// Command megaflow-init is the init of every task the worker starts: PID 1
// of its containers and the parent of its process-runtime tasks. It reaps
// zombies, forwards signals to the task's process group, and kills the
// task's tree when the worker's lease lapses (internal/leaseinit). It is
// built static (CGO_ENABLED=0) so that it runs in any image, FROM scratch
// included; the worker finds it next to its own executable or through
// --init-path.
package main

import (
	"os"

	"github.com/megaflow/megaflow/internal/leaseinit"
)

func main() { os.Exit(leaseinit.Main(os.Args[1:], os.Stderr)) }
