package agent_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/examples/demo"
	"github.com/megaflow/megaflow/examples/demo/agent"
)

func TestConversationKeepsTaskAndLatest(t *testing.T) {
	c := agent.NewConversation("getmoto__moto-4950")
	if m := c.Messages(); len(m) != 2 || !strings.Contains(m[1].Content, "getmoto__moto-4950") {
		t.Fatalf("start: %v", m)
	}
	long := []byte(strings.Repeat("x", agent.MaxObservation+50))
	for i := range 5 {
		c.Observe("cmd"+string(rune('a'+i)), i, long)
	}
	m := c.Messages()
	if len(m) != agent.MaxMessages || m[0].Role != "system" || m[1].Role != "user" {
		t.Fatalf("after 5 tool calls: %d messages %v; want %d, the task first", len(m), m, agent.MaxMessages)
	}
	// The latest three calls (c, d, e) in order, outputs cut.
	for i, want := range []string{"execute_bash: cmdc", "exit 2: ", "execute_bash: cmdd", "exit 3: ", "execute_bash: cmde", "exit 4: "} {
		if got := m[2+i].Content; !strings.HasPrefix(got, want) || len(got) > len(want)+agent.MaxObservation {
			t.Errorf("message %d: %q; want %q then at most %d bytes", 2+i, got, want, agent.MaxObservation)
		}
	}
}

func TestEvaluate(t *testing.T) {
	for _, tc := range []struct {
		name, traj string
		want       agent.Evaluation
		err        string
	}{
		{"finished", `{"step":1,"tool":"ls"}` + "\n" + `{"step":2,"tool":"ls"}` + "\n" + `{"step":2,"end":"finished"}` + "\n",
			agent.Evaluation{Steps: 2, End: "finished", Reward: 1}, ""},
		{"step limit", `{"step":1,"tool":"ls"}` + "\n" + `{"step":1,"end":"step-limit"}` + "\n",
			agent.Evaluation{Steps: 1, End: "step-limit"}, ""},
		{"no steps", `{"step":0,"end":"finished"}`, agent.Evaluation{End: "finished"}, ""},
		{"no end line", `{"step":1,"tool":"ls"}`, agent.Evaluation{Steps: 1}, ""},
		{"empty", "", agent.Evaluation{}, ""},
		{"garbage", `{"step":1}` + "\nnot json\n", agent.Evaluation{}, "trajectory line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := agent.Evaluate(strings.NewReader(tc.traj))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v; want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// Next against the demo's mock model answers one of its tool commands, the
// same for the same conversation; a server that answers an error is not
// asked again.
func TestModelNext(t *testing.T) {
	srv := httptest.NewServer(demo.ModelHandler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := &agent.Model{URL: srv.URL}
	c := agent.NewConversation("getmoto__moto-4950")
	first, err := m.Next(ctx, c.Messages())
	if err != nil || first == "" {
		t.Fatalf("next: %q, %v", first, err)
	}
	again, err := m.Next(ctx, c.Messages())
	if err != nil || again != first {
		t.Fatalf("the same conversation answered %q then %q (%v)", first, again, err)
	}

	calls := 0
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls++
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer bad.Close()
	if _, err := (&agent.Model{URL: bad.URL}).Next(ctx, c.Messages()); err == nil || !strings.Contains(err.Error(), "503") || calls != 1 {
		t.Fatalf("HTTP 503: %v after %d calls; want the status, asked once", err, calls)
	}
}
