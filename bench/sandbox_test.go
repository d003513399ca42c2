package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/lease"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/docker"
	"github.com/megaflow/megaflow/runtime/testimage"
	"github.com/megaflow/megaflow/worker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Sandbox benchmarks (docs/sandboxes.md, bench/results/sandbox.md): the
// exec round trip and the creation of many sandboxes at once, each against
// the bare Docker Engine measured in the same run on the same host. Both
// need a Docker Engine and the docker CLI (skipped without an engine,
// failed without one when CI is set).

// sandboxBench is a 3-head cluster with one Docker worker serving
// sandboxes, and the engine's CLI for the baseline.
type sandboxBench struct {
	c       *testcluster.Cluster
	cl      *client.Client
	rt      *docker.Runtime
	image   string
	cluster string
	cli     string
}

func newSandboxBench(b *testing.B, configure ...func(*worker.Config)) *sandboxBench {
	b.Helper()
	_, image := testimage.Require(b)
	dockerCLI, err := exec.LookPath("docker")
	if err != nil {
		b.Fatalf("the docker CLI is needed for the baseline: %v", err)
	}
	rt, err := docker.New(docker.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	c := testcluster.New(b, testcluster.Options{Configure: func(cfg *head.Config) {
		cfg.Lease = lease.Config{Duration: 30 * time.Second, Margin: 5 * time.Second} // a loaded engine must not cost a lease
	}})
	name := "mfsb-" + testimage.RunID()
	c.AddWorker(testcluster.WorkerOptions{
		NewRuntime: func() contract.Runtime { return rt },
		Capacity:   worker.Capacity{CPUMillis: 1000 * 300, MemoryBytes: 64 << 30}, // room for 256 one-core sandboxes: capacity is a number here
		Configure: func(cfg *worker.Config) {
			cfg.ClusterName = name
			for _, f := range configure {
				f(cfg)
			}
		},
	})
	s := &sandboxBench{c: c, cl: c.Client(), rt: rt, image: image, cluster: name, cli: dockerCLI}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cs, _ := rt.List(ctx, map[string]string{worker.LabelCluster: name})
		for _, c := range cs {
			_ = rt.Remove(ctx, c.ID)
		}
		out, _ := exec.Command(dockerCLI, "ps", "-aq", "--filter", "label=mfsb="+name).Output()
		_ = s.removeBaseline(ctx, strings.Fields(string(out)))
	})
	return s
}

// removeBaseline removes the baseline's containers ids, 16 at a time:
// `docker stop -t 0` (killed, and waited for until the engine handled the
// exit), then `docker rm`, each call bounded to 2 minutes. Not `rm -f` of
// running containers: on Debian's Engine 20.10.24 a forced removal races
// the container's own exit handling in libnetwork (both release its
// network), and the engine deadlocked three times here (every later kill,
// rm and inspect hung until the engine was restarted). The worker removes
// a task's container only after it exited.
func (s *sandboxBench) removeBaseline(ctx context.Context, ids []string) error {
	for len(ids) > 0 {
		k := min(len(ids), 16)
		for _, verb := range [][]string{{"stop", "-t", "0"}, {"rm"}} {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			out, err := exec.CommandContext(rctx, s.cli, append(verb, ids[:k]...)...).CombinedOutput()
			cancel()
			if err != nil {
				return fmt.Errorf("docker %s of %d baseline containers: %v: %s", verb[0], k, err, out)
			}
		}
		ids = ids[k:]
	}
	return nil
}

// The limits of every benchmark sandbox, and of the create benchmark's
// `docker run -d` baseline.
const (
	sandboxCPU    = 1000     // millicores
	sandboxMemory = 64 << 20 // bytes
)

// createSandbox creates one sandbox of the test image and waits until it
// is READY: one core, like the baseline's unlimited container for a
// command as small as `true` (a smaller CPU quota throttles the exec's
// own runc init inside the sandbox's cgroup: at 10 millicores an exec of
// `true` took seconds). Safe from any goroutine.
func (s *sandboxBench) createSandbox(ctx context.Context) (*client.Sandbox, error) {
	return s.createSandboxOf(ctx, "")
}

// createSandboxOf is createSandbox in tenant ("": the default tenant).
func (s *sandboxBench) createSandboxOf(ctx context.Context, tenant string) (*client.Sandbox, error) {
	sb, err := s.cl.CreateSandbox(ctx, client.SandboxSpec{Tenant: tenant, Image: s.image, CPUMillis: sandboxCPU, MemoryBytes: sandboxMemory, WaitReady: 5 * time.Minute})
	if err != nil {
		return nil, fmt.Errorf("CreateSandbox: %w", err)
	}
	return sb, nil
}

