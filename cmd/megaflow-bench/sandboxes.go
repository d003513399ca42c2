package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
)

// sandboxesOptions are the flags of `megaflow-bench sandboxes`: the Go arm
// of bench/python_sandboxes.py, which starts the cluster and runs this
// command in turn with its Python arm.
type sandboxesOptions struct {
	heads       []string
	image       string
	n, execs    int
	cpuMillis   int64
	memoryBytes int64
	lifetime    time.Duration
	waitReady   time.Duration
	execTimeout time.Duration
	timeout     time.Duration // the whole run, closing included
}

// The bounds of the sandboxes flags.
const (
	sbxMaxN     = 1024
	sbxMaxExecs = 10_000
	// sbxCloseTimeout bounds the closing of every sandbox at the end (or
	// after a failure), on a context of its own.
	sbxCloseTimeout = 2 * time.Minute
)

// validate checks the flags; each error names its flag and its bound.
func (o *sandboxesOptions) validate() error {
	var bad []string
	if len(o.heads) == 0 {
		bad = append(bad, "--heads is empty: give the heads' gRPC host:port, comma-separated")
	}
	if strings.TrimSpace(o.image) == "" {
		bad = append(bad, "--image is empty: give a local image holding sh and sleep")
	}
	if o.n < 1 || o.n > sbxMaxN {
		bad = append(bad, fmt.Sprintf("--n %d is outside [1, %d]", o.n, sbxMaxN))
	}
	if o.execs < 1 || o.execs > sbxMaxExecs {
		bad = append(bad, fmt.Sprintf("--execs %d is outside [1, %d]", o.execs, sbxMaxExecs))
	}
	if o.cpuMillis < 0 || o.memoryBytes < 0 {
		bad = append(bad, fmt.Sprintf("--cpu-millis %d and --memory-bytes %d must be 0 (the cluster's default) or more", o.cpuMillis, o.memoryBytes))
	}
	if o.waitReady < time.Second || o.waitReady > 10*time.Minute {
		bad = append(bad, fmt.Sprintf("--wait-ready %v is outside [1s, 10m]", o.waitReady))
	}
	if o.lifetime < time.Minute || o.lifetime > 7*24*time.Hour {
		bad = append(bad, fmt.Sprintf("--lifetime %v is outside [1m, 168h]", o.lifetime))
	}
	if o.execTimeout < time.Second || o.execTimeout > time.Hour {
		bad = append(bad, fmt.Sprintf("--exec-timeout %v is outside [1s, 1h]", o.execTimeout))
	}
	if o.timeout < time.Minute || o.timeout > 24*time.Hour {
		bad = append(bad, fmt.Sprintf("--timeout %v is outside [1m, 24h]", o.timeout))
	}
	if len(bad) > 0 {
		return errs.New(errs.InvalidArgument, "sandboxes: %s", strings.Join(bad, "; "))
	}
	return nil
}

