package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/examples/demo"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// plansFor returns rollout plans of instances ids, whose setup asks for
// cpu[i] millicores.
func plansFor(ids []string, cpu []int64) []rolloutPlan {
	var out []rolloutPlan
	for i, id := range ids {
		task := func(kind string) *wire.TaskSpec {
			return &wire.TaskSpec{Name: kind + "." + id, Resources: &wire.Resources{CpuMillis: cpu[i]}}
		}
		out = append(out, rolloutPlan{profile: demo.Profile{Instance: demo.Instance{ID: id}}, setup: task("setup"), rollout: task("rollout"), eval: task("eval")})
	}
	return out
}

// The bookkeeping of a sandbox-mode step adds up as graph mode's summary
// does: a rollout that succeeded after a retry and one whose sandbox never
// came; then an interrupted step.
func TestSandboxStepSummary(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	st := newSandboxStep("step-1", plansFor([]string{"a", "b"}, []int64{100, 200}))
	// a: setup 1 s; rollout fails once, then 4 s; eval 0.5 s, reward 1.
	st.sandboxCreated(0, "sbx-a")
	st.begin(0, at(0))
	st.end(0, client.TaskSucceeded, "", at(1))
	st.begin(1, at(1))
	st.end(1, client.TaskQueued, "broke", at(2))
	if c := st.counts(); c.Succeeded != 1 || c.Queued != 1 || c.Pending != 4 {
		t.Fatalf("counts mid-way: %v", c)
	}
	st.begin(1, at(3))
	st.end(1, client.TaskSucceeded, "", at(7))
	st.stepsDone(0, 12)
	st.begin(2, at(7))
	st.setReward(2, 1)
	st.end(2, client.TaskSucceeded, "", at(7.5))
	st.sandboxClosed(0, nil)
	// b: no sandbox: its setup fails, the rest is cancelled.
	st.begin(3, at(0.5))
	st.end(3, client.TaskFailed, "no sandbox: image missing", at(0.5))
	st.skip(4, "its setup failed")
	st.skip(5, "its setup failed")
	st.finish(at(8), false, 2, 0, "")

	s := st.summary()
	want := map[string]uint32{"succeeded": 3, "failed": 1, "cancelled": 2}
	for k, v := range s.Counts {
		if v != want[k] {
			t.Errorf("count %s %d, want %d", k, v, want[k])
		}
	}
	if s.Mode != modeSandbox || s.GraphID != "step-1" || s.Tasks != 6 || s.State != "failed" || s.ExitCode != exitGraphFailed ||
		s.SuccessRate != 0.75 || s.RewardCount != 1 || s.RewardMean != 1 || s.Metric != "reward" ||
		s.Attempts != 5 || s.RetriedTasks != 1 || s.WallSeconds != 7.5 {
		t.Fatalf("summary %+v", s)
	}
	// Task times of last attempts: 0 (b's setup), 0.5, 1, 4.
	if s.TaskSecondsP50 != 0.5 || s.TaskSecondsP99 != 4 {
		t.Errorf("task times p50 %v p99 %v, want 0.5 and 4", s.TaskSecondsP50, s.TaskSecondsP99)
	}
	sb := s.Sandbox
	if sb == nil || sb.Sandboxes != 1 || sb.Closed != 1 || sb.Left != 0 || sb.Parallel != 2 || len(sb.Rollouts) != 2 {
		t.Fatalf("sandbox stats %+v", sb)
	}
	a, b := sb.Rollouts[0], sb.Rollouts[1]
	if a.Instance != "a" || a.Sandbox != "sbx-a" || a.Attempts != 2 || a.Steps != 12 || a.Reward == nil || *a.Reward != 1 || a.State != "succeeded" || a.Reason != "" {
		t.Errorf("rollout a: %+v", a)
	}
	if b.Instance != "b" || b.Sandbox != "" || b.Reward != nil || b.State != "failed" || b.Reason != "setup.b: no sandbox: image missing" {
		t.Errorf("rollout b: %+v", b)
	}
	if f := st.failures(); len(f) != 1 || f[0] != "setup.b: no sandbox: image missing" {
		t.Errorf("failures %q", f)
	}

	// Interrupted with a task running and others waiting: all cancelled,
	// and no task time (as in graph mode, cancelled tasks are left out).
	st = newSandboxStep("step-2", plansFor([]string{"a"}, []int64{100}))
	st.begin(0, at(0))
	st.finish(at(2), true, 1, 0, "")
	s = st.summary()
	if s.State != "cancelled" || s.ExitCode != exitInterrupted || s.Counts["cancelled"] != 3 || s.TaskTimes != 0 || s.TaskSecondsP99 != 0 || s.WallSeconds != 2 {
		t.Fatalf("interrupted: %+v", s)
	}
}

