package consensus

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

func TestBootstrapServers(t *testing.T) {
	p := func(id string) Peer { return Peer{ID: id, Addr: "10.0.0." + id[1:] + ":7000"} }
	voters := func(ids ...string) string {
		var out []raft.Server
		for _, id := range ids {
			out = append(out, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(p(id).Addr)})
		}
		return fmt.Sprint(out)
	}
	for _, tc := range []struct {
		name   string
		self   string
		heads  []Peer
		expect int
		want   string // "" means false
	}{
		{"three of three", "h2", []Peer{p("h3"), p("h1"), p("h2")}, 3, voters("h1", "h2", "h3")},
		{"two of three: wait", "h1", []Peer{p("h1"), p("h2")}, 3, ""},
		{"single head", "h1", []Peer{p("h1")}, 1, voters("h1")},
		{"expect zero", "h1", []Peer{p("h1")}, 0, ""},
		{"fourth head visible: first three", "h1", []Peer{p("h4"), p("h3"), p("h2"), p("h1")}, 3, voters("h1", "h2", "h3")},
		{"self beyond the first expect", "h4", []Peer{p("h4"), p("h3"), p("h2"), p("h1")}, 3, ""},
		{"self not visible", "h9", []Peer{p("h1"), p("h2"), p("h3")}, 3, ""},
		{"duplicates count once", "h1", []Peer{p("h1"), p("h1"), p("h2"), p("h2")}, 3, ""},
		{"identical duplicates are fine", "h1", []Peer{p("h1"), p("h1"), p("h2"), p("h3")}, 3, voters("h1", "h2", "h3")},
		{"incomplete entries ignored", "h1", []Peer{p("h1"), p("h2"), {ID: "h3"}, {Addr: "10.0.0.9:7000"}}, 3, ""},
		{"id with two addresses", "h1", []Peer{p("h1"), p("h2"), p("h3"), {ID: "h3", Addr: "10.0.0.33:7000"}}, 3, ""},
		{"address with two ids", "h1", []Peer{p("h1"), p("h2"), p("h3"), {ID: "h4", Addr: p("h3").Addr}}, 3, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			servers, ok := BootstrapServers(tc.self, tc.heads, tc.expect)
			got := ""
			if ok {
				got = fmt.Sprint(servers)
			} else if servers != nil {
				t.Errorf("servers = %v with false", servers)
			}
			if got != tc.want {
				t.Errorf("BootstrapServers(%s, %v, %d) = %q, want %q", tc.self, tc.heads, tc.expect, got, tc.want)
			}
		})
	}
}

// Every head that bootstraps computes the same set, whatever order and
// extra heads its view has.
func TestBootstrapServersAgreeAcrossViews(t *testing.T) {
	all := []Peer{{"h1", "a1:1"}, {"h2", "a2:1"}, {"h3", "a3:1"}, {"h4", "a4:1"}}
	views := map[string][]Peer{
		"h1": {all[3], all[0], all[2], all[1]},
		"h2": {all[1], all[2], all[0]},
		"h3": {all[2], all[0], all[1], all[3]},
	}
	var first string
	for self, view := range views {
		s, ok := BootstrapServers(self, view, 3)
		if !ok {
			t.Fatalf("%s: false", self)
		}
		if first == "" {
			first = fmt.Sprint(s)
		} else if fmt.Sprint(s) != first {
			t.Fatalf("%s computed %v, another head %s", self, s, first)
		}
	}
}
