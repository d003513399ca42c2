// Package demo builds MegaFlow's demo rollout step from real public data
// (data/README.md): one rollout per SWE-Gym training instance, each a chain
// of environment setup -> agent rollout -> evaluation in one persistent
// session container of the instance's repository image, with step counts,
// per-step times and agent retries drawn from 50 OpenHands SWE-bench
// rollouts. It also holds the mock model server the agent calls. The
// `megaflow demo` command and the agent program (cmd/megaflow-agent) use
// it; it imports the client library only.
package demo

import (
	"bytes"
	"embed"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

//go:embed data/*.json data/*.csv
var files embed.FS

// Instance is one SWE-Gym training instance.
type Instance struct {
	// ID is the instance id, e.g. "getmoto__moto-4950".
	ID string
	// Repo is the source repository, "owner/name", e.g. "getmoto/moto".
	Repo string
	// Factor is OpenHands' resource multiplier of the default sandbox (1 or 2).
	Factor int
}

// Rollout is one of the 50 OpenHands SWE-bench Verified rollouts.
type Rollout struct {
	Instance string
	// Attempts is how many agent attempts the rollout needed (1 to 3).
	Attempts int
	// Steps is the number of agent steps of the last attempt.
	Steps int
	// EndState is "FINISHED" or "ERROR" (the step limit was hit).
	EndState string
	// InitSeconds is the environment initialisation time, in seconds.
	InitSeconds float64
}

// Data is the demo's data set, loaded from the embedded files.
type Data struct {
	// Instances in file order.
	Instances []Instance
	// Rollouts in file order.
	Rollouts []Rollout
	// StepSeconds are the gaps between consecutive model calls of a
	// rollout, in seconds, sorted; gaps over MaxStepSeconds are left out.
	StepSeconds []float64
}

// MaxStepSeconds bounds the per-step gaps taken from the data: longer gaps
// span an agent restart rather than a step.
const MaxStepSeconds = 120

// Load parses the embedded data files.
func Load() (*Data, error) {
	d := &Data{}
	var err error
	if d.Instances, err = loadInstances("data/resource_factor_SWE-Gym_train.json"); err != nil {
		return nil, err
	}
	if d.Rollouts, err = loadRollouts("data/rollout_phases_swebv_50.csv"); err != nil {
		return nil, err
	}
	if d.StepSeconds, err = loadGaps("data/llm_call_times_swebv_50.csv"); err != nil {
		return nil, err
	}
	return d, nil
}

// loadInstances reads the id -> multiplier object keeping the file order.
func loadInstances(name string) ([]Instance, error) {
	b, err := files.ReadFile(name)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("%s: want a JSON object of instance id -> multiplier", name)
	}
	var out []Instance
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		id, _ := t.(string)
		var f int
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("%s: instance %q: %w", name, id, err)
		}
		owner, rest, ok := strings.Cut(id, "__")
		i := strings.LastIndexByte(rest, '-')
		if !ok || i <= 0 {
			return nil, fmt.Errorf("%s: instance id %q is not owner__repo-number", name, id)
		}
		out = append(out, Instance{ID: id, Repo: owner + "/" + rest[:i], Factor: max(f, 1)})
	}
	return out, nil
}

func readCSV(name string) ([]map[string]string, error) {
	b, err := files.ReadFile(name)
	if err != nil {
		return nil, err
	}
	r := csv.NewReader(bytes.NewReader(b))
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var rows []map[string]string
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		row := map[string]string{}
		for i, h := range head {
			row[h] = rec[i]
		}
		rows = append(rows, row)
	}
}

func loadRollouts(name string) ([]Rollout, error) {
	rows, err := readCSV(name)
	if err != nil {
		return nil, err
	}
	out := make([]Rollout, 0, len(rows))
	for i, row := range rows {
		a, err1 := strconv.Atoi(row["agent_attempts"])
		s, err2 := strconv.Atoi(row["agent_steps_last_attempt"])
		init, _ := strconv.ParseFloat(row["init_s"], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: row %d: agent_attempts %q or agent_steps_last_attempt %q is not a number", name, i+2,
				row["agent_attempts"], row["agent_steps_last_attempt"])
		}
		out = append(out, Rollout{Instance: row["instance_id"], Attempts: max(a, 1), Steps: max(s, 1),
			EndState: row["end_state"], InitSeconds: init})
	}
	return out, nil
}

func loadGaps(name string) ([]float64, error) {
	rows, err := readCSV(name)
	if err != nil {
		return nil, err
	}
	var out []float64
	for _, row := range rows {
		g, err := strconv.ParseFloat(row["gap_from_prev_call_s"], 64)
		if err != nil || g <= 0 || g > MaxStepSeconds {
			continue // the first call of a rollout has no gap
		}
		out = append(out, g)
	}
	sort.Float64s(out)
	return out, nil
}

// Repos returns the distinct repositories of the instances, in order of
// first appearance.
func (d *Data) Repos() []string {
	seen := map[string]bool{}
	var out []string
	for _, in := range d.Instances {
		if !seen[in.Repo] {
			seen[in.Repo] = true
			out = append(out, in.Repo)
		}
	}
	return out
}

// Pick returns n instances: the instances of each repository in file
// order, taken round-robin across the repositories (in order of first
// appearance), so that even a small step spans every repository's image.
// n is capped at the number of instances.
func (d *Data) Pick(n int) []Instance {
	byRepo := map[string][]Instance{}
	for _, in := range d.Instances {
		byRepo[in.Repo] = append(byRepo[in.Repo], in)
	}
	repos := d.Repos()
	n = min(n, len(d.Instances))
	out := make([]Instance, 0, n)
	for round := 0; len(out) < n; round++ {
		for _, r := range repos {
			if round < len(byRepo[r]) && len(out) < n {
				out = append(out, byRepo[r][round])
			}
		}
	}
	return out
}

// ImageOf returns the demo environment image of a repository:
// megaflow/swegym-<name>:demo with <name> the repository's name in lower
// case (scripts/build-demo-images.sh builds them).
func ImageOf(repo string) string {
	_, name, _ := strings.Cut(repo, "/")
	return "megaflow/swegym-" + strings.ToLower(name) + ":demo"
}
