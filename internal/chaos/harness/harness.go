// Package harness owns the chaos harness's run: it builds a network of
// hosts (internal/chaos/netns), starts 3 megaflow-head and N
// megaflow-worker processes on them (the real binaries, process runtime),
// drives a workload from several clients through the Go client library
// while it injects the faults of a seeded schedule (internal/chaos/fault),
// records every client operation (internal/chaos/history), then heals the
// cluster, waits for it to settle, reads every head's table, stops it and
// computes the verdict (internal/chaos/check).
//
// It talks to the cluster through the client library only and links no
// head or worker code. Imported by cmd/megaflow-bench.
package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/chaos/check"
	"github.com/megaflow/megaflow/internal/chaos/fault"
	"github.com/megaflow/megaflow/internal/chaos/history"
	"github.com/megaflow/megaflow/internal/chaos/netns"
)

// Config is one run.
type Config struct {
	// HeadBin, WorkerBin and InitBin are the megaflow-head,
	// megaflow-worker and megaflow-init binaries (make build puts them in
	// bin/). Every worker gets InitBin as its --init-path, so that each
	// task runs under megaflow-init as in production.
	HeadBin, WorkerBin, InitBin string
	// Workers is the number of worker hosts (1 to 20).
	Workers int
	// Clients is the number of concurrent workload clients (1 to 64).
	Clients int
	// Seed drives the fault schedule and the workload's choices.
	Seed uint64
	// Profile bounds the faults; its Duration is the workload's length.
	Profile fault.Profile
	// Dir holds the run: hosts' data, logs, execution files. It is kept
	// when the run fails (or Keep is set) and removed otherwise.
	Dir  string
	Keep bool
	// Lease and LeaseMargin are the heads' --worker-lease and
	// --worker-lease-margin (docs/reliability.md, Worker leases). The
	// workers heartbeat every Lease/6 (--heartbeat-interval), the ratio of
	// production's 2 s to 10 s with room for a loaded machine.
	Lease, LeaseMargin time.Duration
	// OpTimeout bounds one client call; a call that times out has an
	// unknown outcome.
	OpTimeout time.Duration
	// Pace is the mean pause of a client between two operations.
	Pace time.Duration
	// Break applies a deliberately broken build to the verdict's input
	// ("duplicate-result": check.InjectDuplicateResult), to show that the
	// verdict fails; "" for none.
	Break string
	// Progress receives one line per phase and per fault (nil: none).
	Progress io.Writer
}

// DefaultConfig returns a run of the short profile with 3 workers and 4
// clients.
func DefaultConfig() Config {
	return Config{HeadBin: "bin/megaflow-head", WorkerBin: "bin/megaflow-worker", InitBin: "bin/megaflow-init", Workers: 3, Clients: 4, Seed: 1,
		Profile: fault.Short(), Lease: 3 * time.Second, LeaseMargin: 1500 * time.Millisecond, OpTimeout: 5 * time.Second, Pace: 200 * time.Millisecond}
}

// HeartbeatInterval is the workers' --heartbeat-interval: Lease/6.
func (c Config) HeartbeatInterval() time.Duration { return c.Lease / 6 }

// Validate names every field out of range.
func (c Config) Validate() error {
	var errs []error
	for _, b := range []struct{ flag, path string }{{"--head-bin", c.HeadBin}, {"--worker-bin", c.WorkerBin}, {"--init-bin", c.InitBin}} {
		if _, err := os.Stat(b.path); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w (run make build first)", b.flag, b.path, err))
		}
	}
	if c.Workers < 1 || c.Workers > 20 {
		errs = append(errs, fmt.Errorf("--workers %d is outside [1, 20]", c.Workers))
	}
	if c.Clients < 1 || c.Clients > 64 {
		errs = append(errs, fmt.Errorf("--clients %d is outside [1, 64]", c.Clients))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("Dir is empty: give a folder for the run's data and logs"))
	}
	if c.Lease < time.Second || c.LeaseMargin < 200*time.Millisecond || c.LeaseMargin > c.Lease {
		errs = append(errs, fmt.Errorf("--worker-lease %v must be at least 1s and --worker-lease-margin %v within [200ms, the lease] (the heads refuse others)", c.Lease, c.LeaseMargin))
	}
	if c.OpTimeout <= 0 || c.Pace < 0 {
		errs = append(errs, fmt.Errorf("op timeout %v must be positive, pace %v not negative", c.OpTimeout, c.Pace))
	}
	if c.Break != "" && c.Break != "duplicate-result" {
		errs = append(errs, fmt.Errorf("--break %q: the only broken build is duplicate-result", c.Break))
	}
	if err := c.Profile.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Injected is one fault as it was injected.
type Injected struct {
	Fault fault.Fault
	// Target names what it hit ("h2 (leader)", "w1", "h1 -> h3").
	Target string
	// Start and End are offsets from the start of the run (ns).
	Start, End int64
	// Err is set when injecting or healing failed.
	Err string
}

