package docker

import (
	"context"
	"errors"
	"testing"

	"github.com/megaflow/megaflow/runtime/contract"
)

// Rename gives a running container a new name (List shows it, labels
// unchanged); a name another container has is ErrConflict and changes
// nothing; an unknown container is ErrNotFound.
func TestRename(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.spec("a", "sleep", "300")
	b := e.spec("b", "sleep", "300")
	ida, idb := e.start(a), e.start(b)
	to := a.Name + "-renamed"
	if err := e.rt.Rename(ctx, ida, to); err != nil {
		t.Fatalf("Rename: %v", err)
	}
	if err := e.rt.Rename(ctx, idb, to); !errors.Is(err, contract.ErrConflict) {
		t.Fatalf("Rename to a name in use: %v, want ErrConflict", err)
	}
	if err := e.rt.Rename(ctx, "no-such-container-mf", to+"x"); !errors.Is(err, contract.ErrNotFound) {
		t.Fatalf("Rename of an unknown container: %v, want ErrNotFound", err)
	}
	got, err := e.rt.List(ctx, map[string]string{"megaflow.test.name": t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, c := range got {
		names[c.ID] = c.Name
		if c.Labels["megaflow.test.name"] != t.Name() || !c.Running {
			t.Errorf("container %s after the renames: labels %v running %v", c.ID, c.Labels, c.Running)
		}
	}
	if names[ida] != to || names[idb] != b.Name {
		t.Fatalf("names after the renames: %v; want %s renamed to %s and %s unchanged", names, ida, to, b.Name)
	}
}
