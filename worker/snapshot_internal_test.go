package worker

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/runtime/contract"
)

// staleSnapshotImages removes only what is certainly no one's: an image
// tagged as its snapshot label says, that snapshot in no row, older than
// the grace. A row keeps its image at any age; a young image (its row may
// be on its way) is kept; an image whose label is no snapshot id or that
// lacks its tag (a copy someone made) is left alone. held names every
// snapshot whose image is there.
func TestStaleSnapshotImages(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	grace := 10 * time.Minute
	img := func(id string, age time.Duration, tags ...string) contract.Image {
		return contract.Image{ID: "sha256:" + id, Tags: tags, Labels: map[string]string{LabelSnapshot: id}, Created: now.Add(-age)}
	}
	images := []contract.Image{
		img("snap-orphan", time.Hour, "megaflow-snapshot:snap-orphan"),
		img("snap-young", 5*time.Minute, "megaflow-snapshot:snap-young"),
		img("snap-edge", grace, "megaflow-snapshot:snap-edge"),
		img("snap-kept", 100*time.Hour, "megaflow-snapshot:snap-kept"),
		img("snap-copy", time.Hour, "acme/copy:1"),
		img("snap-two", time.Hour, "acme/copy:2", "megaflow-snapshot:snap-two"),
		img("Not-An-Id", time.Hour, "megaflow-snapshot:Not-An-Id"),
		{ID: "sha256:nolabel", Tags: []string{"megaflow-snapshot:snap-x"}, Created: now.Add(-time.Hour)},
	}
	stale, held := staleSnapshotImages(images, map[string]bool{"snap-kept": true, "snap-gone": true}, now, grace)
	var got []string
	for _, s := range stale {
		got = append(got, fmt.Sprintf("%s %s %v", s.id, s.ref, s.age))
	}
	if want := []string{"snap-orphan megaflow-snapshot:snap-orphan 1h0m0s", "snap-two megaflow-snapshot:snap-two 1h0m0s"}; !slices.Equal(got, want) {
		t.Fatalf("stale:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	var h []string
	for id := range held {
		h = append(h, id)
	}
	slices.Sort(h)
	if want := "snap-edge snap-kept snap-orphan snap-two snap-young"; strings.Join(h, " ") != want {
		t.Fatalf("held %v; want %s", h, want)
	}
}
