package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
)

func TestGraphBuilder(t *testing.T) {
	b := client.NewGraph("g").Tenant("team-a").Priority(3).Deadline(1500 * time.Millisecond)
	a := b.Task("a", "img", "sh", "-c", "true").CPU(500).Memory(1<<20).GPUs(1, "H100").Env("K", "V").Session("s").Retries(2).
		Timeout(90*time.Second+time.Millisecond).Type("train").Outputs("out.json").WorkDir("/w").Selector("zone", "a")
	b.Task("b", "img", "true").After(a).RunOnUpstreamFailure()
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	ta := g.Tasks[0]
	cases := []struct {
		what      string
		got, want any
	}{
		{"deadline rounded up", g.DeadlineSeconds, int64(2)},
		{"timeout rounded up", ta.TimeoutSeconds, int64(91)},
		{"session implies persistent", ta.Mode, client.ModePersistent},
		{"cpu", ta.Resources.CpuMillis, int64(500)},
		{"gpu model", ta.Resources.GpuModel, "H100"},
		{"env", ta.Env["K"], "V"},
		{"dependency", g.Tasks[1].DependsOn[0], "a"},
		{"upstream failure", g.Tasks[1].RunOnUpstreamFailure, true},
		{"tenant", g.Tenant, "team-a"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
	// Build returns a copy: later changes to the builder do not show.
	a.Env("K", "changed")
	if ta.Env["K"] != "V" {
		t.Errorf("the built graph changed with the builder")
	}
	p := client.NewGraph("p")
	p.Task("plain", "", "true").Runtime("process")
	if g, err := p.Build(); err != nil {
		t.Errorf("a process task without an image: %v; want it built", err)
	} else if g.Tasks[0].Runtime != "process" {
		t.Errorf("runtime %q, want process", g.Tasks[0].Runtime)
	}
	c := client.NewGraph("c")
	c.Task("boxed", "", "true")
	if _, err := c.Build(); !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), "runtime: process") {
		t.Errorf("a task without an image or runtime: %v, want InvalidArgument suggesting runtime: process", err)
	}
	b.Task("a", "img", "true") // a duplicate name
	if _, err := b.Build(); !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), `"a"`) {
		t.Errorf("duplicate task: %v, want InvalidArgument naming the task", err)
	}
}
