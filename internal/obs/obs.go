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
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every MegaFlow metric name ("megaflow_").
const Namespace = "megaflow"

// Registry is a daemon's metrics registry: a prometheus.Registry that also
// remembers its collectors, so that Names can list every metric the daemon
// may export (deploy/'s test checks the alert rules and the Grafana
// dashboard against it).
type Registry struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

// NewRegistry returns a fresh registry holding the Go runtime collector and
// the process collector (CPU seconds, resident memory bytes, open file
// descriptors), as every daemon exports them. The Go collector exports
// go_memstats_* and go_gc_duration_seconds as by default, plus the
// runtime's memory classes (go_memory_classes_*_bytes: live heap objects,
// free heap not yet returned to the OS, released, stacks, metadata) and
// its GC series (go_gc_*), which tell retained-but-free memory from live
// growth when a daemon's RSS climbs.
func NewRegistry() *Registry {
	r := &Registry{Registry: prometheus.NewRegistry()}
	r.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsMemory, collectors.MetricsGC)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Register registers c, as prometheus.Registry's Register does.
func (r *Registry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

// MustRegister registers cs and panics on an error (a programming error:
// two metrics of one name).
func (r *Registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Names returns the metric family names of the collectors registered with
// a "megaflow_" prefix, sorted, whether or not they have a sample yet.
func (r *Registry) Names() []string { return MetricNames(r.collectors...) }

// fqName matches the name in a prometheus.Desc's String form, the only
// place a Desc shows it.
var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// MetricNames returns the "megaflow_" metric family names the collectors
// describe, sorted and without duplicates.
func MetricNames(cs ...prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	set := map[string]bool{}
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil && strings.HasPrefix(m[1], Namespace+"_") {
			set[m[1]] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// Config configures a Server.
type Config struct {
	// Addr is the host:port to listen on; port 0 picks a free port (tests).
	Addr string
	// Registry is what /metrics serves. Required.
	Registry *Registry
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
		Registry:          cfg.Registry.Registry, // promhttp_metric_handler_errors_total lands here too
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
