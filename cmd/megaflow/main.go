// Command megaflow is MegaFlow's command-line client: it submits graph files
// and follows them (submit --watch), inspects the cluster, lists graphs and
// tasks and cancels work, through the client library. `megaflow up` runs an
// embedded local cluster (one head, one worker) and `megaflow demo` one
// SWE-Gym rollout step on it. Exit codes: root.go and watch.go.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runContext(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
