package client_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// FuzzParseGraphYAML: the graph file parser the CLI uses (YAML, and so
// JSON) never panics; it returns an InvalidArgument error or a graph that
// Validate accepts, also after an encoding round trip (what the head
// receives). Seeds: every example graph file, and a few edge cases.
func FuzzParseGraphYAML(f *testing.F) {
	files, _ := filepath.Glob("../examples/*.yaml")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		`{"id": "g", "tasks": [{"name": "a", "image": "i", "command": ["true"]}]}`,
		"tasks:\n  - &t {name: a, image: i, command: [x]}\n  - {<<: *t, name: b, depends_on: [a]}\n",
		"tasks:\n  - {name: a, image: i, command: [x], resources: {memory_bytes: 64Mi, cpu_millis: 1.5}}\n",
		"a: &a [*a]\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := client.ParseGraphYAML("f.yaml", data)
		if err != nil {
			if !errors.Is(err, errs.ErrInvalidArgument) || g != nil {
				t.Fatalf("error %v (graph %v): want InvalidArgument and no graph", err, g)
			}
			return
		}
		b, err := proto.Marshal(g)
		if err != nil {
			t.Fatalf("a parsed graph does not encode: %v", err)
		}
		again := &wire.GraphSpec{}
		if err := proto.Unmarshal(b, again); err != nil {
			t.Fatal(err)
		}
		if err := spec.Validate(spec.Normalize(again), spec.DefaultLimits()); err != nil {
			t.Fatalf("parsed, then invalid after a round trip: %v", err)
		}
	})
}
