// Command megaflow is MegaFlow's command-line client: it inspects the cluster,
// lists graphs and tasks, and cancels work, through the client library.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
