package fault

import (
	"reflect"
	"testing"
	"time"
)

func TestScheduleIsBoundedOrderedAndReplayable(t *testing.T) {
	for _, tc := range []struct {
		name      string
		p         Profile
		minFaults int
		minKinds  int
	}{
		{"short", Short(), 12, len(AllKinds)},
		{"long", Long(), 200, 6},
		{"kills only", Profile{Name: "k", Duration: time.Minute, MaxFaults: 5, MinHold: time.Second, MaxHold: time.Second, Kinds: []Kind{KillHead}}, 5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, seed := range []uint64{1, 2, 42, 1 << 40} {
				fs := Schedule(tc.p, seed)
				if len(fs) < tc.minFaults || len(fs) > tc.p.MaxFaults {
					t.Fatalf("seed %d: %d faults, want [%d, %d]", seed, len(fs), tc.minFaults, tc.p.MaxFaults)
				}
				if got := len(Counts(fs)); got < tc.minKinds {
					t.Errorf("seed %d: %d kinds, want >= %d: %v", seed, got, tc.minKinds, Counts(fs))
				}
				end := time.Duration(0)
				for i, f := range fs {
					if f.Seq != i+1 || f.At < end || f.At < tc.p.Warmup || f.At+f.Hold > tc.p.Duration ||
						f.Hold < tc.p.MinHold || f.Hold > tc.p.MaxHold {
						t.Fatalf("seed %d: fault %v out of order or bounds (previous ended at %v)", seed, f, end)
					}
					end = f.At + f.Hold + tc.p.MinGap
				}
				if again := Schedule(tc.p, seed); !reflect.DeepEqual(fs, again) {
					t.Fatalf("seed %d: the same seed gave another schedule", seed)
				}
			}
			if reflect.DeepEqual(Schedule(tc.p, 1), Schedule(tc.p, 2)) && len(tc.p.Kinds) > 1 {
				t.Error("seeds 1 and 2 gave the same schedule")
			}
		})
	}
}

func TestShortCoversEveryKindFirst(t *testing.T) {
	fs := Schedule(Short(), 7)
	seen := map[Kind]bool{}
	for _, f := range fs[:len(AllKinds)] {
		seen[f.Kind] = true
	}
	if len(seen) != len(AllKinds) {
		t.Fatalf("the first %d faults cover %d kinds: %v", len(AllKinds), len(seen), fs)
	}
}

func TestScheduleRejectsBadProfiles(t *testing.T) {
	for _, p := range []Profile{
		{Name: "no duration", MaxFaults: 1, MinHold: time.Second, MaxHold: time.Second, Kinds: AllKinds},
		{Name: "holds reversed", Duration: time.Minute, MaxFaults: 1, MinHold: 2 * time.Second, MaxHold: time.Second, Kinds: AllKinds},
		{Name: "no kinds", Duration: time.Minute, MaxFaults: 1, MinHold: time.Second, MaxHold: time.Second},
	} {
		if p.Validate() == nil || Schedule(p, 1) != nil {
			t.Errorf("profile %q accepted", p.Name)
		}
	}
}

func TestPick(t *testing.T) {
	for _, tc := range []struct {
		name            string
		pick            uint32
		leader, n, want int
	}{
		{"leader preferred", 0, 2, 3, 2},
		{"leader preferred 2", 6, 1, 3, 1},
		{"one in four another", 3, 2, 3, 0},
		{"no leader", 7, -1, 3, 1},
		{"no heads", 1, 0, 0, -1},
	} {
		if got := PickHead(tc.pick, tc.leader, tc.n); got != tc.want {
			t.Errorf("%s: PickHead(%d, %d, %d) = %d, want %d", tc.name, tc.pick, tc.leader, tc.n, got, tc.want)
		}
	}
	for _, tc := range []struct {
		pick         uint32
		not, n, want int
	}{
		{0, 0, 3, 1}, {1, 0, 3, 2}, {0, 1, 3, 0}, {1, 1, 3, 2}, {5, -1, 3, 2}, {0, 0, 1, -1},
	} {
		if got := PickOther(tc.pick, tc.not, tc.n); got != tc.want {
			t.Errorf("PickOther(%d, %d, %d) = %d, want %d", tc.pick, tc.not, tc.n, got, tc.want)
		}
	}
}

func TestParseKinds(t *testing.T) {
	if ks, err := ParseKinds("kill-head, loss"); err != nil || !reflect.DeepEqual(ks, []Kind{KillHead, Loss}) {
		t.Fatalf("ParseKinds = %v, %v", ks, err)
	}
	if _, err := ParseKinds("kill-everything"); err == nil {
		t.Fatal("an unknown kind was accepted")
	}
	if ks, _ := ParseKinds(""); len(ks) != len(AllKinds) {
		t.Fatalf("empty gave %v", ks)
	}
}
