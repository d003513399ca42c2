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
