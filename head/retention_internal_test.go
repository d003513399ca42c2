package head

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/wire"
)

func TestExpiredArtifacts(t *testing.T) {
	now := time.Unix(10_000, 0)
	ago := func(d time.Duration) int64 { return now.Add(-d).UnixNano() }
	done := wire.GraphState_GRAPH_STATE_SUCCEEDED
	graphs := []*state.Graph{
		{ID: "running", State: wire.GraphState_GRAPH_STATE_RUNNING},
		{ID: "old", State: done, FinishUnixNanos: ago(2 * time.Hour)},
		{ID: "young", State: done, FinishUnixNanos: ago(30 * time.Minute)},
		{ID: "old-kept-by-label", State: done, FinishUnixNanos: ago(2 * time.Hour), Labels: map[string]string{LabelArtifactRetention: "0"}},
		{ID: "young-short-label", State: wire.GraphState_GRAPH_STATE_FAILED, FinishUnixNanos: ago(time.Minute),
			Labels: map[string]string{LabelArtifactRetention: "30s"}},
		{ID: "bad-label", State: done, FinishUnixNanos: ago(2 * time.Hour), Labels: map[string]string{LabelArtifactRetention: "soon"}},
		{ID: "swept", State: done, FinishUnixNanos: ago(2 * time.Hour)},
	}
	for _, tc := range []struct {
		def  time.Duration
		want string
	}{
		{time.Hour, "old young-short-label bad-label"},
		{0, "young-short-label"},
		{10 * time.Minute, "old young young-short-label bad-label"},
	} {
		var got []string
		for _, g := range expiredArtifacts(slices.Values(graphs), now, tc.def, map[string]bool{"swept": true}) {
			got = append(got, g.ID)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("retention %v: expired %v, want %s", tc.def, got, tc.want)
		}
	}
}
