package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/megaflow/megaflow/gpu"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/obs"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// promtool returns the path of Prometheus' promtool (Debian's prometheus
// package). Without it the test is skipped, unless $CI is set: .ci/run
// installs it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not installed, and CI is set: .ci/run installs Debian's prometheus package")
		}
		t.Skip("promtool is not installed (apt-get install prometheus); skipping")
	}
	return p
}

// promtool accepts the shipped scrape configuration and alert rules.
func TestPromtoolAcceptsTheConfiguration(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "config", filepath.Join("prometheus", "prometheus.yml")},
		{"check", "rules", filepath.Join("prometheus", "alerts.yml")},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// exported lists every megaflow_ metric a head, a worker and the GPU
// collector may export, with the _bucket, _sum and _count series of
// histograms (all names, whatever their type: a rule naming a gauge's
// _count is caught by promtool's test of the expression, not here).
func exported(t *testing.T) map[string]bool {
	t.Helper()
	hc := head.DefaultConfig()
	hc.NodeID, hc.DataDir = "h1", t.TempDir()
	hc.RaftAddr, hc.GRPCAddr, hc.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	h, err := head.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Kill()
	wc := worker.DefaultConfig()
	wc.NodeID, wc.DataDir, wc.GossipAddr = "w1", t.TempDir(), "127.0.0.1:0"
	wc.Heads = []string{"127.0.0.1:1"}
	wc.Runtime = fake.New(nil)
	wc.Capacity = worker.Capacity{CPUMillis: 1000, MemoryBytes: 1 << 30}
	w, err := worker.New(wc)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Kill()
	names := append(h.Registry().Names(), w.Registry().Names()...)
	names = append(names, obs.MetricNames(gpu.NewCollector(nil, nil))...)
	set := map[string]bool{}
	for _, n := range names {
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			set[n+suffix] = true
		}
	}
	return set
}

var metricName = regexp.MustCompile(`\bmegaflow_[a-z0-9_]+`)

// Every metric the alert rules and the Grafana dashboard use is one the
// daemons export: a renamed metric cannot silently blank a panel or mute an
// alert.
func TestRulesAndDashboardUseExportedMetrics(t *testing.T) {
	have := exported(t)
	var exprs []string

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	b, err := os.ReadFile(filepath.Join("prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	b, err = os.ReadFile(filepath.Join("grafana", "megaflow.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("megaflow.json: %v", err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	if len(exprs) < 20 {
		t.Fatalf("found only %d expressions in the rules and the dashboard", len(exprs))
	}
	var unknown []string
	for _, e := range exprs {
		for _, n := range metricName.FindAllString(e, -1) {
			if !have[n] && !slices.Contains(unknown, n) {
				unknown = append(unknown, n)
			}
		}
	}
	if len(unknown) > 0 {
		t.Fatalf("the rules or the dashboard use metrics no daemon exports: %v", unknown)
	}
	for _, want := range []string{"megaflow_queue_depth", "megaflow_attempt_stage_duration_seconds", "megaflow_raft_has_leader",
		"megaflow_workers", "megaflow_gpu_utilization_ratio", "megaflow_artifact_upload_backlog"} {
		if !have[want] {
			t.Errorf("%s is not exported", want)
		}
	}
}
