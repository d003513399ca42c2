package gossip

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Seeds kept across restarts. A member restarted with a join list that
// reaches no head any more (the list names only itself, or heads that
// moved) would otherwise form a pool of its own: a head would see no
// leader's address and no worker, a worker no head. So heads and workers
// keep, in <data dir>/SeedsFile, the gossip addresses of the heads they
// have seen alive, and join them at their next start besides their join
// list (as Serf keeps its snapshot of members).

// SeedsFile names the file of known heads' gossip addresses in a data
// directory: one "host:port" per line.
const SeedsFile = "gossip-heads"

// maxSeeds bounds the addresses kept: enough for any head cluster.
const maxSeeds = 32

// LoadSeeds returns the addresses saved in dataDir, empty lines and own
// excluded; none when the file is missing or unreadable (it is a hint).
func LoadSeeds(dataDir, own string) []string {
	b, err := os.ReadFile(filepath.Join(dataDir, SeedsFile))
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

// JoinList is join followed by the saved seeds not already in it.
func JoinList(join, saved []string) []string {
	out := slices.Clone(join)
	for _, s := range saved {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// SaveSeeds records in dataDir the gossip addresses of the heads other than
// this member that g sees alive now, followed by those saved before (at
// most 32 in all), when that changes the file; last is what was written
// before, returned updated. It writes nothing while no other head is alive,
// so a member cut off keeps its old seeds. Errors are left to the next
// call: the file is a hint.
func (g *Gossip) SaveSeeds(dataDir string, last []string) []string {
	own := g.LocalAddr()
	var now []string
	for _, m := range g.Members() {
		if m.Meta.Role == RoleHead && m.Status == StatusAlive && m.Addr != own && m.Addr != "" {
			now = append(now, m.Addr)
		}
	}
	slices.Sort(now)
	seeds := JoinList(now, last)
	if len(seeds) > maxSeeds {
		seeds = seeds[:maxSeeds]
	}
	if slices.Equal(seeds, last) || len(now) == 0 {
		return last
	}
	path := filepath.Join(dataDir, SeedsFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(seeds, "\n")+"\n"), 0o644); err != nil {
		return last
	}
	if err := os.Rename(tmp, path); err != nil {
		return last
	}
	return seeds
}
