package docker

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
)

// TestImagesListsTheTestImage checks against the real engine that Images
// holds the test image's tag, sorted and without duplicates or dangling
// entries.
func TestImagesListsTheTestImage(t *testing.T) {
	e := newEnv(t)
	ims, err := e.rt.Images(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ims, e.image) {
		t.Fatalf("Images() = %v, want it to hold the test image %q", ims, e.image)
	}
	if !slices.IsSorted(ims) || len(slices.Compact(slices.Clone(ims))) != len(ims) {
		t.Fatalf("Images() = %v, want sorted without duplicates", ims)
	}
	for _, im := range ims {
		if im == "" || im == "<none>:<none>" {
			t.Fatalf("Images() holds %q", im)
		}
	}
}

// TestImagesNoEngine checks that a missing socket is ErrUnavailable.
func TestImagesNoEngine(t *testing.T) {
	rt, err := New(Config{Host: "unix://" + t.TempDir() + "/none.sock", CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if _, err := rt.Images(context.Background()); !errors.Is(err, contract.ErrUnavailable) {
		t.Fatalf("Images() with no engine: err = %v, want ErrUnavailable", err)
	}
}