// The sandbox-mode summary has graph mode's lines, in the same order and
// with the same labels, then its own: a user compares them line by line.
func TestSandboxSummaryLinesMatchGraphMode(t *testing.T) {
	labels := func(out string) []string {
		var l []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] { // after the header
			label, _, _ := strings.Cut(strings.TrimSpace(line), "  ")
			l = append(l, label)
		}
		return l
	}
	var g, s bytes.Buffer
	graph := &Summary{GraphID: "swegym-step-1", State: "succeeded", Tasks: 3, Counts: map[string]uint32{"succeeded": 3}, SuccessRate: 1,
		Metric: "reward", RewardMean: 1, RewardCount: 1, Attempts: 4, RetriedTasks: 1, WallSeconds: 2}
	printSummary(&g, graph)
	st := newSandboxStep("swegym-step-1", plansFor([]string{"a"}, []int64{100}))
	for i := range 3 {
		st.begin(i, time.Unix(int64(i), 0))
		st.end(i, client.TaskSucceeded, "", time.Unix(int64(i)+1, 0))
	}
	st.setReward(2, 1)
	st.sandboxCreated(0, "sbx-a")
	st.sandboxClosed(0, nil)
	st.execDone(20 * time.Millisecond)
	st.finish(time.Unix(9, 0), false, 1, 0, "")
	printSummary(&s, st.summary())
	gl, sl := labels(g.String()), labels(s.String())
	if len(sl) <= len(gl) || strings.Join(sl[:len(gl)], "|") != strings.Join(gl, "|") {
		t.Fatalf("graph mode's lines %q are not the start of sandbox mode's %q\n%s\n%s", gl, sl, g.String(), s.String())
	}
	for _, want := range []string{"sandboxes", "execs", "exec time p50 / p99", "model calls"} {
		if !strings.Contains(strings.Join(sl[len(gl):], "|"), want) {
			t.Errorf("sandbox mode's own lines %q lack %q", sl[len(gl):], want)
		}
	}
	if !strings.Contains(s.String(), "step swegym-step-1 succeeded (sandbox mode") || !strings.Contains(s.String(), "1 closed, 0 left") {
		t.Errorf("sandbox summary:\n%s", s.String())
	}
}

func TestSandboxParallel(t *testing.T) {
	for _, tc := range []struct {
		worker, model int64
		cpu           []int64
		want          int
	}{
		{2000, 250, []int64{100, 200, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100}, 17},
		{2000, 0, []int64{200, 200}, 2},      // no more than the rollouts
		{150, 250, []int64{100, 100}, 1},     // at least one
		{64000, 250, []int64{0, 0, 0}, 3},    // no request: every rollout
		{1000, 0, []int64{400, 300, 500}, 3}, // the smallest request bounds it
	} {
		ids := make([]string, len(tc.cpu))
		for i := range ids {
			ids[i] = string(rune('a' + i))
		}
		if got := sandboxParallel(tc.worker, tc.model, plansFor(ids, tc.cpu)); got != tc.want {
			t.Errorf("worker %d, model %d, requests %v: %d at once, want %d", tc.worker, tc.model, tc.cpu, got, tc.want)
		}
	}
}