// Result is what a run found.
type Result struct {
	Config   Config
	Prefix   string
	Schedule []fault.Fault
	Faults   []Injected
	Ops      []history.Op
	Verdict  check.Verdict
	// Workload is the length of the faulty phase, Total the whole run.
	Workload, Total time.Duration
	// Swept are prefixes of crashed runs removed at the start.
	Swept []string
	// LogDir holds the hosts' logs ("" once removed after a passing run).
	LogDir string
	// Input is what the verdict was computed from (before Config.Break).
	Input check.Input
}

func (c *Config) say(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, format+"\n", args...)
	}
}

// Run runs cfg. It returns an error only when the harness itself could not
// run (no namespaces, a binary missing, a cluster that never started); a
// run whose verdict fails returns a Result with Verdict.Failures set.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	start := time.Now()
	c, swept, err := prepare(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	defer c.remove()
	res := &Result{Config: cfg, Schedule: fault.Schedule(cfg.Profile, cfg.Seed), Swept: swept,
		LogDir: filepath.Join(cfg.Dir, "logs"), Prefix: c.net.Prefix}
	cfg.say("chaos: network %s (%s.0/24), 3 heads, %d workers; seed %d, profile %s: %d faults over %v; data and logs in %s",
		c.net.Prefix, c.net.Subnet, cfg.Workers, cfg.Seed, cfg.Profile.Name, len(res.Schedule), cfg.Profile.Duration, cfg.Dir)
	if err := c.startAll(ctx); err != nil {
		c.stopAll()
		return nil, err
	}
	rec := history.NewRecorder(time.Now())
	wl := newWorkload(&cfg, c, rec)
	wctx, stopWorkload := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); wl.run(wctx) }()
	res.Faults = c.injectAll(ctx, rec, res.Schedule)
	stopWorkload()
	wg.Wait()
	res.Workload = time.Duration(rec.Now())
	res.Ops = rec.Ops()
	cfg.say("chaos: workload over: %d operations; healing and waiting for the cluster to settle", len(res.Ops))

	in := c.finish(ctx)
	in.Ops = res.Ops
	in.Executions, err = readExecutions(filepath.Join(cfg.Dir, "hosts"))
	if err != nil {
		in.LogProblems = append(in.LogProblems, "execution files: "+err.Error())
	}
	in.LogProblems = append(in.LogProblems, scanLogs(res.LogDir)...)
	in.Freezes, in.FreezeSlack = freezes(res.Faults, rec.Start()), freezeSlack
	res.Input = in
	if cfg.Break == "duplicate-result" {
		in = res.Input.Clone()
		check.InjectDuplicateResult(&in)
	}
	res.Verdict = check.Judge(in)
	res.Total = time.Since(start)
	if res.Verdict.Pass() && !cfg.Keep {
		_ = os.RemoveAll(filepath.Join(cfg.Dir, "data"))
		_ = os.RemoveAll(filepath.Join(cfg.Dir, "hosts"))
	}
	return res, nil
}

// prepare checks cfg, makes the init's path absolute, removes what a
// crashed run left (it returns their prefixes), makes the run's folders
// and builds the network and its processes (not started). The caller
// removes the cluster.
func prepare(ctx context.Context, cfg *Config) (*cluster, []string, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if why := netns.Available(ctx); why != "" {
		return nil, nil, errors.New(why)
	}
	// The init runs as each task's argv[0], in the task's own directory.
	abs, err := filepath.Abs(cfg.InitBin)
	if err != nil {
		return nil, nil, fmt.Errorf("--init-bin %q: %w", cfg.InitBin, err)
	}
	cfg.InitBin = abs
	swept, err := netns.Sweep(ctx, nil)
	if err != nil {
		cfg.say("chaos: removing a crashed run's leftovers: %v", err)
	}
	for _, d := range []string{"logs", "data", "hosts"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o755); err != nil {
			return nil, swept, err
		}
	}
	c, err := newCluster(ctx, cfg)
	return c, swept, err
}

// freezeSlack is how long after its SIGCONT a frozen worker's stale
// executions may still run: the worker stops them before anything else,
// and their processes take a moment to end on a loaded machine.
const freezeSlack = 2 * time.Second

// scanLogs returns the lines of the logs under dir that show a panic, a
// fatal runtime error or a data race.
func scanLogs(dir string) []string {
	var out []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") || strings.Contains(line, "WARNING: DATA RACE") {
				out = append(out, e.Name()+": "+line)
			}
		}
	}
	return out
}

// dialOne returns a client of one head only.
func dialOne(ctx context.Context, addr string) (*client.Client, error) {
	return client.Dial(ctx, []string{addr}, client.WithBackoff(20*time.Millisecond, 200*time.Millisecond))
}
