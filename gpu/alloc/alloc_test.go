package alloc

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
)

// islands builds n devices named g0..g(n-1) whose NVLink peers are the other
// members of their island.
func islands(model string, mem int64, groups ...[]int) []Device {
	var devs []Device
	for _, grp := range groups {
		for _, i := range grp {
			d := Device{UUID: fmt.Sprintf("g%d", i), Model: model, MemoryBytes: mem}
			for _, j := range grp {
				if j != i {
					d.NVLinkPeers = append(d.NVLinkPeers, fmt.Sprintf("g%d", j))
				}
			}
			devs = append(devs, d)
		}
	}
	return devs
}

func without(devs []Device, uuids ...string) []Device {
	return slices.DeleteFunc(slices.Clone(devs), func(d Device) bool { return slices.Contains(uuids, d.UUID) })
}

func TestChoose(t *testing.T) {
	const gib = int64(1) << 30
	twoIslands := islands("NVIDIA H100 80GB HBM3", 80*gib, []int{0, 1, 2, 3}, []int{4, 5, 6, 7})
	mixed := append(islands("NVIDIA A100-SXM4-40GB", 40*gib, []int{0, 1}, []int{2, 3}),
		islands("NVIDIA H100 80GB HBM3", 80*gib, []int{4, 5, 6, 7})...)
	cases := []struct {
		name string
		free []Device
		req  Request
		want []string // nil: no choice
		full bool
	}{
		{"one", twoIslands, Request{Count: 1}, []string{"g0"}, true},
		{"two in one island", twoIslands, Request{Count: 2}, []string{"g0", "g1"}, true},
		{"four is one island", twoIslands, Request{Count: 4}, []string{"g0", "g1", "g2", "g3"}, true},
		{"eight spans both", twoIslands, Request{Count: 8}, []string{"g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7"}, false},
		{"four when island 1 is broken", without(twoIslands, "g0"), Request{Count: 4}, []string{"g4", "g5", "g6", "g7"}, true},
		{"two fill a broken island first", without(twoIslands, "g0", "g1"), Request{Count: 2}, []string{"g2", "g3"}, true},
		{"one fills a broken island first", without(twoIslands, "g4", "g5", "g6"), Request{Count: 1}, []string{"g7"}, true},
		{"four across broken islands", without(twoIslands, "g0", "g1", "g4", "g5"), Request{Count: 4}, []string{"g2", "g3", "g6", "g7"}, false},
		{"three most links", without(twoIslands, "g0", "g1", "g4"), Request{Count: 3}, []string{"g5", "g6", "g7"}, true},
		{"too few", without(twoIslands, "g0"), Request{Count: 8}, nil, false},
		{"zero count", twoIslands, Request{Count: 0}, nil, false},
		{"model A100", mixed, Request{Count: 2, Model: "a100"}, []string{"g0", "g1"}, true},
		{"model H100 four", mixed, Request{Count: 4, Model: "H100"}, []string{"g4", "g5", "g6", "g7"}, true},
		{"model A100 four not connected", mixed, Request{Count: 4, Model: "A100"}, []string{"g0", "g1", "g2", "g3"}, false},
		{"model A100 five", mixed, Request{Count: 5, Model: "A100"}, nil, false},
		{"min memory picks H100", mixed, Request{Count: 2, MinMemoryBytes: 41 * gib}, []string{"g4", "g5"}, true},
		{"min memory too high", mixed, Request{Count: 1, MinMemoryBytes: 81 * gib}, nil, false},
		{"no topology: sorted", islands("X", gib, []int{3}, []int{1}, []int{2}), Request{Count: 2}, []string{"g1", "g2"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rev := slices.Clone(tc.free)
			slices.Reverse(rev)
			for _, in := range [][]Device{tc.free, rev} {
				c, ok := Choose(in, tc.req)
				if tc.want == nil {
					if ok {
						t.Fatalf("Choose = %v, want no choice", c.UUIDs)
					}
					continue
				}
				if !ok || !slices.Equal(c.UUIDs, tc.want) || c.FullyConnected != tc.full {
					t.Fatalf("Choose = %v full=%v ok=%v, want %v full=%v", c.UUIDs, c.FullyConnected, ok, tc.want, tc.full)
				}
			}
		})
	}
}

// TestChooseOneSidedPeers checks that a link listed by one end only counts.
func TestChooseOneSidedPeers(t *testing.T) {
	free := []Device{{UUID: "a"}, {UUID: "b"}, {UUID: "c", NVLinkPeers: []string{"b", "zz"}}}
	c, ok := Choose(free, Request{Count: 2})
	if !ok || !slices.Equal(c.UUIDs, []string{"b", "c"}) || c.Links != 1 {
		t.Fatalf("Choose = %+v, want [b c] with 1 link", c)
	}
}

