// Package obs serves what operators and orchestrators read from a daemon over
// HTTP: Prometheus metrics on /metrics, liveness on /healthz and readiness on
// /readyz. The head and the worker each create one Server on their
// --http-addr and add their own routes (the head's dashboard) to its Mux.
// Each daemon owns its metrics registry (NewRegistry): nothing is registered
// in client_golang's global default registry, so several daemons share a
// process (tests) without colliding.
package obs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every MegaFlow metric name ("megaflow_").
const Namespace = "megaflow"

// NewRegistry returns a fresh registry holding the Go runtime collector and
// the process collector (CPU seconds, resident memory bytes, open file
// descriptors), as every daemon exports them.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Config configures a Server.
type Config struct {
	// Addr is the host:port to listen on; port 0 picks a free port (tests).
	Addr string
	// Registry is what /metrics serves. Required.
	Registry *prometheus.Registry
	// Ready reports whether the daemon is ready to serve: nil when ready,
	// else an error saying why not (sent as the 503 body of /readyz). nil
	// Ready: always ready.
	Ready func() error
	// Logger receives the server's errors; nil discards them.
	Logger *slog.Logger
}

// Server is a daemon's HTTP listener. New binds it; Serve serves until its
// context ends or Shutdown is called. Routes may be added to Mux before
// Serve.
type Server struct {
	cfg Config
	lis net.Listener
	srv *http.Server
	// Mux routes requests; /metrics, /healthz and /readyz are registered by
	// New. Patterns use net/http's method and wildcard syntax.
	Mux *http.ServeMux
}

// New binds cfg.Addr and registers /metrics, /healthz and /readyz. Errors
// name the address that could not be bound.
func New(cfg Config) (*Server, error) {
	if cfg.Registry == nil {
		return nil, errors.New("obs: Config.Registry is nil: give the daemon's registry (obs.NewRegistry)")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	lis, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("http listen on %s: %w (choose another --http-addr, or an empty one to serve no HTTP)", cfg.Addr, err)
	}
	s := &Server{cfg: cfg, lis: lis, Mux: http.NewServeMux()}
	s.Mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{
		Registry:          cfg.Registry, // promhttp_metric_handler_errors_total lands here too
		ErrorLog:          slogPrinter{cfg.Logger},
		EnableOpenMetrics: true,
	}))
	s.Mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	s.Mux.HandleFunc("GET /readyz", s.readyz)
	s.srv = &http.Server{Handler: s.Mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	return s, nil
}

// Addr returns the address the server listens on (the real port when the
// configured one was 0).
func (s *Server) Addr() string { return s.lis.Addr().String() }

// URL returns "http://" + Addr().
func (s *Server) URL() string { return "http://" + s.Addr() }

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
	}
	_, _ = w.Write([]byte("ready\n"))
}

// Serve serves HTTP until ctx ends or Shutdown is called, then returns nil;
// other errors are the listener's. The caller owns the goroutine it runs on.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(sctx)
	})
	defer stop()
	if err := s.srv.Serve(s.lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http on %s: %w", s.Addr(), err)
	}
	return nil
}

// Shutdown stops accepting connections and waits for requests in flight
// until ctx ends; long-lived streams (the dashboard's event stream) end
// when their handlers see the server's base context or the client go. It
// also closes the listener when Serve was never called.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	_ = s.lis.Close()
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return s.srv.Close()
	}
	return err
}

// slogPrinter adapts a slog.Logger to promhttp's Logger (Println).
type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.l.Warn("metrics: " + fmt.Sprint(v...)) }
