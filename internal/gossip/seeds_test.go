package gossip

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestSeedsFile(t *testing.T) {
	dir := t.TempDir()
	if got := LoadSeeds(dir, "a:1"); got != nil {
		t.Fatalf("no file: %v, want none", got)
	}
	if err := os.WriteFile(filepath.Join(dir, SeedsFile), []byte("b:2\n\n a:1 \nc:3\nb:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := LoadSeeds(dir, "a:1"); !slices.Equal(got, []string{"b:2", "c:3"}) {
		t.Fatalf("LoadSeeds = %v, want [b:2 c:3] (own, blanks and repeats left out)", got)
	}
	for _, c := range []struct{ join, saved, want []string }{
		{nil, nil, nil},
		{[]string{"x:1"}, nil, []string{"x:1"}},
		{nil, []string{"b:2"}, []string{"b:2"}},
		{[]string{"x:1", "b:2"}, []string{"b:2", "c:3"}, []string{"x:1", "b:2", "c:3"}},
	} {
		if got := JoinList(c.join, c.saved); !slices.Equal(got, c.want) {
			t.Errorf("JoinList(%v, %v) = %v, want %v", c.join, c.saved, got, c.want)
		}
	}
}
