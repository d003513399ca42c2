package main

import (
	"strings"
	"testing"

	"github.com/megaflow/megaflow/client"
)

func TestNoLeaderNote(t *testing.T) {
	heads := []*client.HeadInfo{
		{Id: "h1", Suffrage: "voter", Status: "alive"},
		{Id: "h2", Suffrage: "voter", Status: "dead"},
		{Id: "h3", Suffrage: "voter", Status: "unknown"},
		{Id: "h4", Suffrage: "nonvoter", Status: "alive"},
	}
	got := noLeaderNote("h1", heads)
	for _, want := range []string{"head h1's view", "needs 2 of the 3 voting heads", "gossip sees 1 alive", "Start 1 more of the missing heads (h2, h3)"} {
		if !strings.Contains(got, want) {
			t.Errorf("note %q lacks %q", got, want)
		}
	}
	heads[1].Status = "alive"
	if got := noLeaderNote("h1", heads); !strings.Contains(got, "election is probably in progress") {
		t.Errorf("with a quorum alive: %q, want an election in progress", got)
	}
}
