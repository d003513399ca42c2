package daemonconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// flags is a daemon's flag set in small: one flag of each kind the daemons
// use.
type flags struct {
	fs     *pflag.FlagSet
	nodeID string
	join   string
	labels string
	lease  time.Duration
	cpu    int64
	nvml   bool
	rate   float64
}

func newFlags(t *testing.T, args ...string) *flags {
	t.Helper()
	f := &flags{fs: pflag.NewFlagSet("daemon", pflag.ContinueOnError)}
	f.fs.StringVar(&f.nodeID, "node-id", "", "")
	f.fs.StringVar(&f.join, "join", "", "")
	f.fs.StringVar(&f.labels, "labels", "", "")
	f.fs.DurationVar(&f.lease, "worker-lease", 10*time.Second, "")
	f.fs.Int64Var(&f.cpu, "cpu-millis", 0, "")
	f.fs.BoolVar(&f.nvml, "nvml", true, "")
	f.fs.Float64Var(&f.rate, "rate-limit", 0, "")
	f.fs.String("config", "", "")
	if err := f.fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

func write(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestApply(t *testing.T) {
	f := newFlags(t, "--cpu-millis=500")
	err := Apply(f.fs, write(t, `
node-id: h1
join: [10.0.0.2:7946, 10.0.0.3:7946]
labels: {zone: a, disk: ssd}
worker-lease: 15s
cpu-millis: 2000      # the command line's 500 wins
nvml: false
rate-limit: 2.5
`))
	if err != nil {
		t.Fatal(err)
	}
	if f.nodeID != "h1" || f.join != "10.0.0.2:7946,10.0.0.3:7946" || f.labels != "disk=ssd,zone=a" ||
		f.lease != 15*time.Second || f.cpu != 500 || f.nvml || f.rate != 2.5 {
		t.Fatalf("after Apply: %+v", *f)
	}
	if !f.fs.Lookup("node-id").Changed {
		t.Error("a flag set from the file is not marked Changed (cobra's required-flag check reads it)")
	}
}

// Every refusal names the file, the line and the key, and changes no
// flag, not even those before the bad one.
func TestApplyRefuses(t *testing.T) {
	tests := []struct{ name, text, want string }{
		{"unknown key", "node-id: h1\nnode_id: h1\n", `line 2: key "node_id": not a setting`},
		{"reserved key", "config: other.yaml\n", `key "config": not a setting`},
		{"twice", "node-id: h1\nnode-id: h2\n", `line 2: key "node-id": given twice (first on line 1)`},
		{"bad duration", "node-id: h1\nworker-lease: ten\n", `line 2: key "worker-lease": invalid argument "ten"`},
		{"bad int", "cpu-millis: 1.5\n", `key "cpu-millis": invalid argument "1.5"`},
		{"bad bool", "nvml: maybe\n", `key "nvml"`},
		{"nested list", "join: [[a]]\n", `key "join": line 1: a list may hold plain values only`},
		{"not a mapping", "- a\n- b\n", "line 1: want a mapping of flag names to values"},
		{"not yaml", "node-id: [\n", "config file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFlags(t)
			path := write(t, tt.text)
			err := Apply(f.fs, path)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Apply: %v; want an error naming %s and containing %q", err, path, tt.want)
			}
			if f.nodeID != "" || f.lease != 10*time.Second || f.fs.Lookup("node-id").Changed {
				t.Fatalf("a refused file changed the flags: %+v", *f)
			}
		})
	}
	if err := Apply(newFlags(t).fs, filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("a missing file: %v", err)
	}
	big := write(t, strings.Repeat("#", MaxFileBytes+1))
	if err := Apply(newFlags(t).fs, big); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("a file over the bound: %v", err)
	}
}

func TestApplyEmptyFile(t *testing.T) {
	f := newFlags(t)
	for _, text := range []string{"", "# nothing\n"} {
		if err := Apply(f.fs, write(t, text)); err != nil {
			t.Fatalf("%q: %v", text, err)
		}
	}
}
