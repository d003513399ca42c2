// Package fault owns the chaos harness's fault schedule: the kinds of
// fault it injects and Schedule, a pure function of a profile and a seed,
// so that `megaflow-bench chaos --seed S` replays the same faults in the
// same order at the same offsets. Which process a fault hits is decided at
// injection time from the fault's Pick and the cluster's state then (the
// leader is whoever leads at that moment), by the Pick* helpers here.
//
// Imported by internal/chaos/harness and cmd/megaflow-bench only.
package fault

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Kind names one kind of fault.
type Kind string

// The fault kinds. Every fault is healed at the end of its hold: a killed
// process is restarted on its data directory, a frozen one continued, a
// network rule removed.
const (
	// KillHead is kill -9 of a head, the leader in 3 cases of 4.
	KillHead Kind = "kill-head"
	// KillWorker is kill -9 of a worker; the restarted worker kills the
	// task processes its predecessor left (runtime/process records).
	KillWorker Kind = "kill-worker"
	// FreezeHead is SIGSTOP of a head (the leader in 3 cases of 4), then SIGCONT.
	FreezeHead Kind = "freeze-head"
	// FreezeWorker is SIGSTOP of a worker, then SIGCONT; its tasks keep
	// running while it is frozen.
	FreezeWorker Kind = "freeze-worker"
	// IsolateNode cuts one node (head or worker) from every other node.
	IsolateNode Kind = "isolate-node"
	// IsolateLeader cuts the leader head from the other heads (workers
	// still reach it).
	IsolateLeader Kind = "isolate-leader"
	// WorkerFromLeader cuts one worker from the leader head only.
	WorkerFromLeader Kind = "worker-from-leader"
	// Asymmetric makes the leader drop every packet from one follower,
	// while that follower still receives the leader's.
	Asymmetric Kind = "asymmetric"
	// Slow delays one node's packets (tc netem delay where the kernel has
	// it, else a tbf bandwidth limit whose queue adds up to 300 ms).
	Slow Kind = "slow-link"
	// Loss drops 30% of the packets one node receives from its peers.
	Loss Kind = "loss"
)

// AllKinds lists every kind, in the order reports show them.
var AllKinds = []Kind{KillHead, KillWorker, FreezeHead, FreezeWorker, IsolateNode, IsolateLeader, WorkerFromLeader, Asymmetric, Slow, Loss}

// ParseKinds parses a comma-separated list of kinds ("" or "all": every kind).
func ParseKinds(s string) ([]Kind, error) {
	if s == "" || s == "all" {
		return append([]Kind(nil), AllKinds...), nil
	}
	var out []Kind
	for _, p := range strings.Split(s, ",") {
		k := Kind(strings.TrimSpace(p))
		ok := false
		for _, a := range AllKinds {
			ok = ok || a == k
		}
		if !ok {
			return nil, fmt.Errorf("unknown fault kind %q; the kinds are %v", k, AllKinds)
		}
		out = append(out, k)
	}
	return out, nil
}

// Profile bounds a schedule: how long, how many faults, how long each
// holds and how long the cluster gets between two.
type Profile struct {
	// Name is "short", "long" or a caller's own.
	Name string
	// Duration is the length of the faulty phase; no fault starts after
	// Duration-MaxHold.
	Duration time.Duration
	// Warmup passes before the first fault.
	Warmup time.Duration
	// MaxFaults bounds the count.
	MaxFaults int
	// MinHold and MaxHold bound how long one fault lasts.
	MinHold, MaxHold time.Duration
	// MinGap and MaxGap bound the healthy time between two faults.
	MinGap, MaxGap time.Duration
	// Kinds are the kinds drawn from.
	Kinds []Kind
	// CoverFirst schedules one fault of every kind first (in an order the
	// seed shuffles), then draws at random.
	CoverFirst bool
	// KillWeight makes kills this many times likelier than other kinds in
	// the random draws (1: uniform).
	KillWeight int
}

// Short is the profile `make test` runs: about 2 minutes, every kind once
// and a few more kills.
func Short() Profile {
	return Profile{Name: "short", Duration: 100 * time.Second, Warmup: 5 * time.Second, MaxFaults: 14,
		MinHold: 3 * time.Second, MaxHold: 6 * time.Second, MinGap: 2 * time.Second, MaxGap: 4 * time.Second,
		Kinds: AllKinds, CoverFirst: true, KillWeight: 3}
}

