// Command megaflow-agent is the demo's small coding agent. It runs inside a
// rollout's session container (or as a plain process with the process
// runtime), in three steps of one rollout:
//
//	megaflow-agent setup   --dir D --repo owner/name --init-ms N
//	megaflow-agent rollout --dir D --instance ID --step-ms 120,340,... --fail-attempts K --end finished|step-limit
//	megaflow-agent eval    --dir D
//
// setup lays out a small repository in D/repo and takes the environment's
// initialisation time. rollout runs one agent step per --step-ms entry:
// it calls the model endpoint (the first of the comma-separated URLs in
// MEGAFLOW_SERVICE_MODEL, OpenAI chat completions), runs the shell command
// of the model's tool call in D, appends the step to D/trajectory.jsonl and
// waits out the rest of the step's time. Attempts up to --fail-attempts
// (MEGAFLOW_ATTEMPT, from 1) break off half-way with exit code 17, as a
// runtime failure of the data did. eval reads the trajectory and prints the
// reward: 1 when the agent finished within its step limit, else 0. Each
// step prints its result on a MEGAFLOW_RESULT line.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/megaflow/megaflow/examples/demo/agent"
	"github.com/megaflow/megaflow/internal/version"
)

// exitInjected is the exit code of an attempt failed on purpose.
const exitInjected = 17

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: megaflow-agent setup|rollout|eval [flags] | --version")
		return 2
	}
	if args[0] == "--version" {
		fmt.Fprintln(stdout, "megaflow-agent", version.Get())
		return 0
	}
	fs := flag.NewFlagSet("megaflow-agent "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "the rollout's workspace directory")
	var err error
	switch args[0] {
	case "setup":
		repo := fs.String("repo", "", "source repository, owner/name")
		initMs := fs.Int64("init-ms", 0, "initialisation time in milliseconds")
		if err = fs.Parse(args[1:]); err == nil {
			err = setup(ctx, stdout, *dir, *repo, time.Duration(*initMs)*time.Millisecond)
		}
	case "rollout":
		instance := fs.String("instance", "", "SWE-Gym instance id")
		steps := fs.String("step-ms", "", "comma-separated per-step times in milliseconds")
		failAttempts := fs.Int("fail-attempts", 0, "attempts (from 1) that break off half-way")
		end := fs.String("end", "finished", "how the rollout ends: finished or step-limit")
		if err = fs.Parse(args[1:]); err == nil {
			err = rollout(ctx, stdout, *dir, *instance, *steps, *failAttempts, *end)
		}
	case "eval":
		if err = fs.Parse(args[1:]); err == nil {
			err = eval(stdout, *dir)
		}
	default:
		fmt.Fprintf(stderr, "megaflow-agent: unknown step %q: want setup, rollout or eval\n", args[0])
		return 2
	}
	var code exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		fmt.Fprintln(stderr, "megaflow-agent:", err)
		return int(code)
	}
	fmt.Fprintln(stderr, "megaflow-agent:", err)
	return 1
}

type exitCode int

func (c exitCode) Error() string {
	return fmt.Sprintf("runtime failure injected from the data (exit %d): this rollout needed another attempt", int(c))
}

func result(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(w, "MEGAFLOW_RESULT %s\n", b)
}

func setup(ctx context.Context, out io.Writer, dir, repo string, init time.Duration) error {
	if dir == "" || repo == "" {
		return errors.New("setup: --dir and --repo are required")
	}
	src := filepath.Join(dir, "repo")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	files := map[string]string{
		"README":       "repository " + repo + "\n",
		"core.py":      "def apply(x):\n    # TODO: handle None\n    return x + 1\n",
		"util.py":      "def helper(y):\n    return y * 2\n",
		"test_core.py": "from core import apply\n\ndef test_apply():\n    assert apply(1) == 2\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	if err := agent.Sleep(ctx, init); err != nil {
		return err
	}
	fmt.Fprintf(out, "environment of %s ready in %s (init %v)\n", repo, src, init)
	result(out, map[string]any{"repo": repo, "files": len(files), "init_ms": init.Milliseconds()})
	return nil
}

