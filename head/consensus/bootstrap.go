package consensus

import (
	"slices"
	"strings"

	"github.com/hashicorp/raft"
)

// Peer is a head as gossip shows it (an alive member with Role head): its
// Raft server id and advertised Raft address. The caller converts gossip members to Peers, so that this
// package does not depend on gossip.
type Peer struct {
	// ID is the head's Raft server id (gossip Meta.NodeID).
	ID string
	// Addr is the head's advertised Raft transport "ip:port" (gossip
	// Meta.RaftAddr).
	Addr string
}

// BootstrapServers decides, as a pure function, whether a head with no Raft
// state should bootstrap now and with which voters (bootstrap-expect, as in
// Consul and Nomad). self is this head's ID (Config.NodeID), heads the heads gossip
// currently shows alive (self included), expect the configured number of
// heads.
//
// It returns the first expect heads in ID order, as voters sorted by ID, and
// true, when all of these hold:
//   - expect >= 1 and at least expect distinct heads are visible (entries
//     with an empty ID or Addr are ignored);
//   - no ID appears with two addresses and no address with two IDs (a
//     half-updated view: wait for gossip to settle);
//   - self is among the chosen expect.
//
// Otherwise it returns nil, false: wait for the next membership change.
//
// Why exactly the first expect, where Consul takes every server it sees once
// it sees at least expect: the bootstrap configuration must be identical on
// every head that writes one, and heads see members appear at slightly
// different times. With "all visible", a head that already sees an extra head
// writes a different configuration from one that does not yet; with "the
// expect lowest IDs", any head that sees more than expect heads still
// agrees with the others, provided the extra heads sort after the first
// expect. Neither rule can be safe against every view (a head that sees h2,
// h3, h4 but not yet h1 would choose differently), so, as in Consul and
// Nomad, the supported setup is: start exactly expect heads with empty data
// directories; then every view that reaches expect is the same set. A head
// outside the first expect does not bootstrap; the leader adds it with
// AddVoter when it appears (the head's membership reconciler). A node with
// existing state must not call Bootstrap at all (HasExistingState).
func BootstrapServers(self string, heads []Peer, expect int) ([]raft.Server, bool) {
	if expect < 1 {
		return nil, false
	}
	byID := make(map[string]string, len(heads))
	byAddr := make(map[string]string, len(heads))
	for _, h := range heads {
		if h.ID == "" || h.Addr == "" {
			continue
		}
		if a, ok := byID[h.ID]; ok && a != h.Addr {
			return nil, false
		}
		if id, ok := byAddr[h.Addr]; ok && id != h.ID {
			return nil, false
		}
		byID[h.ID] = h.Addr
		byAddr[h.Addr] = h.ID
	}
	if len(byID) < expect {
		return nil, false
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, strings.Compare)
	ids = ids[:expect]
	if !slices.Contains(ids, self) {
		return nil, false
	}
	servers := make([]raft.Server, len(ids))
	for i, id := range ids {
		servers[i] = raft.Server{
			Suffrage: raft.Voter,
			ID:       raft.ServerID(id),
			Address:  raft.ServerAddress(byID[id]),
		}
	}
	return servers, true
}
