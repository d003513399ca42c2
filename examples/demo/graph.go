package demo

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/megaflow/megaflow/client"
)

// Options shape the demo rollout step.
type Options struct {
	// GraphID is the step's graph id (idempotent resubmission).
	GraphID string
	// Tenant owns the graph; empty: "default".
	Tenant string
	// Instances is how many SWE-Gym instances get a rollout (1 to 2,119).
	Instances int
	// Speedup divides every time taken from the data (steps, init): 30
	// runs a 9 s agent step in 0.3 s.
	Speedup float64
	// Seed picks each instance's rollout profile and step times; the same
	// seed gives the same graph.
	Seed uint64
	// Runtime is the workers' runtime: "docker" (the tasks run the
	// programs inside the demo images) or "process" (they run the
	// programs at AgentPath and ModelPath on the worker's machine).
	Runtime string
	// AgentPath and ModelPath are the agent and model server programs as
	// the task sees them: in the images, /bin/megaflow-agent and
	// /bin/megaflow-model; with the process runtime, absolute paths.
	AgentPath, ModelPath string
	// WorkRoot is where each rollout's session keeps its workspace: with
	// docker "/work" inside the session's container; with the process
	// runtime a host directory, one subdirectory per graph and instance.
	WorkRoot string
	// ModelURL, when set, is the model endpoint every rollout gets in
	// MEGAFLOW_SERVICE_MODEL (a model server the caller runs). Empty: the
	// graph declares the model as a `service` task named "model" and the
	// rollouts list it in uses_services, so the head publishes its
	// endpoint to them.
	ModelURL string
}

// DefaultOptions returns the demo's defaults for the docker runtime.
func DefaultOptions() Options {
	return Options{GraphID: "swegym-step-1", Tenant: "demo", Instances: 64, Speedup: 30, Seed: 1, Runtime: "docker",
		AgentPath: "/bin/megaflow-agent", ModelPath: "/bin/megaflow-model", WorkRoot: "/work"}
}

// Profile is what the data decided for one instance's rollout.
type Profile struct {
	Instance Instance
	// From is the OpenHands rollout whose steps, attempts and end state
	// this rollout replays.
	From string
	// Attempts the agent needs: attempts before the last fail.
	Attempts int
	// StepMillis are the time-compressed per-step times, one per step.
	StepMillis []int64
	// InitMillis is the time-compressed environment initialisation.
	InitMillis int64
	// Finished is false when the data's rollout hit the step limit.
	Finished bool
}

// Step is a built demo rollout step.
type Step struct {
	Graph    *client.GraphSpec
	Profiles []Profile
	Images   []string
}

// Model is the name of the model service in the graph and the suffix of
// its environment variable (MEGAFLOW_SERVICE_MODEL).
const Model = "model"

// EnvModel is the environment variable that carries the model endpoints
// (comma-separated http://host:port) to the agent.
const EnvModel = "MEGAFLOW_SERVICE_MODEL"

