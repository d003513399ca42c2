package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/client"
)

func TestJSONHasNumbers(t *testing.T) {
	task := &client.Task{Id: "g/a", CreateIndex: 5, CreateUnixNanos: 1_764_000_000_123_456_789, Result: []byte(`{"reward": 0.5}`),
		Attempts: []*client.Attempt{{Number: 1, StartUnixNanos: 42}}, Spec: &client.TaskSpec{TimeoutSeconds: 60, Env: map[string]string{"A": "1"}}}
	v, err := protoValue(task)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	for _, want := range []string{`"create_index":5`, `"create_unix_nanos":1764000000123456789`, `"result":{"reward":0.5}`,
		`"start_unix_nanos":42`, `"timeout_seconds":60`, `"env":{"A":"1"}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s\n does not contain %s", b, want)
		}
	}
	// A result that is not JSON stays base64, as protojson has it.
	task.Result = []byte("not json")
	v, _ = protoValue(task)
	b, _ = json.Marshal(v)
	if !strings.Contains(string(b), `"result":"bm90IGpzb24="`) {
		t.Errorf("non-JSON result: %s", b)
	}
}

// A summary's JSON gives null, not 0, for a rate or a mean nothing
// measured: 0 would read as every task failing or a reward of 0.
func TestSummaryJSONNullsWhatNothingMeasured(t *testing.T) {
	for _, c := range []struct {
		s                Summary
		rate, mean, time string
	}{
		{Summary{Counts: map[string]uint32{"cancelled": 2}}, `"success_rate":null`, `"reward_mean":null`, `"task_seconds_p50":null`},
		{Summary{Counts: map[string]uint32{"failed": 2}, TaskTimes: 2, TaskSecondsP50: 0}, `"success_rate":0`, `"reward_mean":null`, `"task_seconds_p50":0`},
		{Summary{Counts: map[string]uint32{"succeeded": 2}, SuccessRate: 1, RewardMean: 0, RewardCount: 2, TaskTimes: 2, TaskSecondsP50: 1.5},
			`"success_rate":1`, `"reward_mean":0`, `"task_seconds_p50":1.5`},
		{Summary{Counts: map[string]uint32{"timed_out": 1, "succeeded": 1}, SuccessRate: 0.5, RewardMean: 0.25, RewardCount: 1},
			`"success_rate":0.5`, `"reward_mean":0.25`, `"task_seconds_p50":null`},
	} {
		b, err := json.Marshal(c.s)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{c.rate, c.mean, c.time} {
			if !strings.Contains(string(b), want) || strings.Count(string(b), strings.Split(want, ":")[0]) != 1 {
				t.Errorf("%v: %s\n wants %s once", c.s.Counts, b, want)
			}
		}
		var back Summary // the other fields go through as before
		if err := json.Unmarshal(b, &back); err != nil || back.RewardCount != c.s.RewardCount || back.Counts["succeeded"] != c.s.Counts["succeeded"] {
			t.Errorf("%s read back as %+v: %v", b, back, err)
		}
	}
}

func TestCancelledSays(t *testing.T) {
	for _, c := range []struct {
		id   string
		n    int
		want string
	}{
		{"g", 0, "every task of g had already ended: nothing cancelled"},
		{"g", 1, "cancelled 1 task of g"},
		{"g", 3, "cancelled 3 tasks of g"},
		{"g/a", 0, "g/a had already ended: nothing cancelled"},
		{"g/a", 1, "cancelled g/a"},
		{"g/a", 2, "cancelled g/a and 1 other task (dependents that could then never run, or the rest of its gang)"},
		{"g/a", 4, "cancelled g/a and 3 other tasks (dependents that could then never run, or the rest of its gang)"},
	} {
		if got := cancelled(c.id, c.n); got != c.want {
			t.Errorf("cancelled(%q, %d) = %q, want %q", c.id, c.n, got, c.want)
		}
	}
}
