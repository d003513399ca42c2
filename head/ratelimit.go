package head

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// TenantMetadataKey is the gRPC metadata key naming the tenant of a call
// whose request carries none (reads, cancels); without it the call is
// charged to spec.DefaultTenant.
const TenantMetadataKey = "tenant"

// maxBuckets bounds the token buckets a head keeps; past it, buckets that
// are full (their tenant idle) are dropped, which forgets nothing.
const maxBuckets = 10_000

// rateLimiter is the per-tenant token-bucket limit on API calls of one head
// (the first tier of admission). Every gRPC handler goroutine calls allow;
// it is safe for concurrent use.
type rateLimiter struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

// newRateLimiter returns a limiter of perSecond calls per tenant with the
// given burst, or nil (no limit) when perSecond is 0.
func newRateLimiter(perSecond float64, burst int) *rateLimiter {
	if perSecond <= 0 {
		return nil
	}
	return &rateLimiter{limit: rate.Limit(perSecond), burst: burst, buckets: map[string]*rate.Limiter{}}
}

// allow takes a token from tenant's bucket at now. When the bucket is
// empty it takes nothing and returns how long until a token is available.
func (l *rateLimiter) allow(tenant string, now time.Time) (ok bool, retryAfter time.Duration) {
	l.mu.Lock()
	b := l.buckets[tenant]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			for t, o := range l.buckets {
				if o.TokensAt(now) >= float64(l.burst) {
					delete(l.buckets, t)
				}
			}
		}
		b = rate.NewLimiter(l.limit, l.burst)
		l.buckets[tenant] = b
	}
	l.mu.Unlock()
	r := b.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// exemptFromRateLimit are the calls an operator needs to see why others
// are limited.
var exemptFromRateLimit = map[string]bool{
	"ClusterStatus": true,
	"GetLimits":     true,
}

// rateLimitUnary is the unary interceptor of the head's gRPC server: it
// charges each client call to its tenant (callTenant) and answers
// ResourceExhausted with a RetryAfter when the tenant is over its rate.
// Calls a follower forwarded were charged by that follower (when the mark
// can be trusted: forwardedByHead; with ACLs on and no TLS a write sent to
// a follower is charged by both heads), and worker calls are never limited.
func (h *Head) rateLimitUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := h.checkRate(ctx, info.FullMethod, req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// rateLimitStream charges the opening of a client stream (Watch), like
// rateLimitUnary.
func (h *Head) rateLimitStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := h.checkRate(ss.Context(), info.FullMethod, nil); err != nil {
		return err
	}
	return handler(srv, ss)
}

func (h *Head) checkRate(ctx context.Context, fullMethod string, req any) error {
	if h.limiter == nil {
		return nil
	}
	method, ok := strings.CutPrefix(fullMethod, "/"+wire.MegaflowService_ServiceDesc.ServiceName+"/")
	if !ok || exemptFromRateLimit[method] {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if h.forwardedByHead(ctx) {
		return nil
	}
	tenant := callTenant(md, req)
	if tok := callerToken(ctx); tok.GetTenant() != "" {
		tenant = tok.GetTenant() // the authenticated tenant (head/acl.go)
	}
	if err := h.charge(tenant, ""); err != nil {
		return errs.ToStatus(err)
	}
	return nil
}

// charge takes one call from tenant's API rate limit (Config.RateLimit;
// nothing without one). what, when not empty, says in the refusal which
// calls count. Errors: ResourceExhausted with RetryAfter.
func (h *Head) charge(tenant, what string) error {
	if h.limiter == nil {
		return nil
	}
	ok, wait := h.limiter.allow(tenant, h.clock.Now())
	if ok {
		return nil
	}
	h.metrics.rateLimited.WithLabelValues(tenant).Inc()
	if what != "" {
		what = " (" + what + ")"
	}
	return &errs.Error{Class: errs.ResourceExhausted, RetryAfter: wait,
		Message: "tenant " + tenant + " is over its API rate limit of " + formatRate(h.cfg.RateLimit, h.cfg.RateBurst) +
			" on head " + h.cfg.NodeID + what + "; retry after " + wait.Round(time.Millisecond).String()}
}

// callTenant is the tenant a call is charged to without ACLs (with them,
// its token's tenant): the submitted graph's
// tenant, else the tenant a list call filters on, else the "tenant"
// metadata key, else spec.DefaultTenant.
func callTenant(md metadata.MD, req any) string {
	var t string
	switch r := req.(type) {
	case *wire.SubmitGraphRequest:
		t = r.GetGraph().GetTenant()
	case *wire.ListGraphsRequest:
		t = r.GetTenant()
	case *wire.ListTasksRequest:
		t = r.GetTenant()
	}
	if t == "" {
		if v := md.Get(TenantMetadataKey); len(v) > 0 {
			t = v[0]
		}
	}
	if t == "" {
		t = spec.DefaultTenant
	}
	return t
}

func formatRate(perSecond float64, burst int) string {
	return strconv.FormatFloat(perSecond, 'g', -1, 64) + " calls/s (burst " + strconv.Itoa(burst) + ")"
}
