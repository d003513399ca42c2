// Package docker is MegaFlow's container runtime on a Docker Engine: it
// implements contract.Runtime (one container per task attempt), and the
// optional contract.Execer (commands in a persistent mode's warm
// containers) and contract.Logger, through github.com/moby/moby/client.
//
// It owns the mapping from a contract.Spec to a container (resource limits,
// capabilities, network, GPUs), the goroutines that copy each container's
// output into its log file, and the translation of the engine's errors
// into the contract's classes. Every call to the engine carries a deadline
// (Config.CallTimeout): an engine that accepts connections but never
// answers shows up as contract.ErrUnavailable, never as a hang. Calls that
// stream (Wait, the log copies, Exec) have the deadline on getting the
// engine's first answer, and the caller's context for the rest.
//
// Only worker/ (and cmd/megaflow-worker, which builds it) imports it.
package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/moby/moby/client"

	"github.com/megaflow/megaflow/internal/clock"
	"github.com/megaflow/megaflow/runtime/contract"
)

var (
	_ contract.Runtime = (*Runtime)(nil)
	_ contract.Execer  = (*Runtime)(nil)
	_ contract.Logger  = (*Runtime)(nil)
	_ contract.Adopter = (*Runtime)(nil)
)

// Config configures a Runtime. The zero value of each field means its
// default (DefaultConfig).
type Config struct {
	// Host is the engine's address, e.g. "unix:///var/run/docker.sock" or
	// "tcp://10.0.0.5:2375". "": the environment's DOCKER_HOST (and
	// DOCKER_TLS_VERIFY, DOCKER_CERT_PATH, DOCKER_API_VERSION), else the
	// local socket.
	Host string
	// CallTimeout bounds each call to the engine (for a streaming call,
	// the wait for its first answer); default 30s.
	CallTimeout time.Duration
	// Logger receives what the runtime cannot return: a log copy that
	// failed, a cleanup that did not work. nil: discard.
	Logger *slog.Logger
	// DefaultPidsLimit bounds the processes of a container whose Spec sets
	// no PidsLimit; default 1024; negative: no bound.
	DefaultPidsLimit int64
	// Clock is the runtime's own time: the backoffs of its retries and
	// polls (re-following a log stream, the final log reads, an exec's
	// exit and kill), the deadline of an exec's kill from the host, and an
	// Exec's StartedAt and FinishedAt. nil: clock.Real (what the worker
	// daemon uses); tests pass a clock.Fake. CallTimeout is not on it: it
	// bounds waits on the engine, a real process, mostly through context
	// deadlines, which only the system clock can end; all of its timers stay
	// on the system clock too, so that one bound means one clock.
	Clock clock.Clock
}

// DefaultConfig returns the configuration New uses for zero fields.
func DefaultConfig() Config {
	return Config{CallTimeout: 30 * time.Second, DefaultPidsLimit: 1024}
}

// Validate reports the first field out of bounds, by name.
func (c Config) Validate() error {
	if c.CallTimeout < 0 {
		return fmt.Errorf("docker: Config.CallTimeout %v: must be >= 0 (0 means %v)", c.CallTimeout, DefaultConfig().CallTimeout)
	}
	if c.CallTimeout > 0 && c.CallTimeout < 10*time.Millisecond {
		return fmt.Errorf("docker: Config.CallTimeout %v: must be at least 10ms", c.CallTimeout)
	}
	return nil
}

// Runtime runs task attempts as Docker containers. It is safe for
// concurrent use; the worker creates one with New and calls Close on
// shutdown.
type Runtime struct {
	cfg   Config
	cli   *client.Client
	log   *slog.Logger
	clock clock.Clock // cfg.Clock, or clock.Real

	mu     sync.Mutex
	copies map[string]*logCopy // container id -> its log copy
	// killed: the containers this runtime stopped, removed or killed, with
	// why when it killed one for a cancelled exec ("" for a stop or remove).
	killed map[string]string
	closed bool
	wg     sync.WaitGroup // log copies

	// killGroup kills an exec's process group from the host, and
	// procVisible reports whether host process pid is a process of
	// container containerID as seen in /proc; tests replace them to
	// exercise the fallback.
	killGroup   func(pid int, containerID string) error
	procVisible func(pid int, containerID string) bool
}

// New returns a Runtime for cfg's engine. It does no I/O: the engine is
// first contacted (and the API version negotiated) by the first call; use
// Ping to check it at start-up. Errors: an invalid Config or Host.
func New(cfg Config) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	def := DefaultConfig()
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = def.CallTimeout
	}
	if cfg.DefaultPidsLimit == 0 {
		cfg.DefaultPidsLimit = def.DefaultPidsLimit
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	opts := []client.Opt{client.FromEnv}
	if cfg.Host != "" {
		opts = append(opts, client.WithHost(cfg.Host))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker: client for %q: %w", cfg.Host, err)
	}
	return &Runtime{cfg: cfg, cli: cli, log: log.With("runtime", "docker"), clock: clk, copies: map[string]*logCopy{}, killed: map[string]string{}, killGroup: killHostGroup, procVisible: procOf}, nil
}

// Name returns "docker".
func (r *Runtime) Name() string { return "docker" }

// Client returns the engine client, for what the contract does not cover
// (image lists, builds in tests). The Runtime still owns it.
func (r *Runtime) Client() *client.Client { return r.cli }

// Ping checks that the engine answers within CallTimeout and negotiates
// the API version. The worker calls it at start-up. Errors:
// contract.ErrUnavailable, or ctx's error.
func (r *Runtime) Ping(ctx context.Context) error {
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	_, err := r.cli.Ping(cctx, client.PingOptions{NegotiateAPIVersion: true})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("docker ping %s: %w", r.cli.DaemonHost(), ctx.Err())
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("docker ping %s: %w: no answer within %v", r.cli.DaemonHost(), contract.ErrUnavailable, r.cfg.CallTimeout)
	}
	return fmt.Errorf("docker ping %s: %w: %v", r.cli.DaemonHost(), contract.ErrUnavailable, err)
}

// Close stops the log copies (the containers keep running) and closes the
// client's idle connections. The worker calls it once, on shutdown, after
// its last Start: containers started later get no log copy.
func (r *Runtime) Close() error {
	r.mu.Lock()
	r.closed = true
	for _, c := range r.copies {
		c.cancel()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return r.cli.Close()
}

// callCtx returns ctx bounded by CallTimeout, for one unary call.
func (r *Runtime) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.cfg.CallTimeout)
}

// streamCtx returns a context for a streaming call: it is cancelled when
// ctx ends, and by a timer after CallTimeout unless answered is called
// first. answered reports false when the timer had already fired (the
// engine did not answer in time). Call cancel when the stream is done.
// The timer is on the system clock, as every CallTimeout is (Config.Clock).
func (r *Runtime) streamCtx(ctx context.Context) (sctx context.Context, answered func() bool, cancel context.CancelFunc) {
	sctx, stop := context.WithCancel(ctx)
	timer := time.AfterFunc(r.cfg.CallTimeout, stop)
	return sctx, timer.Stop, func() { timer.Stop(); stop() }
}

// cleanupCtx returns a context for a call that must run to its answer
// even when ctx was cancelled, still bounded by CallTimeout: cleanup after
// a failure, and a create, which the engine would finish unseen.
func (r *Runtime) cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), r.cfg.CallTimeout)
}