func rollout(ctx context.Context, out io.Writer, dir, instance, stepList string, failAttempts int, end string) error {
	if dir == "" || stepList == "" {
		return errors.New("rollout: --dir and --step-ms are required")
	}
	var steps []time.Duration
	for _, s := range strings.Split(stepList, ",") {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ms < 0 {
			return fmt.Errorf("rollout: --step-ms %q: want comma-separated milliseconds", s)
		}
		steps = append(steps, time.Duration(ms)*time.Millisecond)
	}
	endpoints := strings.Split(os.Getenv("MEGAFLOW_SERVICE_MODEL"), ",")
	if endpoints[0] == "" {
		return errors.New("rollout: MEGAFLOW_SERVICE_MODEL is empty: the task must list the model service in uses_services (or get the endpoint in its env)")
	}
	model := strings.TrimRight(endpoints[0], "/")
	attempt, _ := strconv.Atoi(os.Getenv("MEGAFLOW_ATTEMPT"))
	attempt = max(attempt, 1)
	// Written under a name of this attempt's, renamed into place at the
	// end: an earlier attempt still running (a process whose worker was
	// killed) never interleaves its lines with this one's, and eval never
	// reads half a trajectory.
	final := filepath.Join(dir, "trajectory.jsonl")
	tmp := fmt.Sprintf("%s.a%d.tmp", final, attempt)
	traj, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("rollout: %w (did the setup step run in this session?)", err)
	}
	defer traj.Close()
	enc := json.NewEncoder(traj)
	m := &agent.Model{URL: model}
	conv := agent.NewConversation(instance)
	for i, d := range steps {
		start := time.Now()
		if attempt <= failAttempts && i == len(steps)/2 {
			fmt.Fprintf(out, "attempt %d: the environment broke at step %d\n", attempt, i+1)
			return exitCode(exitInjected)
		}
		cmd, err := m.Next(ctx, conv.Messages())
		if err != nil {
			return fmt.Errorf("rollout: step %d: model at %s: %w", i+1, model, err)
		}
		modelMs := time.Since(start).Milliseconds()
		sh := exec.CommandContext(ctx, "sh", "-c", cmd)
		sh.Dir = dir
		output, _ := sh.CombinedOutput()
		code := 0
		if sh.ProcessState != nil {
			code = sh.ProcessState.ExitCode()
		}
		if err := enc.Encode(agent.Step{Step: i + 1, Attempt: attempt, ModelMillis: modelMs, Tool: cmd, ToolExit: code, OutputBytes: len(output)}); err != nil {
			return err
		}
		conv.Observe(cmd, code, output)
		if err := agent.Sleep(ctx, d-time.Since(start)); err != nil {
			return err
		}
	}
	if err := enc.Encode(agent.Step{Step: len(steps), Attempt: attempt, End: end}); err != nil {
		return err
	}
	if err := traj.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	if outDir := os.Getenv("MEGAFLOW_OUTPUT_DIR"); outDir != "" {
		// Kept as an artifact when the task declares it (output_paths).
		if err := copyFile(filepath.Join(dir, "trajectory.jsonl"), filepath.Join(outDir, "trajectory.jsonl")); err != nil {
			return fmt.Errorf("rollout: keeping the trajectory: %w", err)
		}
	}
	fmt.Fprintf(out, "%s: %d steps, ended %s, attempt %d\n", instance, len(steps), end, attempt)
	result(out, map[string]any{"instance": instance, "steps": len(steps), "model_calls": len(steps), "end": end, "attempt": attempt,
		"trajectory": filepath.Join(dir, "trajectory.jsonl")})
	return nil
}

// copyFile copies the file at src to dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func eval(out io.Writer, dir string) error {
	f, err := os.Open(filepath.Join(dir, "trajectory.jsonl"))
	if err != nil {
		return fmt.Errorf("eval: %w (did the rollout step run in this session?)", err)
	}
	defer f.Close()
	e, err := agent.Evaluate(f)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	fmt.Fprintf(out, "trajectory: %d steps, end %q: reward %d\n", e.Steps, e.End, e.Reward)
	result(out, map[string]any{"reward": e.Reward, "steps": e.Steps, "end": e.End})
	return nil
}
