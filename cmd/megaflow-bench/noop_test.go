package main

import (
	"context"
	"errors"
	"testing"

	"github.com/megaflow/megaflow/runtime/contract"
)

// TestNoopRuntime: a container exits 0 at once, a second one of the same
// name conflicts until the first is removed, and removed containers are
// forgotten (nothing accumulates).
func TestNoopRuntime(t *testing.T) {
	ctx := context.Background()
	r := newNoopRuntime()
	id, err := r.Start(ctx, contract.Spec{Name: "a", Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := r.Wait(ctx, id); err != nil || ex.Code != 0 || ex.FinishedAt.IsZero() {
		t.Fatalf("Wait = %+v, %v; want code 0 and an end time", ex, err)
	}
	if _, err := r.Start(ctx, contract.Spec{Name: "a"}); !errors.Is(err, contract.ErrConflict) {
		t.Fatalf("second Start of a = %v, want ErrConflict", err)
	}
	for _, c := range []struct {
		match map[string]string
		want  int
	}{{nil, 1}, {map[string]string{"k": "v"}, 1}, {map[string]string{"k": "w"}, 0}} {
		if cs, _ := r.List(ctx, c.match); len(cs) != c.want {
			t.Errorf("List(%v) = %d containers, want %d", c.match, len(cs), c.want)
		}
	}
	if err := r.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(ctx, id); !errors.Is(err, contract.ErrNotFound) {
		t.Errorf("Wait after Remove = %v, want ErrNotFound", err)
	}
	if _, err := r.Start(ctx, contract.Spec{Name: "a"}); err != nil {
		t.Errorf("Start of a after Remove = %v", err)
	}
	if len(r.ctrs) != 1 {
		t.Errorf("%d containers kept, want 1", len(r.ctrs))
	}
}
