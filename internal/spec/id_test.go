package spec

import (
	"bytes"
	"crypto/rand"
	"strings"
	"testing"
	"time"
)

func TestNewGraphIDKnownValue(t *testing.T) {
	// The ULID specification's example time, 1469918176385 ms, encodes as
	// 01ARYZ6S41.
	now := time.UnixMilli(1469918176385)
	got := NewGraphID(now, bytes.NewReader(bytes.Repeat([]byte{0xff}, 10)))
	if want := "g-01aryz6s41zzzzzzzzzzzzzzzz"; got != want {
		t.Errorf("NewGraphID = %q, want %q", got, want)
	}
	got = NewGraphID(time.Unix(0, 0), bytes.NewReader(make([]byte, 10)))
	if want := "g-" + strings.Repeat("0", 26); got != want {
		t.Errorf("NewGraphID at the epoch = %q, want %q", got, want)
	}
	if got := NewGraphID(time.Unix(-5, 0), bytes.NewReader(make([]byte, 10))); got != "g-"+strings.Repeat("0", 26) {
		t.Errorf("NewGraphID before the epoch = %q, want the epoch's", got)
	}
	far := NewGraphID(time.Date(20000, 1, 1, 0, 0, 0, 0, time.UTC), bytes.NewReader(make([]byte, 10)))
	if want := "g-7zzzzzzzzz0000000000000000"; far != want {
		t.Errorf("NewGraphID after the year 10889 = %q, want %q", far, want)
	}
}

func TestNewGraphIDDeterministic(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)
	seed := []byte("0123456789")
	a := NewGraphID(now, bytes.NewReader(seed))
	b := NewGraphID(now, bytes.NewReader(seed))
	if a != b {
		t.Errorf("same inputs gave %q and %q", a, b)
	}
	if c := NewGraphID(now, bytes.NewReader([]byte("0123456788"))); c == a {
		t.Errorf("different entropy gave the same id %q", c)
	}
}

func TestNewGraphIDSortableAndValid(t *testing.T) {
	start := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	prev := ""
	for i := range 2000 {
		id := NewGraphID(start.Add(time.Duration(i)*time.Millisecond), rand.Reader)
		if len(id) != 28 || !strings.HasPrefix(id, GraphIDPrefix) {
			t.Fatalf("id %q: want %q and 26 characters", id, GraphIDPrefix)
		}
		if id <= prev {
			t.Fatalf("id %q made later does not sort after %q", id, prev)
		}
		prev = id
		if p := identProblem(id, DefaultLimits().MaxNameLen); p != "" {
			t.Fatalf("id %q is not a valid graph id: %s", id, p)
		}
	}
	g := base()
	g.Id = NewGraphID(start, nil)
	if err := Validate(g, DefaultLimits()); err != nil {
		t.Errorf("a graph with a new id: %v", err)
	}
}

func TestNewGraphIDPanicsWithoutEntropy(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "reading entropy") {
			t.Errorf("recovered %v, want a panic about entropy", r)
		}
	}()
	NewGraphID(time.Now(), bytes.NewReader([]byte{1, 2, 3}))
}
