package head_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// browser starts headless Chromium (Debian's chromium) for a test. Without
// it the test is skipped, unless $CI is set: then it fails, as CI installs
// chromium (.ci/run).
func browser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed, and CI is set: .ci/run installs Debian's chromium for the dashboard test")
		}
		t.Skip("chromium is not installed (apt-get install chromium); skipping the dashboard browser test")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // start the browser now, with no deadline (see chromedp.NewContext)
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// step runs browser actions with a deadline.
func step(t *testing.T, ctx context.Context, what string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	run(t, ctx, what, timeout, chromedp.Steps(actions...))
}

// run runs one browser action with a deadline and returns its value.
func run[T any](t *testing.T, ctx context.Context, what string, timeout time.Duration, a chromedp.Action[T]) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := chromedp.Run(sctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// text reads the text of the first element matching a CSS selector, "" if
// none, in one evaluation: the page re-renders its tables on every update,
// so a node found by one protocol call may be gone by the next.
func text(sel string) chromedp.Action[string] {
	q, _ := json.Marshal(sel)
	return chromedp.Evaluate[string](`(document.querySelector(` + string(q) + `) || {}).textContent || ""`)
}

// The dashboard in a real headless browser: it loads from a head, shows the
// three heads and which leads, shows a running graph's progress change,
// shows a failed task's reason, and on a follower says that it is one. A
// screenshot goes to $MEGAFLOW_SCREENSHOT_DIR (else a temporary folder).
func TestDashboardInABrowser(t *testing.T) {
	bctx := browser(t)
	c := testcluster.New(t, testcluster.Options{Configure: withHTTP})
	lh := c.Members[c.WaitLeader(30*time.Second)].Head()
	rt := fake.New(nil)
	rt.Default(fake.Behavior{Duration: 150 * time.Millisecond, Output: "MEGAFLOW_RESULT {\"reward\": 0.75}\n"})
	rt.OnCommand("/bin/fail", fake.Behavior{Duration: 10 * time.Millisecond, ExitCode: 3})
	c.AddWorker(testcluster.WorkerOptions{Runtime: rt, Capacity: worker.Capacity{CPUMillis: 1000, MemoryBytes: 1 << 30}})

	url := "http://" + lh.HTTPAddr() + "/"
	step(t, bctx, "load the dashboard", 20*time.Second, chromedp.Navigate(url),
		chromedp.WaitVisible(css(`body[data-loaded="true"]`)))
	// The page shows the three heads and marks the leader (on a loaded
	// machine an election may happen meanwhile: compare with the leader
	// the cluster has when the page is read).
	var heads []string
	var shown, starred string
	testcluster.WaitFor(t, 30*time.Second, "the dashboard to show 3 heads and the current leader", func() bool {
		heads = run(t, bctx, "read the heads", 10*time.Second,
			chromedp.Evaluate[[]string](`[...document.querySelectorAll("#heads tbody tr[data-head]")].map(r => r.dataset.head)`))
		shown = run(t, bctx, "read the leader", 10*time.Second, text(`#leader-id`))
		starred = run(t, bctx, "find the starred head", 5*time.Second,
			chromedp.Evaluate[string](`(document.querySelector("#heads tr.leader") || {dataset: {}}).dataset.head || ""`))
		cur := ""
		for _, h := range c.Running() {
			if h.IsLeader() {
				cur = h.ID()
			}
		}
		return len(heads) == 3 && shown == cur && starred == cur && cur != ""
	})
	// A graph of 8 tasks, two at a time; t00 fails.
	g := &client.GraphSpec{Id: "dash", Name: "rollout step 7"}
	for i := range 8 {
		cmd := "/bin/work"
		if i == 0 {
			cmd = "/bin/fail"
		}
		g.Tasks = append(g.Tasks, &client.TaskSpec{Name: fmt.Sprintf("t%02d", i), Type: "train", Image: "busybox",
			Command: []string{cmd}, Resources: &client.Resources{CpuMillis: 500, MemoryBytes: 64 << 20}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := c.Client().Submit(ctx, g); err != nil {
		t.Fatal(err)
	}
	sel := `#graphs tr[data-graph="dash"] .progress-text`
	step(t, bctx, "the graph appears", 20*time.Second, chromedp.WaitVisible(css(sel)))
	seen := map[string]bool{}
	var pageErr string
	t.Cleanup(func() {
		if t.Failed() {
			gr, _, err := c.Client().GetGraph(context.Background(), "dash", client.ReadOptions{})
			t.Logf("progress seen %v; page error %q; graph now %v (%v)", seen, pageErr, gr.GetCounts(), err)
		}
	})
	testcluster.WaitFor(t, 2*time.Minute, "the graph's progress to change and reach 8 / 8", func() bool {
		txt := run(t, bctx, "read progress", 5*time.Second, text((sel)))
		pageErr = run(t, bctx, "read the page's error", 5*time.Second, text(`#error:not(.hidden)`))
		seen[txt] = true
		return txt == "8 / 8"
	})
	if len(seen) < 2 {
		t.Errorf("progress went through %v; want it to show the graph unfinished, then 8 / 8", seen)
	}
	t.Logf("progress shown: %v", seen)

	// The failed task's reason, on the task's page.
	step(t, bctx, "open the failed task", 20*time.Second,
		chromedp.Navigate(url+"#/graph/dash/task/"+strings.ReplaceAll("dash/t00", "/", "%2F")),
		chromedp.WaitVisible(css(`#task-reason`)))
	reason := run(t, bctx, "read the task's reason", 5*time.Second, text((`#task-reason`)))
	if !strings.Contains(reason, "exit code 3") {
		t.Fatalf("failed task's reason shows %q, want it to say exit code 3", reason)
	}
	attemptReason := run(t, bctx, "read the attempt's reason", 5*time.Second,
		text((`#task-attempts tr[data-attempt="1"] .reason`)))
	if !strings.Contains(attemptReason, "exit code 3") {
		t.Errorf("attempt 1's reason shows %q, want exit code 3", attemptReason)
	}
	// Beside the prose, the reason's code (wire.ReasonCode).
	if code := run(t, bctx, "read the task's reason code", 5*time.Second, text(`#task-reason-code`)); code != "exit_code" {
		t.Errorf("failed task's reason code shows %q, want exit_code", code)
	}
	if code := run(t, bctx, "read the attempt's reason code", 5*time.Second,
		text(`#task-attempts tr[data-attempt="1"] .reason .code`)); code != "exit_code" {
		t.Errorf("attempt 1's reason code shows %q, want exit_code", code)
	}
	dir := os.Getenv("MEGAFLOW_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	png := run(t, bctx, "screenshot", 20*time.Second, chromedp.FullScreenshot(100))
	shot := filepath.Join(dir, "dashboard.png")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard screenshot: %s", shot)

	// A follower serves the page from its replica and says so.
	leader := c.WaitLeader(30 * time.Second) // the loaded machine may have held an election meanwhile
	lh = c.Members[leader].Head()
	follower := c.Members[(leader+1)%3].Head()
	step(t, bctx, "load the dashboard from a follower", 20*time.Second,
		chromedp.Navigate("http://"+follower.HTTPAddr()+"/"),
		chromedp.WaitVisible(css(`#stale`)))
	var banner string
	testcluster.WaitFor(t, 30*time.Second, "the follower's banner to name the leader", func() bool {
		banner = run(t, bctx, "read the follower banner", 5*time.Second, text(`#stale`))
		for _, h := range c.Running() {
			if h.IsLeader() {
				return strings.Contains(banner, "is a follower") && strings.Contains(banner, "the leader is "+h.ID()) &&
					strings.Contains(banner, "(its dashboard)")
			}
		}
		return false
	})
	href := run(t, bctx, "read the link to the leader's dashboard", 5*time.Second,
		chromedp.Evaluate[string](`(document.querySelector("#leader-link") || {}).href || ""`))
	for _, h := range c.Running() {
		if h.IsLeader() && !strings.HasPrefix(href, "http://"+h.HTTPAddr()+"/") {
			t.Errorf("the follower's banner links to %q; want the leader %s's dashboard at %s", href, h.ID(), h.HTTPAddr())
		}
	}
	step(t, bctx, "the graph on the follower", 20*time.Second, chromedp.WaitVisible(css(sel)))
	if dir := os.Getenv("MEGAFLOW_SCREENSHOT_DIR"); dir != "" {
		png = run(t, bctx, "follower screenshot", 20*time.Second, chromedp.FullScreenshot(100))
		_ = os.WriteFile(filepath.Join(dir, "dashboard-follower.png"), png, 0o644)
	}

	// The JSON API the page reads is usable on its own.
	resp, err := http.Get("http://" + follower.HTTPAddr() + "/api/tasks/dash/t00")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Meta struct {
			HeadID     string `json:"head_id"`
			FromLeader bool   `json:"from_leader"`
		} `json:"meta"`
		Task struct {
			State  string `json:"state"`
			Reason string `json:"reason"`
		} `json:"task"`
		LogsURL string `json:"logs_url"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.Meta.HeadID != follower.ID() || body.Task.State != "TASK_STATE_FAILED" || body.Task.Reason != "exit code 3" ||
		body.LogsURL != "/api/tasks/dash/t00/logs" {
		t.Errorf("/api/tasks/dash/t00 from %s: %+v", follower.ID(), body)
	}
}

// With ACLs on, the dashboard's API needs an admin token (it shows every
// tenant's task specs, env included): none, a malformed header and a read
// token are refused 401 with a reason; an admin token reads. In a real
// browser, the page asks for the token and then loads.
func TestDashboardNeedsAnAdminTokenWithACLs(t *testing.T) {
	bctx := browser(t)
	c := testcluster.New(t, testcluster.Options{Configure: func(cfg *head.Config) { withHTTP(cfg); cfg.ACL = true }})
	lh := c.Members[c.WaitLeader(30*time.Second)].Head()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adminSecret, readSecret := adminAndReadTokens(ctx, t, c)
	get := func(auth string) (int, string) {
		code, b := httpGet(ctx, t, "http://"+lh.HTTPAddr()+"/api/graphs", auth)
		var body struct{ Error string }
		_ = json.Unmarshal(b, &body)
		return code, body.Error
	}
	for _, tc := range []struct{ auth, want string }{
		{"", "needs an admin token"},
		{"Basic " + adminSecret, "not \"Bearer <token>\""},
		{"Bearer mft_" + strings.Repeat("0", 64), "not one this cluster knows"},
		{"Bearer " + readSecret, "needs role admin"},
	} {
		if code, msg := get(tc.auth); code != http.StatusUnauthorized || !strings.Contains(msg, tc.want) {
			t.Errorf("GET /api/graphs with %q: %d %q; want 401 saying %q", tc.auth, code, msg, tc.want)
		}
	}
	testcluster.WaitFor(t, 10*time.Second, "the admin token read on the leader", func() bool {
		code, _ := get("Bearer " + adminSecret)
		return code == http.StatusOK
	})

	step(t, bctx, "the page asks for a token", 20*time.Second, chromedp.Navigate("http://"+lh.HTTPAddr()+"/"),
		chromedp.WaitVisible(css(`#token-form`)))
	step(t, bctx, "the page loads with the admin token", 20*time.Second,
		chromedp.SendKeys(css(`#token-input`), adminSecret), chromedp.Click(css(`#token-form button`)),
		chromedp.WaitVisible(css(`body[data-loaded="true"]`)), chromedp.WaitNotVisible(css(`#token-form`)))
}
