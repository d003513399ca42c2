package head

import (
	"testing"
	"time"
)

func TestRetryBackoff(t *testing.T) {
	tests := []struct {
		name        string
		base, max   time.Duration
		retriesUsed uint32
		u           float64
		want        time.Duration
	}{
		{"first retry, no jitter", time.Second, time.Minute, 0, 0.5, time.Second},
		{"doubles", time.Second, time.Minute, 3, 0.5, 8 * time.Second},
		{"capped", time.Second, time.Minute, 10, 0.5, time.Minute},
		{"capped far out", time.Second, time.Minute, 1000, 0.5, time.Minute},
		{"jitter low end", time.Second, time.Minute, 0, 0, 800 * time.Millisecond},
		{"jitter high end", time.Second, time.Minute, 1, 0.75, 2200 * time.Millisecond},
		{"off", 0, 0, 5, 0.3, 0},
	}
	for _, tt := range tests {
		if got := retryBackoff(tt.base, tt.max, tt.retriesUsed, tt.u); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	for range 1000 {
		if u := uniform(); u < 0 || u >= 1 {
			t.Fatalf("uniform() = %v", u)
		}
	}
}