func TestResultField(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want float64
		err  string
	}{
		{"trajectory: 3 steps\nMEGAFLOW_RESULT {\"reward\": 1, \"steps\": 3}\n", 1, ""},
		{"MEGAFLOW_RESULT {\"reward\": 0}\nMEGAFLOW_RESULT {\"reward\": 0.5}", 0.5, ""}, // the last line counts
		{"no result here\n", 0, "no MEGAFLOW_RESULT line"},
		{"MEGAFLOW_RESULT {\"steps\": 3}\n", 0, `has no number "reward"`},
		{"MEGAFLOW_RESULT not json\n", 0, "is not a JSON object"},
	} {
		got, err := resultField([]byte(tc.out), "reward")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, %v; want an error saying %q", tc.out, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %v, %v; want %v", tc.out, got, err, tc.want)
		}
	}
}

// runTask runs a task's attempts as the head would: retried up to its
// max_retries, not when the sandbox ended, TIMED_OUT at its timeout; the
// prepare step (the sandbox's creation) is not timed and its failure is
// the attempt's.
func TestRunTask(t *testing.T) {
	ended := errs.New(errs.FailedPrecondition, "sandbox sbx-1 is LOST")
	for _, tc := range []struct {
		name      string
		retries   int32
		timeout   int64
		prepare   []error // per attempt; nil: no prepare
		do        []error // per attempt that gets past prepare
		ok        bool
		state     client.TaskState
		attempts  int
		doCalls   int
		lastSecs  float64
		reasonHas string
	}{
		{"first try", 2, 0, nil, []error{nil}, true, client.TaskSucceeded, 1, 1, 1, ""},
		{"retried", 2, 0, nil, []error{errors.New("exit 17"), nil}, true, client.TaskSucceeded, 2, 2, 1, ""},
		{"out of retries", 1, 0, nil, []error{errors.New("exit 1"), errors.New("exit 2")}, false, client.TaskFailed, 2, 2, 1, "exit 2"},
		{"sandbox ended", 3, 0, nil, []error{ended}, false, client.TaskFailed, 1, 1, 1, "LOST"},
		{"no sandbox, then one", 2, 0, []error{errors.New("no sandbox: start failed"), nil}, []error{nil}, true, client.TaskSucceeded, 2, 1, 1, ""},
		{"never a sandbox", 1, 0, []error{errors.New("no sandbox: a"), errors.New("no sandbox: b")}, nil, false, client.TaskFailed, 2, 0, 0, "no sandbox: b"},
		{"timed out", 0, 1, nil, []error{context.DeadlineExceeded}, false, client.TaskTimedOut, 1, 1, 1, "timed out after 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newSandboxStep("s", plansFor([]string{"a"}, []int64{100}))
			clock := time.Unix(0, 0)
			r := &sandboxRunner{step: st, backoff: time.Millisecond, now: func() time.Time { return clock }}
			var prepare func(context.Context) error
			tries := 0
			if tc.prepare != nil {
				prepare = func(context.Context) error {
					clock = clock.Add(time.Hour) // not the task's time
					tries++
					return tc.prepare[tries-1]
				}
			}
			calls := 0
			ok := r.runTask(context.Background(), 0, &wire.TaskSpec{Name: "setup.a", MaxRetries: tc.retries, TimeoutSeconds: tc.timeout}, prepare,
				func(ctx context.Context, _ int) error {
					calls++
					clock = clock.Add(time.Second)
					err := tc.do[calls-1]
					if err == context.DeadlineExceeded {
						<-ctx.Done() // the task's timeout
						return ctx.Err()
					}
					return err
				})
			st.finish(clock, false, 1, 0, "")
			task := st.tasks[0]
			if ok != tc.ok || task.state != tc.state || task.attempts != tc.attempts || calls != tc.doCalls ||
				task.finish.Sub(task.start).Seconds() != tc.lastSecs || !strings.Contains(task.reason, tc.reasonHas) {
				t.Fatalf("ok %v, state %v, %d attempts, %d calls, last %v, reason %q; want %v, %v, %d, %d, %vs, %q",
					ok, task.state, task.attempts, calls, task.finish.Sub(task.start), task.reason,
					tc.ok, tc.state, tc.attempts, tc.doCalls, tc.lastSecs, tc.reasonHas)
			}
		})
	}
}

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{errs.New(errs.Unavailable, "worker unreachable"), true},
		{errs.New(errs.FailedPrecondition, "sandbox sbx-1 is CLOSED"), false},
		{errs.New(errs.NotFound, "no sandbox sbx-1"), false},
		{errs.New(errs.InvalidArgument, "argv empty"), false},
		{os.ErrDeadlineExceeded, true}, // an exit code, a broken attempt, a model error
	} {
		if got := retryable(tc.err); got != tc.want {
			t.Errorf("retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	for _, tc := range []struct {
		reason string
		want   bool
	}{
		{client.ReasonSandboxClosed, true}, {client.ReasonSandboxExpired, true}, {client.ReasonSandboxLost, true},
		{client.ReasonSandboxFailed, true}, {client.ReasonSandboxNotFound, true},
		{client.ReasonSandboxNotReady, false}, {client.ReasonWorkerUnreachable, false}, {client.ReasonFileTooLarge, false}, {"", false},
	} {
		e := errs.New(errs.FailedPrecondition, "x")
		e.Reason = tc.reason
		if got := sandboxEnded(fmt.Errorf("exec: %w", e)); got != tc.want {
			t.Errorf("sandboxEnded(reason %q) = %v, want %v", tc.reason, got, tc.want)
		}
	}
}

// Bad --mode values, and --mode sandbox where no Docker Engine can serve
// sandboxes, are refused with what to do, before the cluster starts or
// the data directory is made.
func TestDemoModeRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  string // DOCKER_HOST
		code int
		want []string
	}{
		{"unknown mode", []string{"--mode", "tasks"}, "", exitUsage, []string{`--mode "tasks": want graph`, "or sandbox"}},
		{"empty mode", []string{"--mode", ""}, "", exitUsage, []string{`--mode "": want graph`}},
		{"sandbox on the process runtime", []string{"--mode", "sandbox", "--runtime", "process"}, "", exitUsage,
			[]string{"only the Docker runtime serves sandboxes", "drop --runtime process", "--mode graph"}},
		{"sandbox without an engine", []string{"--mode", "sandbox"}, "unix:///nonexistent/megaflow-test.sock", exitError,
			[]string{"no Docker Engine answers", "only the Docker runtime serves sandboxes", "DOCKER_HOST", "--mode graph"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("DOCKER_HOST", tc.env)
			}
			dir := filepath.Join(t.TempDir(), "data")
			code, out, errOut := cli(t, append([]string{"demo", "--data-dir", dir, "--instances", "2"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout %q\nstderr %q", code, tc.code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q does not say %q", errOut, w)
				}
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("the refused demo made %s (stat: %v)", dir, err)
			}
		})
	}
}

