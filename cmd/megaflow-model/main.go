// Command megaflow-model is the demo's model server: a small
// OpenAI-compatible chat-completions server (examples/demo.ModelHandler)
// that answers every request with one execute_bash tool call. It listens
// on 0.0.0.0:$PORT (the port a worker assigns a service task), or on
// --addr, and stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/megaflow/megaflow/examples/demo"
	"github.com/megaflow/megaflow/internal/version"
)

func main() {
	addr := flag.String("addr", "", "host:port to listen on (default 0.0.0.0:$PORT)")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("megaflow-model", version.Get())
		return
	}
	if *addr == "" {
		port := os.Getenv("PORT")
		if port == "" {
			fmt.Fprintln(os.Stderr, "megaflow-model: no port: set PORT (a service task gets it from its worker) or give --addr")
			os.Exit(2)
		}
		*addr = net.JoinHostPort("0.0.0.0", port)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: *addr, Handler: demo.ModelHandler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Printf("megaflow-model: serving %s on %s\n", demo.ModelName, *addr)
	select {
	case err := <-errc:
		fmt.Fprintln(os.Stderr, "megaflow-model:", err)
		os.Exit(1)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "megaflow-model:", err)
	}
}
