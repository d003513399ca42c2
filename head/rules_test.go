package head

import (
	"testing"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/gossip"
)

// The leader raises the rules version to the highest every voter
// advertises, never past its own build's, and not at all while a voter's
// version is unknown (down, not gossiped yet, or a build from before rules
// versions).
func TestRulesToCommit(t *testing.T) {
	cur := fsm.RulesCurrent
	tests := []struct {
		name       string
		current    uint64
		advertised map[string]uint64 // missing: unknown
		want       uint64
		ok         bool
	}{
		{"new cluster, all current", 0, map[string]uint64{"h1": cur, "h2": cur, "h3": cur}, cur, true},
		{"already there", cur, map[string]uint64{"h1": cur, "h2": cur, "h3": cur}, cur, false},
		{"a voter unknown", 0, map[string]uint64{"h1": cur, "h2": cur}, 0, false},
		{"an older voter holds the cluster back", 0, map[string]uint64{"h1": cur, "h2": 0, "h3": cur}, 0, false},
		{"a newer voter does not pull past this build", 0, map[string]uint64{"h1": cur, "h2": cur + 5, "h3": cur}, cur, true},
		{"never down", cur, map[string]uint64{"h1": 0, "h2": 0, "h3": 0}, 0, false},
	}
	for _, tt := range tests {
		got, ok := rulesToCommit(tt.current, []string{"h1", "h2", "h3"}, func(id string) (uint64, bool) {
			v, known := tt.advertised[id]
			return v, known
		})
		if got != tt.want && tt.ok || ok != tt.ok {
			t.Errorf("%s: rulesToCommit = %d, %v; want %d, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestAdvertisedRules(t *testing.T) {
	for _, tt := range []struct {
		extra map[string]string
		want  uint64
		ok    bool
	}{
		{nil, 0, false},
		{map[string]string{fsm.MetaKeyRules: "1"}, 1, true},
		{map[string]string{fsm.MetaKeyRules: "x"}, 0, false},
	} {
		if got, ok := advertisedRules(gossip.Meta{Role: gossip.RoleHead, Extra: tt.extra}); got != tt.want || ok != tt.ok {
			t.Errorf("advertisedRules(%v) = %d, %v; want %d, %v", tt.extra, got, ok, tt.want, tt.ok)
		}
	}
}