func sandboxesCmd() *cobra.Command {
	o := sandboxesOptions{image: "megaflow-test/busybox:1", n: 16, execs: 8, cpuMillis: 100, memoryBytes: 16 << 20,
		lifetime: 15 * time.Minute, waitReady: 10 * time.Minute, execTimeout: 5 * time.Minute, timeout: 30 * time.Minute}
	cmd := &cobra.Command{
		Use:   "sandboxes",
		Short: "the Go client's arm of bench/python_sandboxes.py: n sandboxes created at once, each stepped with `true` execs",
		Long: `sandboxes is the Go arm of bench/python_sandboxes.py, against a running
cluster (--heads): from this one process, with the Go client, it creates --n
sandboxes at once (one goroutine each, CreateSandbox waiting until READY),
then steps each with --execs execs of ` + "`true`" + ` one after the other (the n
sandboxes concurrently, one goroutine each), then closes them all. It prints
one JSON object on stdout: n, execs, create_s (until the last is READY),
server_create_s (the leader's stamps, from the first create to the last
READY), execs_per_s (n x execs over the stepping phase's wall time),
exec_p50_ms and exec_p99_ms (nearest rank over every exec), close_s, and
exec_latencies_s
(every exec's latency, in seconds, in no particular order). The sandboxes
are closed even when a step fails; the error then goes to stderr and the
exit status is 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return runSandboxes(cmd.Context(), o, os.Stdout)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.heads, "heads", nil, "the heads' gRPC addresses, host:port, comma-separated (required)")
	f.StringVar(&o.image, "image", o.image, "the sandboxes' image: local to the workers (they never pull), with sh and sleep")
	f.IntVar(&o.n, "n", o.n, "sandboxes created at once (1 to 1024)")
	f.IntVar(&o.execs, "execs", o.execs, "`true` execs per sandbox, one after the other (1 to 10000)")
	f.Int64Var(&o.cpuMillis, "cpu-millis", o.cpuMillis, "CPU of each sandbox, millicores (0: the cluster's default)")
	f.Int64Var(&o.memoryBytes, "memory-bytes", o.memoryBytes, "memory of each sandbox, bytes (0: the cluster's default)")
	f.DurationVar(&o.lifetime, "lifetime", o.lifetime, "each sandbox's lifetime, after which it expires if still open (1m to 168h)")
	f.DurationVar(&o.waitReady, "wait-ready", o.waitReady, "how long each create waits for READY (1s to 10m)")
	f.DurationVar(&o.execTimeout, "exec-timeout", o.execTimeout, "each exec's command timeout (1s to 1h)")
	f.DurationVar(&o.timeout, "timeout", o.timeout, "deadline of the whole run before the closing (1m to 24h)")
	return cmd
}

// sandboxesResult is what `megaflow-bench sandboxes` prints, as JSON; the
// field names are what bench/python_sandboxes.py reads.
type sandboxesResult struct {
	N         int     `json:"n"`
	Execs     int     `json:"execs"`
	CreateS   float64 `json:"create_s"`
	ExecsPerS float64 `json:"execs_per_s"`
	ExecP50Ms float64 `json:"exec_p50_ms"`
	ExecP99Ms float64 `json:"exec_p99_ms"`
	CloseS    float64 `json:"close_s"`
	// ServerCreateS is the heads' part of create_s: from the first
	// sandbox's create time to the last one's ready time, as the leader
	// stamped them.
	ServerCreateS float64   `json:"server_create_s"`
	ExecLatS      []float64 `json:"exec_latencies_s"`
}

// stepFigures fills r's stepping figures from every exec's latency
// (seconds) and the stepping phase's wall time: execs/s and the nearest-
// rank p50 and p99 in milliseconds.
func stepFigures(r *sandboxesResult, lat []float64, wall time.Duration) {
	r.ExecLatS = lat
	if wall > 0 {
		r.ExecsPerS = float64(len(lat)) / wall.Seconds()
	}
	r.ExecP50Ms = percentile(lat, 50) * 1000
	r.ExecP99Ms = percentile(lat, 99) * 1000
}

// serverCreateSpan returns the seconds from the earliest create time to
// the latest ready time of boxes (all READY), as the leader stamped them.
func serverCreateSpan(boxes []*client.Sandbox) float64 {
	var first, last int64
	for i, s := range boxes {
		in := s.Info()
		if i == 0 || in.GetCreateUnixNanos() < first {
			first = in.GetCreateUnixNanos()
		}
		last = max(last, in.GetReadyUnixNanos())
	}
	return float64(last-first) / 1e9
}

// runSandboxes runs one arm against o.heads and writes its JSON to out.
// Every sandbox it asked for is closed before it returns, on a context of
// its own (the run's may have ended).
func runSandboxes(ctx context.Context, o sandboxesOptions, out io.Writer) (err error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	c, err := client.Dial(ctx, o.heads)
	if err != nil {
		return err
	}
	defer c.Close()
	ids := make([]string, o.n)
	for i := range ids {
		ids[i] = spec.NewSandboxID(rand.Reader)
	}
	boxes := make([]*client.Sandbox, o.n)
	defer func() {
		// On success the closing was timed below and this finds nothing
		// left to do; after a failure it closes what may exist.
		if cerr := closeSandboxes(c, ids, boxes); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()

	res := sandboxesResult{N: o.n, Execs: o.execs}
	t0 := time.Now()
	createErrs := make([]error, o.n)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := c.CreateSandbox(ctx, client.SandboxSpec{ID: ids[i], Image: o.image, CPUMillis: o.cpuMillis,
				MemoryBytes: o.memoryBytes, Lifetime: o.lifetime, WaitReady: o.waitReady})
			boxes[i] = s
			if err == nil && s.Info().GetState() != client.SandboxReady {
				err = fmt.Errorf("sandbox %s is still %s after --wait-ready %v", ids[i], s.Info().GetState(), o.waitReady)
			}
			createErrs[i] = err
		}()
	}
	wg.Wait() // every CreateSandbox returns by ctx's deadline
	res.CreateS = time.Since(t0).Seconds()
	if err := firstErrors("create", createErrs); err != nil {
		return err
	}
	res.ServerCreateS = serverCreateSpan(boxes)

	lat := make([][]float64, o.n)
	stepErrs := make([]error, o.n)
	t1 := time.Now()
	for i, s := range boxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range o.execs {
				t := time.Now()
				r, err := s.Exec(ctx, []string{"true"}, client.ExecOptions{Timeout: o.execTimeout})
				if err == nil && r.ExitCode != 0 {
					err = fmt.Errorf("sandbox %s: `true` exited %d (%s)", s.ID(), r.ExitCode, r.Reason)
				}
				if err != nil {
					stepErrs[i] = err
					return
				}
				lat[i] = append(lat[i], time.Since(t).Seconds())
			}
		}()
	}
	wg.Wait() // every Exec returns by ctx's deadline
	wall := time.Since(t1)
	if err := firstErrors("exec", stepErrs); err != nil {
		return err
	}
	var all []float64
	for _, l := range lat {
		all = append(all, l...)
	}
	stepFigures(&res, all, wall)

	t2 := time.Now()
	if err := closeSandboxes(c, ids, boxes); err != nil {
		return err
	}
	res.CloseS = time.Since(t2).Seconds()
	enc := json.NewEncoder(out)
	return enc.Encode(res)
}

// closeSandboxes closes every sandbox of ids at once, each through its
// handle in boxes or, where the create returned none, a handle read by id
// (one that was never created is skipped). Closed handles are cleared so a
// second call does nothing. It waits at most sbxCloseTimeout.
func closeSandboxes(c *client.Client, ids []string, boxes []*client.Sandbox) error {
	ctx, cancel := context.WithTimeout(context.Background(), sbxCloseTimeout)
	defer cancel()
	closeErrs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		if id == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := boxes[i]
			if s == nil {
				var err error
				if s, err = c.GetSandbox(ctx, id); err != nil {
					if errs.ClassOf(err) != errs.NotFound {
						closeErrs[i] = err
					}
					return
				}
			}
			if err := s.Close(ctx); err != nil && errs.ClassOf(err) != errs.NotFound {
				closeErrs[i] = err
				return
			}
			ids[i], boxes[i] = "", nil
		}()
	}
	wg.Wait() // every call returns by ctx's deadline
	return firstErrors("close", closeErrs)
}

// firstErrors summarizes the non-nil errors of a phase: how many failed
// and the first one; nil when none did.
func firstErrors(phase string, es []error) error {
	var first error
	n := 0
	for _, e := range es {
		if e != nil {
			if first == nil {
				first = e
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%s: %d of %d failed; the first: %w", phase, n, len(es), first)
}
