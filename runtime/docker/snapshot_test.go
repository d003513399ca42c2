package docker

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
	"github.com/megaflow/megaflow/runtime/testimage"
)

// Commit makes an image holding the container's files and the labels
// asked for; SnapshotImages lists it by its labels (any value, or its own)
// with its tag and time, and not by another value or a label it lacks; a
// container started from it sees the files. RemoveImage
// refuses an image a running container uses (ErrConflict), removes it
// once that container is gone, and reports a second removal as nothing
// there; a missing container is ErrNotFound.
func TestCommitAndRemoveImage(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id := e.start(e.spec("src", "sleep", "600"))
	if err := e.rt.WriteFile(ctx, id, "/work/state", []byte("prepared"), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := "megaflow-snapshot:snap-rt" + strings.ToLower(testimage.RunID())
	imageID, size, err := e.rt.Commit(ctx, id, ref, map[string]string{"megaflow.snapshot": "snap-rt"})
	if err != nil || imageID == "" || size <= 0 {
		t.Fatalf("Commit: %q %d, %v; want an image id and a size", imageID, size, err)
	}
	t.Cleanup(func() { _, _ = e.rt.RemoveImage(context.Background(), ref) })
	ins, err := e.rt.cli.ImageInspect(ctx, ref)
	if err != nil || ins.Config == nil || ins.Config.Labels["megaflow.snapshot"] != "snap-rt" {
		t.Fatalf("the committed image: %v, %v; want label megaflow.snapshot=snap-rt", ins.Config, err)
	}
	run := strings.ToLower(testimage.RunID())
	for _, c := range []struct {
		match map[string]string
		found bool
	}{
		{map[string]string{"megaflow.snapshot": ""}, true},
		{map[string]string{"megaflow.snapshot": "snap-rt"}, true},
		{map[string]string{"megaflow.snapshot": "snap-other"}, false},
		{map[string]string{"megaflow.snapshot": "", "megaflow.run-" + run: ""}, false},
	} {
		images, err := e.rt.SnapshotImages(ctx, c.match)
		if err != nil {
			t.Fatalf("SnapshotImages(%v): %v", c.match, err)
		}
		found := false
		for _, im := range images {
			if im.ID == imageID {
				found = true
				if !slices.Contains(im.Tags, ref) || im.Labels["megaflow.snapshot"] != "snap-rt" || time.Since(im.Created) > time.Hour || time.Since(im.Created) < -time.Minute {
					t.Fatalf("SnapshotImages(%v): %+v; want tag %s, its label and its creation just now", c.match, im, ref)
				}
			}
		}
		if found != c.found {
			t.Fatalf("SnapshotImages(%v) lists the image: %v; want %v", c.match, found, c.found)
		}
	}
	sp := e.spec("fork", "sleep", "600")
	sp.Image = ref
	fork := e.start(sp)
	got, _, err := e.rt.ReadFile(ctx, fork, "/work/state", 1<<20)
	if err != nil || string(got) != "prepared" {
		t.Fatalf("the fork's file: %q, %v; want \"prepared\"", got, err)
	}
	if _, err := e.rt.RemoveImage(ctx, ref); !errors.Is(err, contract.ErrConflict) {
		t.Fatalf("RemoveImage while a container runs it: %v; want ErrConflict", err)
	}
	if err := e.rt.Remove(ctx, fork); err != nil {
		t.Fatal(err)
	}
	if existed, err := e.rt.RemoveImage(ctx, ref); err != nil || !existed {
		t.Fatalf("RemoveImage: %v, %v; want removed", existed, err)
	}
	if existed, err := e.rt.RemoveImage(ctx, ref); err != nil || existed {
		t.Fatalf("second RemoveImage: %v, %v; want nothing there, no error", existed, err)
	}
	if _, _, err := e.rt.Commit(ctx, "no-such-container-mf", ref, nil); !errors.Is(err, contract.ErrNotFound) {
		t.Fatalf("Commit of a missing container: %v; want ErrNotFound", err)
	}
}