// Long is the release profile: 30 minutes, about 300 faults of every kind.
func Long() Profile {
	return Profile{Name: "long", Duration: 30 * time.Minute, Warmup: 10 * time.Second, MaxFaults: 400,
		MinHold: 2 * time.Second, MaxHold: 6 * time.Second, MinGap: 1 * time.Second, MaxGap: 3 * time.Second,
		Kinds: AllKinds, CoverFirst: true, KillWeight: 1}
}

// Validate names the first field out of range.
func (p Profile) Validate() error {
	switch {
	case p.Duration <= 0:
		return fmt.Errorf("profile %q: duration %v must be positive", p.Name, p.Duration)
	case p.MaxFaults < 0:
		return fmt.Errorf("profile %q: max faults %d is negative", p.Name, p.MaxFaults)
	case p.MinHold <= 0 || p.MaxHold < p.MinHold:
		return fmt.Errorf("profile %q: hold [%v, %v] must be positive and ordered", p.Name, p.MinHold, p.MaxHold)
	case p.MinGap < 0 || p.MaxGap < p.MinGap:
		return fmt.Errorf("profile %q: gap [%v, %v] must be non-negative and ordered", p.Name, p.MinGap, p.MaxGap)
	case len(p.Kinds) == 0:
		return fmt.Errorf("profile %q: no fault kinds", p.Name)
	}
	return nil
}

// Fault is one scheduled fault.
type Fault struct {
	// Seq numbers the faults from 1.
	Seq int
	// At is the offset from the start of the faulty phase.
	At time.Duration
	// Hold is how long the fault lasts before it is healed.
	Hold time.Duration
	Kind Kind
	// Pick chooses the target among the candidates at injection time
	// (PickHead, PickWorker, PickNode).
	Pick uint32
}

// String is "#3 kill-head at 12.5s for 4s".
func (f Fault) String() string {
	return fmt.Sprintf("#%d %s at %.1fs for %.1fs", f.Seq, f.Kind, f.At.Seconds(), f.Hold.Seconds())
}

// Schedule returns the faults of profile p for seed, ordered by At and not
// overlapping: each starts after the previous one's hold and a gap. The
// same (p, seed) always gives the same schedule.
func Schedule(p Profile, seed uint64) []Fault {
	if p.Validate() != nil {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	var cover []Kind
	if p.CoverFirst {
		cover = append(cover, p.Kinds...)
		rng.Shuffle(len(cover), func(i, j int) { cover[i], cover[j] = cover[j], cover[i] })
	}
	var weighted []Kind
	for _, k := range p.Kinds {
		w := 1
		if (k == KillHead || k == KillWorker) && p.KillWeight > 1 {
			w = p.KillWeight
		}
		for range w {
			weighted = append(weighted, k)
		}
	}
	var out []Fault
	at := p.Warmup
	for len(out) < p.MaxFaults {
		hold := between(p.MinHold, p.MaxHold)
		if at+hold > p.Duration {
			break
		}
		var k Kind
		if len(out) < len(cover) {
			k = cover[len(out)]
		} else {
			k = weighted[rng.IntN(len(weighted))]
		}
		out = append(out, Fault{Seq: len(out) + 1, At: at, Hold: hold, Kind: k, Pick: rng.Uint32()})
		at += hold + between(p.MinGap, p.MaxGap)
	}
	return out
}

// PickHead returns the head a fault with pick hits among n heads: the
// leader (leader >= 0) in 3 cases of 4, else one chosen by pick.
func PickHead(pick uint32, leader, n int) int {
	if n <= 0 {
		return -1
	}
	if leader >= 0 && leader < n && pick%4 != 3 {
		return leader
	}
	return int(pick/4) % n
}

// PickOther returns one of n nodes other than not, chosen by pick (-1 when
// there is none).
func PickOther(pick uint32, not, n int) int {
	if not < 0 || not >= n {
		if n <= 0 {
			return -1
		}
		return int(pick % uint32(n))
	}
	if n <= 1 {
		return -1
	}
	i := int(pick % uint32(n-1))
	if i >= not {
		i++
	}
	return i
}

// Counts counts faults by kind.
func Counts(fs []Fault) map[Kind]int {
	m := map[Kind]int{}
	for _, f := range fs {
		m[f.Kind]++
	}
	return m
}