// Build builds the rollout step from the data. Errors name the option that
// is out of range.
func (d *Data) Build(o Options) (*Step, error) {
	switch {
	case o.Instances < 1 || o.Instances > len(d.Instances):
		return nil, fmt.Errorf("instances %d: want 1 to %d (the SWE-Gym training instances)", o.Instances, len(d.Instances))
	case o.Speedup < 1 || o.Speedup > 10000:
		return nil, fmt.Errorf("speedup %g: want 1 (real time) to 10000", o.Speedup)
	case o.Runtime != "docker" && o.Runtime != "process":
		return nil, fmt.Errorf("runtime %q: want docker or process", o.Runtime)
	case o.AgentPath == "" || (o.ModelURL == "" && o.ModelPath == ""):
		return nil, fmt.Errorf("the agent program's path (and the model server's, without a model URL) must be given")
	case o.WorkRoot == "":
		return nil, fmt.Errorf("the work root must be given")
	}
	b := client.NewGraph(o.GraphID).Tenant(o.Tenant).Label("megaflow.io/metric", "reward").
		Name(fmt.Sprintf("SWE-Gym rollout step: %d instances, times / %g", o.Instances, o.Speedup))
	step := &Step{}
	images := map[string]bool{}
	if o.ModelURL == "" {
		// The Model Service: an OpenAI-compatible server run as a service
		// task; the head publishes its endpoint to the rollouts.
		img := ImageOf(d.Instances[0].Repo)
		b.Task(Model, img, o.ModelPath).CPU(250).Memory(64 << 20).Network(net(o)).
			Service(&client.ServiceSpec{Name: Model, ReadinessHttpPath: "/health"})
	}
	for _, in := range d.Pick(o.Instances) {
		p := d.profile(in, o)
		step.Profiles = append(step.Profiles, p)
		img := ImageOf(in.Repo)
		images[img] = true
		dir := o.WorkRoot
		if o.Runtime == "process" {
			dir = path.Join(o.WorkRoot, o.GraphID, in.ID)
		}
		cpu, mem := int64(100*in.Factor), int64(64<<20)*int64(in.Factor)
		setup := b.Task("setup."+in.ID, img, o.AgentPath, "setup", "--dir", dir, "--repo", in.Repo,
			"--init-ms", strconv.FormatInt(p.InitMillis, 10)).
			Session(in.ID).CPU(cpu).Memory(mem).Retries(2).Timeout(5 * time.Minute).Network(net(o))
		end := "finished"
		if !p.Finished {
			end = "step-limit"
		}
		rollout := b.Task("rollout."+in.ID, img, o.AgentPath, "rollout", "--dir", dir, "--instance", in.ID,
			"--step-ms", joinInts(p.StepMillis), "--fail-attempts", strconv.Itoa(p.Attempts-1), "--end", end).
			After(setup).Session(in.ID).Type("train").CPU(cpu).Memory(mem).Retries(3).Timeout(10 * time.Minute).
			Network(net(o))
		if o.Runtime == "docker" {
			// The agent copies the trajectory into MEGAFLOW_OUTPUT_DIR,
			// kept as an artifact (megaflow artifacts get TASK). The
			// process runtime's tasks run in the worker's directory.
			rollout.WorkDir(dir).Outputs("trajectory.jsonl")
		}
		if o.ModelURL != "" {
			rollout.Env(EnvModel, o.ModelURL)
		} else {
			rollout.UsesServices(Model)
		}
		b.Task("eval."+in.ID, img, o.AgentPath, "eval", "--dir", dir).
			After(rollout).Session(in.ID).Type("eval").CPU(cpu).Memory(mem).Retries(2).Timeout(5 * time.Minute).Network(net(o))
	}
	g, err := b.Build()
	if err != nil {
		return nil, err
	}
	step.Graph = g
	for img := range images {
		step.Images = append(step.Images, img)
	}
	sort.Strings(step.Images)
	return step, nil
}

// net is the network of a rollout's tasks: with docker the model listens
// on the host's loopback (a caller-run server) or on a port of a service
// task, so the rollout shares the host's network. All tasks of a session
// get it: the session's one container is created with the first task's
// settings.
func net(o Options) string {
	if o.Runtime == "docker" {
		return "host"
	}
	return ""
}

// profile draws one instance's rollout from the data, deterministically
// from the seed and the instance id.
func (d *Data) profile(in Instance, o Options) Profile {
	h := fnv.New64a()
	h.Write([]byte(in.ID))
	rng := rand.New(rand.NewPCG(o.Seed, h.Sum64()))
	r := d.Rollouts[rng.IntN(len(d.Rollouts))]
	p := Profile{Instance: in, From: r.Instance, Attempts: r.Attempts, Finished: r.EndState != "ERROR",
		InitMillis: int64(r.InitSeconds * 1000 / o.Speedup)}
	for range r.Steps {
		s := d.StepSeconds[rng.IntN(len(d.StepSeconds))]
		p.StepMillis = append(p.StepMillis, int64(s*1000/o.Speedup))
	}
	return p
}

func joinInts(v []int64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatInt(x, 10)
	}
	return strings.Join(s, ",")
}

// Summary describes a built step in a few lines for people: instances,
// repositories and images, attempts the data makes fail, the time
// compression.
func (s *Step) Summary(speedup float64) string {
	var steps, failing int
	var ms int64
	for _, p := range s.Profiles {
		steps += len(p.StepMillis)
		failing += p.Attempts - 1
		for _, m := range p.StepMillis {
			ms += m
		}
	}
	n := len(s.Profiles)
	return fmt.Sprintf("%d rollouts (setup -> agent rollout -> evaluation, one session each) on %d repository images; "+
		"%d agent steps in all (mean %.1f per rollout); %d agent attempt(s) fail and are retried, as in the data; "+
		"times compressed %gx (a mean step of %.1f s runs in %d ms)",
		n, len(s.Images), steps, float64(steps)/float64(max(n, 1)), failing, speedup,
		float64(ms)*speedup/1000/float64(max(steps, 1)), ms/int64(max(steps, 1)))
}
