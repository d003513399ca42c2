package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/examples/demo"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// Where the demo's model server runs (--model-service).
const (
	// modelDriver: this command serves the model on the host's loopback
	// and hands its URL to the rollouts in MEGAFLOW_SERVICE_MODEL.
	modelDriver = "driver"
	// modelTask: the graph runs the model as a `service` task and the
	// rollouts list it in uses_services; the head publishes the endpoint.
	modelTask = "task"
)

// removeTimeout bounds the wait for the worker to remove the containers
// of the model graph and of the closed sandboxes before the cluster stops
// (a stop takes up to the worker's 10 s grace, and engine calls are slow
// on a loaded host).
const removeTimeout = time.Minute

// defaultModelService runs the model as a service task of the cluster;
// modelDriver stays for heads without service tasks.
const defaultModelService = modelTask

// demoFlags are the flags of `megaflow demo` and `megaflow demo graph`.
type demoFlags struct {
	opts         demo.Options
	modelService string
	keep         bool
	// mode is modeGraph or modeSandbox (megaflow demo only).
	mode string
}

func (f *demoFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.IntVar(&f.opts.Instances, "instances", f.opts.Instances, "SWE-Gym training instances, one rollout each (1 to 2119)")
	fl.Float64Var(&f.opts.Speedup, "speedup", f.opts.Speedup, "time compression: every time taken from the data is divided by this")
	fl.Uint64Var(&f.opts.Seed, "seed", f.opts.Seed, "seed of the rollout profiles and step times drawn from the data")
	fl.StringVar(&f.opts.GraphID, "graph-id", f.opts.GraphID, "id of the step's graph")
	fl.StringVar(&f.modelService, "model-service", defaultModelService,
		"where the model server runs: driver (served by this command on loopback) or task (a service task of the graph)")
}

// resolveOpts fills the runtime-dependent options: program paths inside
// the images, or next to this executable for the process runtime.
func (f *demoFlags) resolveOpts(runtime, workRoot string) (demo.Options, error) {
	o := f.opts
	o.Runtime = runtime
	if f.modelService != modelDriver && f.modelService != modelTask {
		return o, errs.New(errs.InvalidArgument, "--model-service %q: want driver or task", f.modelService)
	}
	if runtime == "process" {
		exe, err := os.Executable()
		if err != nil {
			return o, err
		}
		dir := filepath.Dir(exe)
		o.AgentPath, o.ModelPath = filepath.Join(dir, "megaflow-agent"), filepath.Join(dir, "megaflow-model")
		for _, p := range []string{o.AgentPath, o.ModelPath} {
			if _, err := os.Stat(p); err != nil {
				return o, fmt.Errorf("the process runtime runs %s, which is missing: run `make build` (it builds bin/megaflow-agent and bin/megaflow-model beside bin/megaflow)", p)
			}
		}
		o.WorkRoot = workRoot
	}
	return o, nil
}

