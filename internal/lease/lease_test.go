package lease

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestHeadExpired(t *testing.T) {
	c := DefaultConfig()
	for _, tc := range []struct {
		name                string
		renewed, since, now float64
		want                bool
		wantIn              time.Duration
	}{
		{"just renewed", 0, -100, 0, false, 15 * time.Second},
		{"past the lease, within the margin", 0, -100, 12, false, 3 * time.Second},
		{"lease plus margin", 0, -100, 15, true, 0},
		{"long gone", 0, -100, 100, true, -85 * time.Second},
		{"new leader gives a full lease", 0, 50, 60, false, 5 * time.Second},
		{"new leader's lease runs out too", 0, 50, 65, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := HeadExpired(c, at(tc.renewed), at(tc.since), at(tc.now)); got != tc.want {
				t.Errorf("HeadExpired = %v, want %v", got, tc.want)
			}
			if got := HeadExpiresIn(c, at(tc.renewed), at(tc.since), at(tc.now)); got != tc.wantIn {
				t.Errorf("HeadExpiresIn = %v, want %v", got, tc.wantIn)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		c  Config
		ok bool
	}{
		{DefaultConfig(), true},
		{Config{Duration: time.Second, Margin: time.Second}, true},
		{Config{Duration: 500 * time.Millisecond, Margin: 200 * time.Millisecond}, false},
		{Config{Duration: 10 * time.Second, Margin: 100 * time.Millisecond}, false},
		{Config{Duration: 10 * time.Second, Margin: 11 * time.Second}, false},
	} {
		if err := tc.c.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate = %v, want ok=%v", tc.c, err, tc.ok)
		}
	}
}

func TestFrozen(t *testing.T) {
	for _, tc := range []struct {
		prev, now float64
		want      bool
	}{
		{0, 0.5, false},
		{0, 1.4, false},
		{0, 1.6, true},
		{0, 15, true},
	} {
		if got := Frozen(at(tc.prev), at(tc.now), 500*time.Millisecond); got != tc.want {
			t.Errorf("Frozen(%v, %v) = %v, want %v", tc.prev, tc.now, got, tc.want)
		}
	}
}

// TestHolder plays a worker's renewals: sent, acked (late, out of order,
// unknown), expiry, a freeze, and the lapse an ack after the expiry
// reports.
func TestHolder(t *testing.T) {
	c := DefaultConfig()
	type step struct {
		at     float64
		op     string // sent, ack, check
		id     int64
		lapsed bool    // ack: want lapsed; check: want Expired
		expiry float64 // want ExpiresAt after the step (-1: none)
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"never renewed holds nothing and never expires", []step{
			{0, "sent", 1, false, -1},
			{100, "check", 0, false, -1},
		}},
		{"counts from the send, not the ack", []step{
			{0, "sent", 1, false, -1},
			{3, "ack", 1, false, 10},
			{9.9, "check", 0, false, 10},
			{10, "check", 0, true, 10},
		}},
		{"heartbeats keep it", []step{
			{0, "sent", 1, false, -1},
			{0.1, "ack", 1, false, 10},
			{2, "sent", 2, false, 10},
			{4, "sent", 3, false, 10},
			{4.1, "ack", 3, false, 14}, // 2's ack lost: 3's covers it
			{4.2, "ack", 2, false, 14}, // late ack of an older one changes nothing
			{13.9, "check", 0, false, 14},
		}},
		{"unknown ack changes nothing", []step{
			{0, "sent", 1, false, -1},
			{0.1, "ack", 7, false, -1},
		}},
		{"freeze: an ack after the expiry reports the lapse", []step{
			{0, "sent", 1, false, -1},
			{0.1, "ack", 1, false, 10},
			{1, "sent", 2, false, 10},
			// frozen from 1 to 25 s; the head's ack of 2 was waiting
			{25, "ack", 2, true, 11},
			{25, "sent", 3, false, 11},
			{25.1, "ack", 3, true, 35}, // still lapsed when it arrived
			{25.2, "check", 0, false, 35},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Holder
			for i, s := range tc.steps {
				now := at(s.at)
				switch s.op {
				case "sent":
					h.Sent(s.id, now)
				case "ack":
					if got := h.Acked(s.id, c, now); got != s.lapsed {
						t.Fatalf("step %d: Acked(%d) lapsed = %v, want %v", i, s.id, got, s.lapsed)
					}
				case "check":
					if got := h.Expired(now); got != s.lapsed {
						t.Fatalf("step %d: Expired = %v, want %v", i, got, s.lapsed)
					}
				}
				want := time.Time{}
				if s.expiry >= 0 {
					want = at(s.expiry)
				}
				if got := h.ExpiresAt(); !got.Equal(want) {
					t.Fatalf("step %d: ExpiresAt = %v, want %v", i, got, want)
				}
			}
		})
	}
}

func TestHolderLapsedSinceAndInitExpiry(t *testing.T) {
	c := DefaultConfig()
	var h Holder
	h.Sent(1, at(0))
	h.Acked(1, c, at(0.1))
	if got, want := h.InitExpiry(), at(12.5); !got.Equal(want) {
		t.Fatalf("InitExpiry = %v, want %v (lease + half the margin)", got, want)
	}
	if l, _ := h.LapsedSince(at(1), at(5)); l {
		t.Fatal("LapsedSince before any lapse")
	}
	if l, e := h.LapsedSince(at(1), at(11)); !l || !e.Equal(at(10)) {
		t.Fatalf("LapsedSince at an expired lease = %v, expiry %v; want true, %v", l, e, at(10))
	}
	h.Sent(2, at(11))
	h.Acked(2, c, at(11.1)) // renewed after the lapse at 11
	if l, e := h.LapsedSince(at(1), at(12)); !l || !e.Equal(at(10)) {
		t.Fatal("an attempt begun at 1 went through the lapse at 11")
	}
	if l, _ := h.LapsedSince(at(11.5), at(12)); l {
		t.Fatal("an attempt begun after the lapse did not go through it")
	}
}

func TestGossipCodec(t *testing.T) {
	r, a, err := Decode(EncodeRenewal(Renewal{Worker: "w1", From: "w1", ID: 42}))
	if err != nil || a != nil || r == nil || *r != (Renewal{Worker: "w1", From: "w1", ID: 42}) {
		t.Fatalf("renewal: %+v %+v %v", r, a, err)
	}
	r, a, err = Decode(EncodeAck(Ack{Worker: "w1", ID: 42, LeaseMillis: 10000, MarginMillis: 5000}))
	if err != nil || r != nil || a == nil || a.LeaseMillis != 10000 {
		t.Fatalf("ack: %+v %+v %v", r, a, err)
	}
	for _, bad := range []string{"", "R", "X{}", "R{", "A[1]"} {
		if _, _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%q) = nil error", bad)
		}
	}
}
