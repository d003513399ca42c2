package head

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/megaflow/megaflow/internal/gossip"
)

// Gossip seeds kept across restarts. A head restarted with a --join list
// that reaches no other member (the list names only itself, or heads that
// moved) would otherwise form a gossip pool of one: Raft would catch it up,
// but it would see no leader's address, no worker, and no other head. So
// every head keeps, in <data dir>/gossip-heads, the gossip addresses of the
// other heads it has seen alive, and joins them at its next start besides
// --join (as Serf keeps its snapshot of members).

// seedsFile names the file of known heads' gossip addresses.
const seedsFile = "gossip-heads"

// maxSeeds bounds the addresses kept: enough for any head cluster.
const maxSeeds = 32

// loadSeeds returns the addresses saved in dataDir, "" lines and own
// excluded; none when the file is missing or unreadable.
func loadSeeds(dataDir, own string) []string {
	b, err := os.ReadFile(filepath.Join(dataDir, seedsFile))
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && l != own && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// joinList is --join followed by the saved seeds not already in it.
func joinList(join, saved []string) []string {
	out := slices.Clone(join)
	for _, s := range saved {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// saveSeeds records the gossip addresses of the other heads gossip sees
// alive now, with those saved before (newest first, at most maxSeeds),
// when that changes the file; last is what was written before, returned
// updated. Errors are left to the next call: the file is a hint.
func (h *Head) saveSeeds(last []string) []string {
	own := h.gossip.LocalAddr()
	var now []string
	for _, m := range h.gossip.Members() {
		if m.Meta.Role == gossip.RoleHead && m.Status == gossip.StatusAlive && m.Addr != own && m.Addr != "" {
			now = append(now, m.Addr)
		}
	}
	slices.Sort(now)
	seeds := joinList(now, last)
	if len(seeds) > maxSeeds {
		seeds = seeds[:maxSeeds]
	}
	if slices.Equal(seeds, last) || len(now) == 0 {
		return last
	}
	path := filepath.Join(h.cfg.DataDir, seedsFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(seeds, "\n")+"\n"), 0o644); err != nil {
		return last
	}
	if err := os.Rename(tmp, path); err != nil {
		return last
	}
	return seeds
}