func demoCmd(g *globals) *cobra.Command {
	f := &demoFlags{opts: demo.DefaultOptions()}
	lo := localOptions{Runtime: "auto", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0",
		WorkerGossipAddr: "127.0.0.1:0", PoolMax: 64, MaxConcurrentStarts: 8, LogLevel: "info"}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run one SWE-Gym rollout step on an embedded local cluster and print its summary",
		Long: `demo starts an embedded cluster (one head, one worker: see megaflow up), builds
one rollout step from real data (examples/demo/data: the SWE-Gym training
instances and 50 OpenHands rollouts), submits it, shows its progress and
prints the summary, then shuts the cluster down.

Each instance gets a chain setup -> agent rollout -> evaluation in one
persistent session container of its repository's image
(megaflow/swegym-<repo>:demo, built by make demo). The agent takes its step
count, per-step times and failed attempts from the data, calls the model
server at each step and runs the tool command it answers.

With --mode sandbox the same step runs with the agent loop in this process:
each rollout gets a sandbox of the same image (megaflow sandbox; Docker
only), the setup and eval tasks' commands and each agent step's tool
command are execs into it, and the model (the same service task, or
--model-service driver) is called from here. The summary has the same
lines as graph mode's, then the sandboxes, execs and model calls.

Exit codes as submit --watch: 0 the step succeeded, 3 it failed, 4 cancelled
(130 when --mode sandbox was interrupted: its sandboxes are closed).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.tls.Enabled() {
				return errs.New(errs.InvalidArgument, "megaflow demo runs on loopback without TLS: drop --tls-ca/--tls-cert/--tls-key (and MEGAFLOW_TLS_*)")
			}
			return runDemo(cmd.Context(), g, f, lo)
		},
	}
	f.add(cmd)
	addLocalFlags(cmd, &lo)
	cmd.Flags().BoolVar(&f.keep, "keep", false, "keep the data directory (default: a fresh temporary one, removed at the end)")
	cmd.Flags().StringVar(&f.mode, "mode", modeGraph,
		"graph (submit the step; the agent runs in the rollouts' tasks) or sandbox (the agent loop runs here, one sandbox per rollout; Docker only)")
	cmd.AddCommand(demoGraphCmd(g))
	return cmd
}

func runDemo(ctx context.Context, g *globals, f *demoFlags, lo localOptions) error {
	if g.output != "table" && g.output != "json" {
		return errs.New(errs.InvalidArgument, "--output %q: want table or json", g.output)
	}
	if f.mode != modeGraph && f.mode != modeSandbox {
		return errs.New(errs.InvalidArgument, "--mode %q: want graph (the step as a graph of tasks that run the agent) or sandbox (the agent loop here, one sandbox per rollout)", f.mode)
	}
	data, err := demo.Load()
	if err != nil {
		return err
	}
	if f.opts.Instances < 1 || f.opts.Instances > len(data.Instances) {
		return errs.New(errs.InvalidArgument, "--instances %d: want 1 to %d (the SWE-Gym training instances)", f.opts.Instances, len(data.Instances))
	}
	if f.mode == modeSandbox {
		if err := checkSandboxRuntime(ctx, &lo); err != nil {
			return err
		}
	}
	say := func(format string, args ...any) {
		if g.output != "json" {
			fmt.Fprintf(g.stdout, format, args...)
		}
	}
	if lo.DataDir == "" {
		if lo.DataDir, err = os.MkdirTemp("", "megaflow-demo-"); err != nil {
			return err
		}
		if !f.keep {
			defer os.RemoveAll(lo.DataDir)
		}
	}
	start := time.Now()
	say("== starting an embedded cluster (data in %s)\n", lo.DataDir)
	lc, err := startLocal(ctx, lo)
	if err != nil {
		return err
	}
	defer func() {
		say("== stopping the cluster\n")
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := lc.Stop(sctx); err != nil {
			fmt.Fprintln(g.stderr, "megaflow demo: stop:", err)
		}
	}()
	if g.output != "json" {
		lc.describe(g.stdout)
	}
	o, err := f.resolveOpts(lc.runtime, filepath.Join(lo.DataDir, "work"))
	if err != nil {
		return err
	}
	if f.modelService == modelDriver {
		// With --model-service task the cluster runs the model itself;
		// this in-process server is for heads without service tasks.
		url, stop, err := serveModel()
		if err != nil {
			return err
		}
		defer stop()
		o.ModelURL = url
		say("model: OpenAI-compatible mock server %s at %s, served by this command (--model-service task runs it as a service task)\n", demo.ModelName, url)
	} else if f.mode == modeSandbox {
		say("model: the service task %q in a graph of its own; this command calls its endpoint at each agent step\n", demo.Model)
	} else {
		say("model: the graph's service task %q; its endpoint reaches the rollouts as %s\n", demo.Model, demo.EnvModel)
	}
	step, err := data.Build(o)
	if err != nil {
		return errs.New(errs.InvalidArgument, "%v", err)
	}
	if missing := lc.missingImages(ctx, step.Images); len(missing) > 0 {
		return fmt.Errorf("the Docker Engine lacks the demo images %s: build them with `make demo-images` (or run with --runtime process)",
			strings.Join(missing, ", "))
	}
	say("== the step: %s\n", step.Summary(o.Speedup))
	c, err := client.Dial(ctx, []string{lc.head.GRPCAddr()})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := allowDemoNetwork(ctx, c, step.Graph); err != nil {
		return err
	}
	endpoint := func(context.Context) (string, error) { return o.ModelURL, nil }
	var modelMillis int64
	if f.modelService == modelTask {
		// A service runs until cancelled, so it lives in a graph of its
		// own (uses_services reaches across graphs) and the step graph
		// ends when its rollouts do; the model graph is cancelled after.
		model, rest := splitServices(step.Graph)
		mres, err := c.Submit(ctx, model)
		if err != nil {
			return err
		}
		for _, t := range model.GetTasks() {
			modelMillis += t.GetResources().GetCpuMillis()
		}
		endpoint = modelEndpoint(c, mres.GraphId)
		if f.mode == modeSandbox {
			say("== submitted graph %s: the model service task\n", mres.GraphId)
		} else {
			say("== submitted graph %s: the model service task, published to the rollouts as %s\n", mres.GraphId, demo.EnvModel)
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if _, err := c.CancelGraph(cctx, mres.GraphId, "the demo step ended"); err != nil {
				fmt.Fprintln(g.stderr, "megaflow demo: cancel the model graph:", err)
				return
			}
			// Its container goes before the cluster stops.
			wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
			defer wcancel()
			if left := lc.waitRemoved(wctx, map[string]bool{mres.GraphId: true}); len(left) > 0 {
				fmt.Fprintf(g.stderr, "megaflow demo: the model's container is still there after %v: %s\n", removeTimeout, strings.Join(left, ", "))
			}
		}()
		step.Graph = rest
	}
	if f.mode == modeSandbox {
		err := runSandboxStep(ctx, g, c, lc, step, o, endpoint, modelMillis)
		say("demo time, cluster start to summary: %s\n", time.Since(start).Round(100*time.Millisecond))
		return err
	}
	res, err := c.Submit(ctx, step.Graph)
	if err != nil {
		return err
	}
	say("== submitted graph %s: %d tasks at index %d\n", res.GraphId, len(step.Graph.Tasks), res.Index)
	err = g.follow(ctx, c, res.GraphId, false)
	say("demo time, cluster start to summary: %s\n", time.Since(start).Round(100*time.Millisecond))
	return err
}

// allowDemoNetwork lets the step's tenant use the host network on the
// embedded cluster when the step asks for it (with Docker the rollouts
// share the host's network: examples/demo's net), as an admin would
// (megaflow policy set TENANT --allow-network '*' --allow-network host):
// the built-in admission policy refuses it (docs/security.md).
func allowDemoNetwork(ctx context.Context, c *client.Client, g *wire.GraphSpec) error {
	for _, t := range g.GetTasks() {
		if t.GetNetwork() == "host" {
			tenant := g.GetTenant()
			if tenant == "" {
				tenant = "default"
			}
			_, _, err := c.SetAdmissionPolicy(ctx, &client.AdmissionPolicy{Tenant: tenant, AllowedNetworks: []string{"*", "host"}})
			if err != nil {
				return fmt.Errorf("letting tenant %s use the host network: %w", tenant, err)
			}
			return nil
		}
	}
	return nil
}

// splitServices returns g's service tasks as a graph of their own, id
// "<g.id>-model", and g without them.
func splitServices(g *wire.GraphSpec) (services, rest *wire.GraphSpec) {
	services = proto.Clone(g).(*wire.GraphSpec)
	rest = proto.Clone(g).(*wire.GraphSpec)
	services.Id = g.GetId() + "-model"
	if services.GetName() != "" {
		services.Name = g.GetName() + " (model)"
	}
	services.Tasks, rest.Tasks = nil, nil
	for _, t := range g.GetTasks() {
		if t.GetKind() == wire.TaskKind_TASK_KIND_SERVICE {
			services.Tasks = append(services.Tasks, proto.Clone(t).(*wire.TaskSpec))
		} else {
			rest.Tasks = append(rest.Tasks, proto.Clone(t).(*wire.TaskSpec))
		}
	}
	return services, rest
}

// serveModel serves demo.ModelHandler on a free loopback port until stop.
func serveModel() (url string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("model server: %w", err)
	}
	srv := &http.Server{Handler: demo.ModelHandler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }() // owned: stop shuts it down and waits
	return "http://" + l.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// demoGraphCmd is `megaflow demo graph`: the step as a graph file, to
// submit with `megaflow submit` to any cluster.
func demoGraphCmd(g *globals) *cobra.Command {
	f := &demoFlags{opts: demo.DefaultOptions()}
	var modelURL, runtime, workRoot string
	cmd := &cobra.Command{
		Use:   "graph",
		Short: "Print the demo's rollout step as a graph file (YAML) for megaflow submit",
		Long: `graph prints the rollout step megaflow demo runs, as a graph file for
megaflow submit. With --runtime process the tasks run bin/megaflow-agent and
bin/megaflow-model (found beside this executable) on the workers' machine and
keep their workspaces under --work-root; with --runtime docker they run in the
demo images. With --model-url the rollouts call that model server (run one
with bin/megaflow-model --addr 127.0.0.1:18080); without it the graph runs the
model as a service task of the graph (this needs heads with service tasks),
stopped with the graph once every rollout and the eval have ended. megaflow
demo itself runs the model in a graph of its own, so that one model serves
every step.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runtime != "docker" && runtime != "process" {
				return errs.New(errs.InvalidArgument, "--runtime %q: want docker or process", runtime)
			}
			// A model URL means a server someone runs; without one the
			// graph runs the model as a service task.
			f.modelService = modelTask
			if modelURL != "" {
				f.modelService = modelDriver
			}
			o, err := f.resolveOpts(runtime, workRoot)
			if err != nil {
				return err
			}
			o.ModelURL = modelURL
			data, err := demo.Load()
			if err != nil {
				return err
			}
			step, err := data.Build(o)
			if err != nil {
				return errs.New(errs.InvalidArgument, "%v", err)
			}
			b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(step.Graph)
			if err != nil {
				return err
			}
			var doc map[string]any
			if err := json.Unmarshal(b, &doc); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "# MegaFlow demo rollout step (megaflow demo graph): %s\n# Data: examples/demo/data (SWE-Gym, OpenHands; MIT).\n",
				step.Summary(o.Speedup))
			enc := yaml.NewEncoder(g.stdout)
			enc.SetIndent(2)
			if err := enc.Encode(doc); err != nil {
				return err
			}
			return enc.Close()
		},
	}
	f.add(cmd)
	_ = cmd.Flags().MarkHidden("model-service")
	cmd.Flags().StringVar(&modelURL, "model-url", "", "model endpoint the rollouts call (http://host:port); empty: the graph runs the model as a service task")
	cmd.Flags().StringVar(&runtime, "runtime", "docker", "runtime of the workers that will run the graph: docker or process")
	cmd.Flags().StringVar(&workRoot, "work-root", filepath.Join(os.TempDir(), "megaflow-demo-work"), "process runtime: host directory of the rollouts' workspaces")
	return cmd
}
