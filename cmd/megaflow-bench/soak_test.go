package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestGraphInterval(t *testing.T) {
	for _, c := range []struct {
		rate float64
		size int
		want time.Duration
	}{
		{1_000_000.0 / 3600, 100, 360 * time.Millisecond},
		{100, 100, time.Second},
		{1000, 1, time.Millisecond},
		{1, 10, 10 * time.Second},
	} {
		if got := graphInterval(c.rate, c.size); got != c.want {
			t.Errorf("graphInterval(%v, %d) = %v, want %v", c.rate, c.size, got, c.want)
		}
	}
}

func TestGraphsDue(t *testing.T) {
	for _, c := range []struct {
		elapsed, interval time.Duration
		want              int
	}{
		{-time.Millisecond, time.Second, 0},
		{0, time.Second, 1},
		{999 * time.Millisecond, time.Second, 1},
		{time.Second, time.Second, 2},
		// A pacer that woke late catches up at once: no drift.
		{10*time.Second + 5*time.Millisecond, 360 * time.Millisecond, 28},
		// An hour at the default rate: 10,000 graphs of 100 tasks (the last one due at 3599.64 s).
		{time.Hour - time.Nanosecond, 360 * time.Millisecond, 10_000},
	} {
		if got := graphsDue(c.elapsed, c.interval); got != c.want {
			t.Errorf("graphsDue(%v, %v) = %d, want %d", c.elapsed, c.interval, got, c.want)
		}
	}
}

func TestQuarters(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		name               string
		ts, vs             []float64
		from, to           float64
		first, last, ratio float64
		nFirst, nLast      int
	}{
		{name: "flat", ts: []float64{0, 10, 20, 30, 40}, vs: []float64{100, 100, 100, 100, 100}, to: 40,
			first: 100, last: 100, ratio: 1, nFirst: 1, nLast: 2},
		{name: "growing", ts: []float64{0, 1, 2, 3, 4, 5, 6, 7}, vs: []float64{10, 20, 30, 40, 50, 60, 70, 80}, to: 8,
			first: 15, last: 75, ratio: 5, nFirst: 2, nLast: 2},
		{name: "samples before from are left out", ts: []float64{0, 5, 10, 15, 20}, vs: []float64{1000, 100, 100, 110, 110}, from: 5, to: 20,
			first: 100, last: 110, ratio: 1.1, nFirst: 1, nLast: 1},
		{name: "an empty quarter gives NaN", ts: []float64{0, 100}, vs: []float64{1, 2}, to: 1000,
			first: 1.5, last: nan, ratio: nan, nFirst: 2, nLast: 0},
		{name: "no samples", to: 10, first: nan, last: nan, ratio: nan},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := quarters(c.ts, c.vs, c.from, c.to)
			eq := func(a, b float64) bool { return (math.IsNaN(a) && math.IsNaN(b)) || math.Abs(a-b) < 1e-9 }
			if !eq(q.first, c.first) || !eq(q.last, c.last) || !eq(q.ratio, c.ratio) || q.nFirst != c.nFirst || q.nLast != c.nLast {
				t.Errorf("quarters = %+v, want first %v (%d) last %v (%d) ratio %v", q, c.first, c.nFirst, c.last, c.nLast, c.ratio)
			}
		})
	}
}

func TestSoakOptionsValidate(t *testing.T) {
	good := soakOptions{duration: time.Hour, rate: 277.78, graphSize: 100, clients: 4, workers: 2, graphRetention: 10 * time.Minute,
		sample: 10 * time.Second, drain: 5 * time.Minute, inFlight: 256, restarts: 3}
	for _, c := range []struct {
		name string
		edit func(*soakOptions)
		want string // "" for valid
	}{
		{"defaults", func(*soakOptions) {}, ""},
		{"short duration", func(o *soakOptions) { o.duration = time.Second }, "--duration"},
		{"zero rate", func(o *soakOptions) { o.rate = 0 }, "--rate"},
		{"NaN rate", func(o *soakOptions) { o.rate = math.NaN() }, "--rate"},
		{"empty graphs", func(o *soakOptions) { o.graphSize = 0 }, "--graph-size"},
		{"no clients", func(o *soakOptions) { o.clients = 0 }, "--clients"},
		{"no workers", func(o *soakOptions) { o.workers = 0 }, "--workers"},
		{"no retention", func(o *soakOptions) { o.graphRetention = 0 }, "--graph-retention"},
		{"negative archive retention", func(o *soakOptions) { o.archiveRetention = -time.Second }, "--archive-retention"},
		{"fast sampling", func(o *soakOptions) { o.sample = time.Millisecond }, "--sample"},
		{"short drain", func(o *soakOptions) { o.drain = time.Second }, "--drain"},
		{"nothing in flight", func(o *soakOptions) { o.inFlight = 0 }, "--in-flight"},
		{"no restarts", func(o *soakOptions) { o.restarts = 0 }, ""},
		{"negative restarts", func(o *soakOptions) { o.restarts = -1 }, "--restarts"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := good
			c.edit(&o)
			err := o.validate()
			switch {
			case c.want == "" && err != nil:
				t.Errorf("validate() = %v, want nil", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("validate() = %v, want an error naming %s", err, c.want)
			}
		})
	}
}
