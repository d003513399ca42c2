package head

import (
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/megaflow/megaflow/internal/wire"
)

func TestRateLimiterPerTenant(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type call struct {
		tenant string
		at     time.Duration
		ok     bool
		wait   time.Duration
	}
	tests := []struct {
		name  string
		rate  float64
		burst int
		calls []call
	}{
		{"burst then wait", 2, 2, []call{
			{"a", 0, true, 0}, {"a", 0, true, 0}, {"a", 0, false, 500 * time.Millisecond},
			{"a", 250 * time.Millisecond, false, 250 * time.Millisecond}, {"a", 500 * time.Millisecond, true, 0},
		}},
		{"tenants apart", 1, 1, []call{
			{"a", 0, true, 0}, {"a", 0, false, time.Second}, {"b", 0, true, 0}, {"b", 0, false, time.Second},
		}},
		{"refused calls take no token", 1, 1, []call{
			{"a", 0, true, 0}, {"a", 100 * time.Millisecond, false, 900 * time.Millisecond},
			{"a", 200 * time.Millisecond, false, 800 * time.Millisecond}, {"a", time.Second, true, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newRateLimiter(tt.rate, tt.burst)
			for i, c := range tt.calls {
				ok, wait := l.allow(c.tenant, t0.Add(c.at))
				if ok != c.ok || wait != c.wait {
					t.Fatalf("call %d (%s at %v): ok %v wait %v, want %v %v", i, c.tenant, c.at, ok, wait, c.ok, c.wait)
				}
			}
		})
	}
	if newRateLimiter(0, 5) != nil {
		t.Fatal("rate 0 must mean no limiter")
	}
}

func TestCallTenant(t *testing.T) {
	md := metadata.Pairs(TenantMetadataKey, "team-m")
	tests := []struct {
		name string
		md   metadata.MD
		req  any
		want string
	}{
		{"graph's tenant", md, &wire.SubmitGraphRequest{Graph: &wire.GraphSpec{Tenant: "team-g"}}, "team-g"},
		{"graph without tenant, metadata", md, &wire.SubmitGraphRequest{Graph: &wire.GraphSpec{}}, "team-m"},
		{"list filter", nil, &wire.ListTasksRequest{Tenant: "team-l"}, "team-l"},
		{"metadata", md, &wire.GetTaskRequest{}, "team-m"},
		{"nothing", nil, &wire.GetTaskRequest{}, "default"},
	}
	for _, tt := range tests {
		if got := callTenant(tt.md, tt.req); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
