package state

import (
	"fmt"
	"testing"

	"github.com/megaflow/megaflow/internal/wire"
)

func TestCanTransition(t *testing.T) {
	// Every allowed move; every other pair must be refused.
	allowed := map[[2]wire.TaskState]bool{
		{unspecified, pending}: true, // a new task waiting on dependencies
		{unspecified, queued}:  true, // a new task without dependencies
		{pending, queued}:      true, // dependencies done
		{pending, cancelled}:   true, // a cancel, or an upstream failure
		{queued, assigned}:     true, // placed
		{queued, cancelled}:    true,
		{queued, failed}:       true, // unplaceable for longer than the leader's MaxQueueWait
		{assigned, running}:    true, // started
		{assigned, queued}:     true, // lost or failed before start, retries left
		{assigned, failed}:     true, // failed before start, no retries left
		{assigned, cancelled}:  true,
		{running, succeeded}:   true,
		{running, failed}:      true,
		{running, timedOut}:    true,
		{running, cancelled}:   true,
		{running, queued}:      true, // lost or failed, retries left
	}
	for from := wire.TaskState(-1); from <= timedOut+1; from++ {
		for to := wire.TaskState(-1); to <= timedOut+1; to++ {
			t.Run(fmt.Sprintf("%s->%s", from, to), func(t *testing.T) {
				if got, want := CanTransition(from, to), allowed[[2]wire.TaskState{from, to}]; got != want {
					t.Errorf("CanTransition(%s, %s) = %v, want %v", from, to, got, want)
				}
			})
		}
	}
	for _, s := range []wire.TaskState{succeeded, failed, cancelled, timedOut} {
		if !IsTerminal(s) {
			t.Errorf("%s not terminal", s)
		}
	}
	for _, s := range []wire.TaskState{unspecified, pending, queued, assigned, running} {
		if IsTerminal(s) {
			t.Errorf("%s terminal", s)
		}
	}
}

func TestDeriveGraphState(t *testing.T) {
	c := func(kv ...any) StateCounts {
		var sc StateCounts
		for i := 0; i < len(kv); i += 2 {
			sc[kv[i].(wire.TaskState)] = uint32(kv[i+1].(int))
		}
		return sc
	}
	tests := []struct {
		name      string
		counts    StateCounts
		total     uint32
		cancelled bool
		want      wire.GraphState
	}{
		{"empty", c(), 0, false, wire.GraphState_GRAPH_STATE_SUCCEEDED},
		{"running", c(succeeded, 2, running, 1), 3, false, wire.GraphState_GRAPH_STATE_RUNNING},
		{"cancelling but not done", c(succeeded, 2, running, 1), 3, true, wire.GraphState_GRAPH_STATE_RUNNING},
		{"all succeeded", c(succeeded, 3), 3, false, wire.GraphState_GRAPH_STATE_SUCCEEDED},
		{"one failed", c(succeeded, 2, failed, 1), 3, false, wire.GraphState_GRAPH_STATE_FAILED},
		{"timed out and cancelled", c(timedOut, 1, cancelled, 2), 3, false, wire.GraphState_GRAPH_STATE_FAILED},
		{"only cancellations", c(succeeded, 1, cancelled, 2), 3, false, wire.GraphState_GRAPH_STATE_CANCELLED},
		{"graph cancelled after a failure", c(failed, 1, cancelled, 2), 3, true, wire.GraphState_GRAPH_STATE_CANCELLED},
	}
	for _, tt := range tests {
		if got := DeriveGraphState(tt.counts, tt.total, tt.cancelled); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}
