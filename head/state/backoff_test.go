package state

import (
	"math"
	"testing"
	"time"
)

func TestRetryBackoffWait(t *testing.T) {
	const s = int64(time.Second)
	tests := []struct {
		name string
		b    RetryBackoff
		n    uint32
		want int64
	}{
		{"fixed (rules 0)", RetryBackoff{Fixed: 5000}, 3, 5000},
		{"fixed negative", RetryBackoff{Fixed: -1}, 0, 0},
		{"off", RetryBackoff{Max: s, Draw: 3}, 2, 0},
		{"first retry, lowest draw", RetryBackoff{Base: s, Max: 60 * s}, 0, s * 4 / 5},
		{"first retry, highest draw", RetryBackoff{Base: s, Max: 60 * s, Draw: uint64(2*s/5) - 1}, 0, s*6/5 - 1},
		{"draw wraps", RetryBackoff{Base: s, Max: 60 * s, Draw: uint64(2 * s / 5)}, 0, s * 4 / 5},
		{"doubles", RetryBackoff{Base: s, Max: 60 * s, Draw: uint64(8 * s / 5)}, 3, 8 * s},
		{"capped", RetryBackoff{Base: s, Max: 60 * s, Draw: uint64(12 * s)}, 10, 60 * s},
		{"capped far out", RetryBackoff{Base: s, Max: 60 * s, Draw: uint64(12 * s)}, 1000, 60 * s},
		{"max 0 is base", RetryBackoff{Base: s, Draw: uint64(s / 5)}, 4, s},
		{"base over max", RetryBackoff{Base: 2 * s, Max: s, Draw: uint64(s / 5)}, 0, s},
		{"too small to jitter", RetryBackoff{Base: 4, Max: 100, Draw: 99}, 0, 4},
		{"a huge cap never overflows", RetryBackoff{Base: 3, Max: math.MaxInt64}, 62, math.MaxInt64 - math.MaxInt64/5},
	}
	for _, tt := range tests {
		if got := tt.b.Wait(tt.n); got != tt.want {
			t.Errorf("%s: Wait(%d) = %d, want %d", tt.name, tt.n, got, tt.want)
		}
	}
}