// reference is the brute force: every subset of the free devices, scored as
// Choose documents, ties to the lexicographically first sorted UUID list.
func reference(free []Device, req Request) (Choice, bool) {
	g := newGraph(free)
	var best []string
	bestScore := score{links: -1}
	for set := uint64(0); set < 1<<len(g.devs); set++ {
		if bits.OnesCount64(set) != req.Count {
			continue
		}
		okSet := true
		var uuids []string
		for m := set; m != 0; m &= m - 1 {
			d := g.devs[bits.TrailingZeros64(m)]
			if (req.Model != "" && d.Model != req.Model) || d.MemoryBytes < req.MinMemoryBytes {
				okSet = false
				break
			}
			uuids = append(uuids, d.UUID)
		}
		if !okSet {
			continue
		}
		sc := g.score(set)
		if best == nil || sc.better(bestScore) || (sc == bestScore && slices.Compare(uuids, best) < 0) {
			best, bestScore = uuids, sc
		}
	}
	if best == nil {
		return Choice{}, false
	}
	n := len(best)
	return Choice{UUIDs: best, Links: bestScore.links, FullyConnected: bestScore.links == n*(n-1)/2}, true
}

func TestChooseMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for iter := range 3000 {
		n := 1 + rng.IntN(8)
		p := rng.Float64()
		free := make([]Device, n)
		names := rng.Perm(20)
		for i := range free {
			free[i] = Device{UUID: fmt.Sprintf("GPU-%02d", names[i]), Model: []string{"A", "B"}[rng.IntN(2)], MemoryBytes: int64(1 + rng.IntN(3))}
		}
		for i := range free {
			for j := range free {
				if i < j && rng.Float64() < p {
					free[i].NVLinkPeers = append(free[i].NVLinkPeers, free[j].UUID)
				}
			}
		}
		req := Request{Count: []int{1, 2, 4, 8, 1 + rng.IntN(n)}[rng.IntN(5)]}
		if rng.IntN(4) == 0 {
			req.Model = "A"
		}
		if rng.IntN(4) == 0 {
			req.MinMemoryBytes = 2
		}
		got, gotOK := Choose(free, req)
		want, wantOK := reference(free, req)
		if gotOK != wantOK || !slices.Equal(got.UUIDs, want.UUIDs) || got.Links != want.Links || got.FullyConnected != want.FullyConnected {
			t.Fatalf("iter %d: free=%+v req=%+v\nChoose    = %+v %v\nreference = %+v %v", iter, free, req, got, gotOK, want, wantOK)
		}
	}
}

func TestVisibleDevicesEnv(t *testing.T) {
	got := VisibleDevicesEnv([]string{"GPU-b", "GPU-a"})
	if got[EnvCUDAVisibleDevices] != "GPU-b,GPU-a" || got[EnvNVIDIAVisibleDevices] != "GPU-b,GPU-a" || len(got) != 2 {
		t.Fatalf("VisibleDevicesEnv = %v", got)
	}
	got = VisibleDevicesEnv(nil)
	if v, ok := got[EnvCUDAVisibleDevices]; !ok || v != "" || got[EnvNVIDIAVisibleDevices] != "void" {
		t.Fatalf("VisibleDevicesEnv(nil) = %v", got)
	}
}

// TestChooseLarge checks the greedy path on 32 devices in four NVLink
// islands of 8 with some devices taken.
func TestChooseLarge(t *testing.T) {
	var groups [][]int
	for g := range 4 {
		var grp []int
		for i := range 8 {
			grp = append(grp, 10+g*8+i)
		}
		groups = append(groups, grp)
	}
	free := without(islands("H100", 1, groups...), "g10", "g18", "g19", "g26", "g27", "g28")
	for _, tc := range []struct {
		k    int
		want []string
	}{
		{8, []string{"g34", "g35", "g36", "g37", "g38", "g39", "g40", "g41"}},
		{5, []string{"g29", "g30", "g31", "g32", "g33"}},
		{2, []string{"g29", "g30"}},
	} {
		c, ok := Choose(free, Request{Count: tc.k})
		if !ok || !c.FullyConnected || !slices.Equal(c.UUIDs, tc.want) {
			t.Errorf("k=%d: %+v, want %v", tc.k, c, tc.want)
		}
	}
}