// The summary's success rate is of the tasks that ran to an end, and says
// so when some were cancelled: a cancelled graph whose finished tasks all
// succeeded does not read as a full success.
func TestSummarySuccessRateLine(t *testing.T) {
	for _, c := range []struct {
		counts map[string]uint32
		rate   float64
		want   string
	}{
		{map[string]uint32{"succeeded": 3}, 1, "success rate 100.0%"},
		{map[string]uint32{"succeeded": 2, "cancelled": 1}, 1, "success rate 100.0% (2 of 2 finished; 1 cancelled, not counted)"},
		{map[string]uint32{"succeeded": 1, "failed": 1, "cancelled": 2}, 0.5, "success rate 50.0% (1 of 2 finished; 2 cancelled, not counted)"},
		{map[string]uint32{"cancelled": 2}, 0, "success rate - (no task finished)"},
	} {
		var b bytes.Buffer
		printSummary(&b, &Summary{GraphID: "g", State: "cancelled", Tasks: 3, Counts: c.counts, SuccessRate: c.rate})
		var lines []string // each line's words, the table's padding aside
		for _, l := range strings.Split(b.String(), "\n") {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
		if !slices.Contains(lines, c.want) {
			t.Errorf("counts %v: summary lacks the line %q:\n%s", c.counts, c.want, b.String())
		}
	}
}
