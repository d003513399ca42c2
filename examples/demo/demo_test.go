package demo_test

import (
	"strings"
	"testing"

	"github.com/megaflow/megaflow/examples/demo"
)

func TestDataAndStep(t *testing.T) {
	d, err := demo.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Instances) != 2119 || len(d.Rollouts) != 50 || len(d.Repos()) != 11 {
		t.Fatalf("data: %d instances, %d rollouts, %d repos; want 2119, 50, 11", len(d.Instances), len(d.Rollouts), len(d.Repos()))
	}
	retried := 0
	for _, r := range d.Rollouts {
		if r.Attempts > 1 {
			retried++
		}
	}
	if retried != 12 {
		t.Errorf("%d of 50 rollouts needed another attempt; the data says 12", retried)
	}
	// Round-robin across repositories: the first 11 picks are 11 repos.
	seen := map[string]bool{}
	for _, in := range d.Pick(11) {
		seen[in.Repo] = true
	}
	if len(seen) != 11 || len(d.Pick(5000)) != 2119 {
		t.Errorf("pick: %d repos in the first 11, %d in all", len(seen), len(d.Pick(5000)))
	}

	o := demo.DefaultOptions()
	o.Instances = 20
	o.ModelURL = "http://127.0.0.1:1"
	s1, err := d.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := d.Build(o)
	if len(s1.Graph.Tasks) != 60 || len(s1.Images) != 11 {
		t.Fatalf("step: %d tasks on %d images, want 60 on 11", len(s1.Graph.Tasks), len(s1.Images))
	}
	for i, tk := range s1.Graph.Tasks {
		if strings.Join(tk.Command, " ") != strings.Join(s2.Graph.Tasks[i].Command, " ") {
			t.Fatalf("the same seed built different graphs: %v vs %v", tk.Command, s2.Graph.Tasks[i].Command)
		}
		if tk.Session == "" || tk.Network != "host" {
			t.Errorf("task %s: session %q network %q; want a session and the host network", tk.Name, tk.Session, tk.Network)
		}
	}
	// Without a model URL the graph runs the model as a service task.
	o.ModelURL = ""
	s3, err := d.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if s3.Graph.Tasks[0].Name != demo.Model || s3.Graph.Tasks[0].Service.GetName() != demo.Model || s3.Graph.Tasks[2].UsesServices[0] != demo.Model {
		t.Errorf("service task: %v; rollout uses %v", s3.Graph.Tasks[0], s3.Graph.Tasks[2].UsesServices)
	}
	for _, bad := range []func(*demo.Options){
		func(o *demo.Options) { o.Instances = 0 },
		func(o *demo.Options) { o.Instances = 3000 },
		func(o *demo.Options) { o.Speedup = 0.5 },
		func(o *demo.Options) { o.Runtime = "vm" },
	} {
		b := demo.DefaultOptions()
		bad(&b)
		if _, err := d.Build(b); err == nil {
			t.Errorf("options %+v: no error", b)
		}
	}
}