// dockerRunIdle is the baseline's `docker run -d` of an idle container
// like a sandbox's (the test image, no network, the same idle loop and
// limits: one core, 64 MiB); it
// returns the container's id once the CLI returns (started). Safe from
// any goroutine.
func (s *sandboxBench) dockerRunIdle() (string, error) {
	out, err := exec.Command(s.cli, "run", "-d", "--network", "none", "--cpus", "1", "--memory", "64m", "--label", "mfsb="+s.cluster, s.image,
		"/bin/sh", "-c", "while :; do sleep 3600; done").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker run -d: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// spread is min, median and max of three or more figures.
func spread(v []float64) string {
	s := slices.Clone(v)
	slices.Sort(s)
	return fmt.Sprintf("%.2f / %.2f / %.2f", s[0], s[len(s)/2], s[len(s)-1])
}

// BenchmarkSandboxExec measures the round trip of an exec of `true`: a
// sandbox's through the cluster (client -> head -> worker -> docker exec
// -> back), against the same exec sent straight to the worker's sandbox
// port (the path a client would take with a grant, no head on it), against
// `docker exec CID true` with the docker CLI and against one exec through
// the engine's API (runtime/docker's ExecStream, what the worker calls),
// on an idle container of the same image. One exec at a time, the four
// arms interleaved; 3 repetitions of n execs per arm,
// reported as min / median / max of each repetition's p50 and p99.
func BenchmarkSandboxExec(b *testing.B) {
	n := scaled(100, 10)
	var rows []row
	b.Run(fmt.Sprintf("execs=%d", n), func(b *testing.B) {
		hideNsPerOp(b)
		for range b.N {
			s := newSandboxBench(b)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
			defer cancel()
			sb, err := s.createSandbox(ctx)
			if err != nil {
				b.Fatal(err)
			}
			cid, err := s.dockerRunIdle()
			if err != nil {
				b.Fatal(err)
			}
			// An exec the engine never finishes (it loses an exec's exit
			// now and then on a loaded host: still "running" forever) is
			// ended at hangAfter and counted apart, not in the latencies.
			const hangAfter = 20 * time.Second
			hung := map[string]int{}
			viaSandbox := func() (time.Duration, bool) {
				t0 := time.Now()
				res, err := sb.Exec(ctx, []string{"true"}, client.ExecOptions{Timeout: hangAfter})
				if err != nil || (res.ExitCode != 0 && !res.TimedOut) {
					b.Fatalf("sandbox exec: %+v, %v", res, err)
				}
				return time.Since(t0), res.TimedOut
			}
			// direct: the same exec sent straight to the worker's sandbox
			// port, as a client holding a grant would (docs/sandboxes.md,
			// "Data path"): the relay's hop is what separates it from the
			// sandbox arm. The attempt is read from the leader's table, as
			// the head would send it.
			conn, direct := s.directExec(b, sb.ID())
			defer conn.Close()
			viaDirect := func() (time.Duration, bool) {
				t0 := time.Now()
				ectx, cancel := context.WithTimeout(ctx, hangAfter)
				defer cancel()
				code, err := direct(ectx)
				if ectx.Err() != nil {
					return time.Since(t0), true
				}
				if err != nil || code != 0 {
					b.Fatalf("direct exec: exit %d, %v", code, err)
				}
				return time.Since(t0), false
			}
			viaCLI := func() (time.Duration, bool) {
				t0 := time.Now()
				ectx, cancel := context.WithTimeout(ctx, hangAfter)
				defer cancel()
				if out, err := exec.CommandContext(ectx, s.cli, "exec", cid, "true").CombinedOutput(); err != nil {
					if ectx.Err() != nil {
						return time.Since(t0), true
					}
					b.Fatalf("docker exec: %v: %s", err, out)
				}
				return time.Since(t0), false
			}
			viaAPI := func() (time.Duration, bool) {
				t0 := time.Now()
				ectx, cancel := context.WithTimeout(ctx, hangAfter)
				defer cancel()
				x, err := s.rt.ExecStream(ectx, cid, contract.ExecRequest{Command: []string{"true"}})
				if ectx.Err() != nil {
					return time.Since(t0), true
				}
				if err != nil || x.Code != 0 {
					b.Fatalf("engine API exec: %+v, %v", x, err)
				}
				return time.Since(t0), false
			}
			add := func(arm string, into *[]time.Duration, d time.Duration, hang bool) {
				if hang {
					hung[arm]++
					return
				}
				*into = append(*into, d)
			}
			for range 5 { // warm every path
				viaSandbox()
				viaDirect()
				viaCLI()
				viaAPI()
			}
			var sp50, sp99, dp50, dp99, cp50, cp99, ap50, ap99, r50cli, r50api, r50direct []float64
			for range 3 {
				var sbx, dir, cli, api []time.Duration
				for i := range n {
					for k := range 4 { // rotate the order so no arm always follows another
						switch (i + k) % 4 {
						case 3:
							d, h := viaDirect()
							add("direct", &dir, d, h)
						case 0:
							d, h := viaSandbox()
							add("sandbox", &sbx, d, h)
						case 1:
							d, h := viaCLI()
							add("docker exec", &cli, d, h)
						case 2:
							d, h := viaAPI()
							add("engine API", &api, d, h)
						}
					}
				}
				for _, d := range [][]time.Duration{sbx, dir, cli, api} {
					slices.Sort(d)
				}
				sp50, sp99 = append(sp50, ms(percentile(sbx, 50))), append(sp99, ms(percentile(sbx, 99)))
				dp50, dp99 = append(dp50, ms(percentile(dir, 50))), append(dp99, ms(percentile(dir, 99)))
				r50direct = append(r50direct, ms(percentile(sbx, 50))/ms(percentile(dir, 50)))
				cp50, cp99 = append(cp50, ms(percentile(cli, 50))), append(cp99, ms(percentile(cli, 99)))
				ap50, ap99 = append(ap50, ms(percentile(api, 50))), append(ap99, ms(percentile(api, 99)))
				r50cli = append(r50cli, ms(percentile(sbx, 50))/ms(percentile(cli, 50)))
				r50api = append(r50api, ms(percentile(sbx, 50))/ms(percentile(api, 50)))
			}
			med := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
			b.ReportMetric(med(sp50), "sandbox-p50-ms")
			b.ReportMetric(med(cp50), "docker-exec-p50-ms")
			b.ReportMetric(med(ap50), "engine-api-p50-ms")
			b.ReportMetric(med(r50cli), "ratio-p50-vs-docker-exec")
			setRow(&rows, row{"sandbox exec p50 ms", spread(sp50), "client -> head -> worker -> engine; min / median / max of 3"})
			setRow(&rows, row{"sandbox exec p99 ms", spread(sp99), ""})
			setRow(&rows, row{"direct exec p50 ms", spread(dp50), "client -> worker's sandbox port -> engine, no head (the grant design's path)"})
			setRow(&rows, row{"direct exec p99 ms", spread(dp99), ""})
			setRow(&rows, row{"ratio p50 relayed vs direct", spread(r50direct), "what the head's hop costs"})
			setRow(&rows, row{"docker exec p50 ms", spread(cp50), "the docker CLI: `docker exec CID true`"})
			setRow(&rows, row{"docker exec p99 ms", spread(cp99), ""})
			setRow(&rows, row{"engine API p50 ms", spread(ap50), "one exec through the engine's API, no CLI process"})
			setRow(&rows, row{"engine API p99 ms", spread(ap99), ""})
			setRow(&rows, row{"ratio p50 vs docker exec", spread(r50cli), "target <= 1.3x"})
			setRow(&rows, row{"ratio p50 vs engine API", spread(r50api), "the cluster's own cost"})
			setRow(&rows, row{"hung execs", fmt.Sprintf("%d / %d / %d / %d", hung["sandbox"], hung["direct"], hung["docker exec"], hung["engine API"]),
				fmt.Sprintf("sandbox / direct / docker exec / engine API: not finished by the engine within %v, left out of the percentiles", hangAfter)})
		}
	})
	summary(b, fmt.Sprintf("sandbox exec round trip of `true`, %d execs per arm and repetition, one at a time", n), &rows)
}

// directExec dials the worker's sandbox port and returns the connection
// and a function that runs `true` in sandbox id through it, returning the
// exit code: the data path a grant would give a client (no head on it).
// The attempt is the sandbox's active one in the leader's table.
func (s *sandboxBench) directExec(b *testing.B, id string) (*grpc.ClientConn, func(context.Context) (int32, error)) {
	b.Helper()
	var attempt uint32
	for _, h := range s.c.Running() {
		if h.IsLeader() {
			if a := h.FSM().View().Task(spec.SandboxTaskID(id)).ActiveAttempt(); a != nil {
				attempt = a.Number
			}
		}
	}
	if attempt == 0 {
		b.Fatalf("sandbox %s has no running attempt in the leader's table", id)
	}
	conn, err := grpc.NewClient(s.c.Workers()[0].Worker().SandboxAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	cli := wire.NewSandboxWorkerServiceClient(conn)
	return conn, func(ctx context.Context) (int32, error) {
		st, err := cli.Exec(ctx, &wire.SandboxExecRequest{SandboxId: id, Argv: []string{"true"}, Attempt: attempt})
		if err != nil {
			return 0, err
		}
		for {
			m, err := st.Recv()
			if err != nil {
				return 0, fmt.Errorf("the stream ended without an exit: %w", err)
			}
			if x := m.GetExit(); x != nil {
				return x.GetExitCode(), nil
			}
		}
	}
}

// createRep, when not 0, makes BenchmarkSandboxCreate run only that
// repetition (1 to 3, with its arm order): one process per repetition,
// with the engine restarted between them, where an engine cannot take
// three in a row (bench/results/sandbox.md: Debian's Engine 20.10.24
// deadlocked in libnetwork while removing the baseline's containers).
var createRep = flag.Int("megaflow.create-rep", 0, "BenchmarkSandboxCreate: run only this repetition (1 to 3; 0: all three)")

// BenchmarkSandboxCreate measures n sandboxes created at once (n
// CreateSandbox with WaitReady from n goroutines, timed until the last is
// READY) in three arms, against the same n at once of the bare engine:
//
//   - warm: served from the worker's warm pool, full before the creates
//     start (n idle warm containers of the sandboxes' key: a pre-warm
//     target of the key, and the worker's PoolMin n because a target holds
//     at most 64); the pool's refill runs during the creates, as it would
//     in use, and the next arm waits until it is over (untimed);
//   - fresh: the same sandboxes in another tenant, whose key has no warm
//     containers: a container started for each;
//   - docker run -d: n `docker run -d` of an idle container of the same
//     image, limits (one core, 64 MiB) and idle loop, no network, from n
//     goroutines, timed until the last CLI returns (the container started).
//
// 3 repetitions, the arms interleaved (the order rotates per repetition);
// between arms (untimed) every sandbox is closed and every baseline
// container removed, and the next arm starts once the engine holds only
// the warm pool. Reported per arm: min / median / max over the
// repetitions of the create-all wall time and of the per-create p50 and
// p99, and the ratios of the wall times to docker run -d's.
func BenchmarkSandboxCreate(b *testing.B) {
	n := scaled(256, 8)
	const reps = 3
	arms := []string{"warm", "fresh", "docker run -d"}
	var rows []row
	b.Run(fmt.Sprintf("sandboxes=%d", n), func(b *testing.B) {
		hideNsPerOp(b)
		for range b.N {
			s := newSandboxBench(b, func(cfg *worker.Config) {
				cfg.PoolMin = n         // with the target below: n warm containers of the key
				cfg.PoolMax = max(n, 4) // no effect on sandboxes; kept coherent
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
			defer cancel()
			if _, err := s.cl.PoolWarm(ctx, &client.PoolTarget{Image: s.image, Tenant: "default", Size: 1,
				CpuMillis: sandboxCPU, MemoryBytes: sandboxMemory}); err != nil {
				b.Fatal(err)
			}
			w := s.c.Workers()[0]
			idle := func() int {
				k := 0
				for _, p := range w.Worker().Pool() {
					if !p.Busy && p.Session == "" {
						k++
					}
				}
				return k
			}
			engineHolds := func() int {
				cs, err := s.rt.List(ctx, map[string]string{worker.LabelCluster: s.cluster})
				if err != nil {
					b.Fatal(err)
				}
				out, err := exec.Command(s.cli, "ps", "-aq", "--filter", "label=mfsb="+s.cluster).Output()
				if err != nil {
					b.Fatal(err)
				}
				return len(cs) + len(strings.Fields(string(out)))
			}
			settle := func(what string) {
				deadline := time.Now().Add(20 * time.Minute)
				for idle() != n || engineHolds() != n {
					if time.Now().After(deadline) {
						b.Fatalf("%s: the pool holds %d idle of %d and the engine %d containers after 20 min", what, idle(), n, engineHolds())
					}
					time.Sleep(200 * time.Millisecond) // polling the engine, not synchronization
				}
			}
			settle("filling the pool")
			// Warm the image and the paths (untimed): one of each.
			for _, tenant := range []string{"default", "fresh"} {
				sb, err := s.createSandboxOf(ctx, tenant)
				if err != nil {
					b.Fatal(err)
				}
				if err := sb.Close(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if id, err := s.dockerRunIdle(); err != nil {
				b.Fatal(err)
			} else {
				_ = exec.Command(s.cli, "rm", "-f", id).Run()
			}
			settle("after warming up")

			// at runs do(i) for i < n from n goroutines at once; it returns
			// the time until the last ended and each one's duration. The
			// first error fails the benchmark.
			at := func(do func(i int) error) (time.Duration, []time.Duration) {
				var wg sync.WaitGroup
				errc := make(chan error, n)
				each := make([]time.Duration, n)
				t0 := time.Now()
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						t1 := time.Now()
						if err := do(i); err != nil {
							errc <- err
						}
						each[i] = time.Since(t1)
					}()
				}
				wg.Wait()
				d := time.Since(t0)
				close(errc)
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
				slices.Sort(each)
				return d, each
			}
			wall := map[string][]float64{}
			p50 := map[string][]float64{}
			p99 := map[string][]float64{}
			warmServed := 0.0
			for rep := range reps {
				if *createRep != 0 && rep+1 != *createRep {
					continue
				}
				for k := range arms {
					arm := arms[(rep+k)%len(arms)]
					var d time.Duration
					var each []time.Duration
					switch arm {
					case "warm", "fresh":
						tenant := "default"
						if arm == "fresh" {
							tenant = "fresh"
						}
						boxes := make([]*client.Sandbox, n)
						before := warmCount(w.Worker())
						d, each = at(func(i int) error {
							sb, err := s.createSandboxOf(ctx, tenant)
							boxes[i] = sb
							return err
						})
						served := warmCount(w.Worker()) - before
						if arm == "warm" {
							warmServed += served
							if served != float64(n) {
								b.Logf("rep %d: %v of %d warm creates were served warm", rep+1, served, n)
							}
						} else if served != 0 {
							b.Fatalf("rep %d: %v fresh creates were served warm", rep+1, served)
						}
						for _, sb := range boxes {
							if sb.Info().GetState() != client.SandboxReady {
								b.Fatalf("sandbox %s is %s; want READY", sb.ID(), sb.Info().GetState())
							}
						}
						for _, sb := range boxes {
							if err := sb.Close(ctx); err != nil {
								b.Fatal(err)
							}
						}
					default:
						ids := make([]string, n)
						d, each = at(func(i int) error {
							id, err := s.dockerRunIdle()
							ids[i] = id
							return err
						})
						if err := s.removeBaseline(ctx, ids); err != nil {
							b.Fatal(err)
						}
					}
					wall[arm] = append(wall[arm], d.Seconds())
					p50[arm] = append(p50[arm], ms(percentile(each, 50)))
					p99[arm] = append(p99[arm], ms(percentile(each, 99)))
					b.Logf("rep %d %s: all %d in %.2f s, p50 %.0f ms, p99 %.0f ms (load %s)", rep+1, arm, n, d.Seconds(),
						ms(percentile(each, 50)), ms(percentile(each, 99)), loadAvg())
					settle("after " + arm)
				}
			}
			ratio := func(arm string) []float64 {
				r := make([]float64, len(wall["docker run -d"]))
				for i := range r {
					r[i] = wall[arm][i] / wall["docker run -d"][i]
				}
				return r
			}
			for _, arm := range arms {
				setRow(&rows, row{arm + ": all READY s", spread(wall[arm]), "min / median / max of 3"})
				setRow(&rows, row{arm + ": per-create p50 ms", spread(p50[arm]), ""})
				setRow(&rows, row{arm + ": per-create p99 ms", spread(p99[arm]), ""})
			}
			setRow(&rows, row{"ratio warm / docker run -d", spread(ratio("warm")), "target <= 1.1x"})
			setRow(&rows, row{"ratio fresh / docker run -d", spread(ratio("fresh")), "target <= 1.1x"})
			setRow(&rows, row{"warm creates served warm", fmt.Sprintf("%.0f of %d", warmServed, len(wall["warm"])*n), ""})
			b.ReportMetric(median(ratio("warm")), "warm-ratio")
			b.ReportMetric(median(ratio("fresh")), "fresh-ratio")
		}
	})
	summary(b, fmt.Sprintf("%d sandboxes created at once: warm pool, fresh, docker run -d", n), &rows)
}

// warmCount is the worker's megaflow_sandbox_creates_total{source="warm"}.
func warmCount(w *worker.Worker) float64 {
	mfs, err := w.Registry().Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() != "megaflow_sandbox_creates_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == "warm" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// median is the median of v.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// loadAvg is the host's 1-minute load average (/proc/loadavg), or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
