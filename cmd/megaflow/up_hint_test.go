package main

import "testing"

// The hint megaflow up prints names --heads only when a shell without
// MEGAFLOW_HEADS would not reach the cluster's head.
func TestHeadsHint(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1:7070", ""},
		{"127.0.0.1:17070", " --heads 127.0.0.1:17070"},
		{"0.0.0.0:7070", " --heads 0.0.0.0:7070"},
	} {
		if got := headsHint(tc.addr); got != tc.want {
			t.Errorf("headsHint(%q) = %q; want %q", tc.addr, got, tc.want)
		}
	}
}
