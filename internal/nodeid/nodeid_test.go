package nodeid_test

import (
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/nodeid"
)

func TestProblem(t *testing.T) {
	cases := []struct {
		id, problem string // problem "": valid
	}{
		{"w1", ""},
		{"h-1.rack_2", ""},
		{"9", ""},
		{strings.Repeat("x", nodeid.MaxLen), ""},
		{"", "is empty"},
		{strings.Repeat("x", nodeid.MaxLen+1), "is 65 bytes long; the limit is 64"},
		{"w/1", "has '/' at byte 1"},
		{"*", "has '*' at byte 0"},
		{"w 1", "has ' ' at byte 1"},
		{"wé", "at byte 1"},
		{".w", "must start with a letter or digit"},
		{"-w", "must start with a letter or digit"},
		{"_w", "must start with a letter or digit"},
	}
	for _, tc := range cases {
		got := nodeid.Problem(tc.id)
		if tc.problem == "" && got != "" || tc.problem != "" && !strings.Contains(got, tc.problem) {
			t.Errorf("Problem(%q) = %q; want %q", tc.id, got, tc.problem)
		}
	}
}
