package state

import "testing"

func TestMetricValue(t *testing.T) {
	tests := []struct {
		result, field string
		want          float64
		ok            bool
	}{
		{`{"reward": 0.5}`, "reward", 0.5, true},
		{`{"reward": -2, "x": 1}`, "reward", -2, true},
		{`{"reward": 1e3}`, "reward", 1000, true},
		{`{"score": 3}`, "score", 3, true},
		{`{"reward": "0.5"}`, "reward", 0, false},
		{`{"reward": null}`, "reward", 0, false},
		{`{"reward": true}`, "reward", 0, false},
		{`{"nested": {"reward": 1}}`, "reward", 0, false},
		{`[1, 2]`, "reward", 0, false},
		{`not json`, "reward", 0, false},
		{``, "reward", 0, false},
	}
	for _, tt := range tests {
		got, ok := MetricValue([]byte(tt.result), tt.field)
		if got != tt.want || ok != tt.ok {
			t.Errorf("MetricValue(%s, %s) = %v %v, want %v %v", tt.result, tt.field, got, ok, tt.want, tt.ok)
		}
	}
}

func TestBucketOf(t *testing.T) {
	tests := []struct {
		v    float64
		want int
	}{{-0.1, 0}, {0, 1}, {0.05, 1}, {0.1, 2}, {0.5, 6}, {0.99, 10}, {0.999999, 10}, {1, 11}, {7, 11}}
	for _, tt := range tests {
		if got := BucketOf(tt.v); got != tt.want {
			t.Errorf("BucketOf(%v) = %d, want %d", tt.v, got, tt.want)
		}
	}
}
