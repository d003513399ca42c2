package head

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/acl"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/wire"
)

// API tokens on the head (docs/security.md). With Config.ACL every call
// passes aclUnary or aclStream: the token in its "authorization" metadata
// is looked up in this head's own table (no round trip to the leader),
// internal/acl decides by the method's rule, and a tenant-scoped call is
// bound to the token's tenant (scope): a request naming another tenant is
// refused, a list without one is narrowed to it, and a call naming one
// object (graph, task, sandbox, snapshot) of another tenant is answered
// NotFound, as if the object did not exist. A follower forwards the
// caller's token to the leader, which decides again.

// tokenCatchUp bounds how long a head waits to apply the entries it knows
// are committed before it calls a token unknown.
const tokenCatchUp = time.Second

// callerKey is the context key of the authenticated token of a call.
type callerKey struct{}

// callerToken is the token a call was authenticated with, or nil (ACLs off,
// a public method, a worker authenticated by its certificate).
func callerToken(ctx context.Context) *wire.Token {
	t, _ := ctx.Value(callerKey{}).(*wire.Token)
	return t
}

// aclMaxStaleness is Config.ACLMaxStaleness or its default.
func (h *Head) aclMaxStaleness() time.Duration {
	if h.cfg.ACLMaxStaleness > 0 {
		return h.cfg.ACLMaxStaleness
	}
	return DefaultACLMaxStaleness
}

// aclUnary is the unary interceptor of a head with Config.ACL.
func (h *Head) aclUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	tok, rule, err := h.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if tok == nil {
		resp, err := handler(ctx, req)
		if info.FullMethod == bootstrapMethod {
			h.audit(ctx, nil, info.FullMethod, req, err) // public, and the first admin token's birth
		}
		return resp, err
	}
	ctx = context.WithValue(ctx, callerKey{}, tok)
	if rule.Scope == acl.ScopeTenant {
		if err := h.scope(ctx, tok, info.FullMethod, req); err != nil {
			return nil, err
		}
	}
	resp, err := handler(ctx, req)
	if err == nil && rule.Scope == acl.ScopeTenant {
		filterResponse(h.fsm.View(), acl.TenantOf(tok), resp)
	}
	h.audit(ctx, tok, info.FullMethod, req, err)
	return resp, err
}

// aclStream is aclUnary for streaming methods: every message the client
// sends is scoped as a unary request is.
func (h *Head) aclStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	tok, rule, err := h.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	if tok == nil {
		return handler(srv, ss)
	}
	ctx := context.WithValue(ss.Context(), callerKey{}, tok)
	err = handler(srv, &scopedStream{ServerStream: ss, ctx: ctx, h: h, tok: tok, method: info.FullMethod, tenant: rule.Scope == acl.ScopeTenant})
	h.audit(ctx, tok, info.FullMethod, nil, err)
	return err
}

// scopedStream carries the caller's token in its context and scopes each
// message received.
type scopedStream struct {
	grpc.ServerStream
	ctx    context.Context
	h      *Head
	tok    *wire.Token
	method string
	tenant bool
}

func (s *scopedStream) Context() context.Context { return s.ctx }

func (s *scopedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.tenant {
		return s.h.scope(s.ctx, s.tok, s.method, m)
	}
	return nil
}

// authenticate finds the call's token and asks acl.Authorize. It returns
// a nil token for a call that needs none (a public method, a worker shown
// by its TLS certificate). Refusals are counted and logged at warn
// (never the secret); the error is a gRPC status.
func (h *Head) authenticate(ctx context.Context, method string) (*wire.Token, acl.Rule, error) {
	if r, ok := acl.Methods[method]; ok && r.Scope == acl.ScopePublic {
		return nil, r, nil
	}
	if r, ok := acl.Methods[method]; ok && h.cfg.TLS != nil && (r.Scope == acl.ScopeWorker || r.Scope == acl.ScopeCluster) {
		// A worker's certificate speaks for it: on its stream
		// (tlsconfig's authorizer checked the role) and when it asks
		// who leads.
		if role, err := tlsconfig.RoleOf(tlsconfig.PeerCertificate(ctx)); err == nil && role == tlsconfig.RoleWorker {
			return nil, r, nil
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var tok *wire.Token
	presented, malformed := false, false
	if v := md.Get(acl.MetadataKey); len(v) > 0 {
		presented = true
		if secret, ok := acl.BearerSecret(v[0]); ok {
			hash := acl.Hash(secret)
			tok = h.fsm.View().TokenByHash(hash)
			if tok == nil {
				tok = h.awaitToken(ctx, hash)
			}
		} else {
			malformed = true
		}
	}
	rule, ref := acl.Authorize(tok, presented, method, h.clock.Now())
	if malformed {
		ref = &acl.Refusal{Err: errs.New(errs.Unauthenticated, "%s: the authorization metadata is not \"Bearer <token>\"; pass the token as --token or MEGAFLOW_TOKEN gives it", method), Reason: acl.ReasonBadToken}
	}
	// ClusterStatus and GetLimits (ScopeCluster) show no tenant's data and
	// are how an operator sees a partition from a cut-off head: a token
	// that authorized them is not held to the bound.
	if (ref == nil && rule.Scope != acl.ScopeCluster || ref != nil && ref.Reason == acl.ReasonUnknown) && !h.IsLeader() {
		// The revocation bound: a follower that has not heard from the
		// leader for longer than ACLMaxStaleness may have missed a
		// revocation, so it trusts no token; nor can it tell a token it
		// has not applied yet (a head just restarted, still replaying)
		// from an unknown one, so that is Unavailable too, not
		// Unauthenticated.
		lc := h.node.Raft().LastContact()
		if lc.IsZero() || time.Since(lc) > h.aclMaxStaleness() { // Raft's time, as LastContact
			ref = &acl.Refusal{Err: errs.New(errs.Unavailable,
				"head %s has not heard from a leader for more than %s, so it may have missed a token's creation or revocation and accepts no token; retry (another head, or once the cluster has a leader)",
				h.cfg.NodeID, h.aclMaxStaleness()), Reason: acl.ReasonStale}
		}
	}
	if ref != nil {
		h.refuse(ctx, tok, method, ref)
		return nil, rule, errs.ToStatus(ref.Err)
	}
	return tok, rule, nil
}

// awaitToken looks hash up again each time this head applies entries, for
// at most tokenCatchUp: a token made a moment ago through the leader may
// not be applied here yet. Nil when it never appears.
func (h *Head) awaitToken(ctx context.Context, hash []byte) *wire.Token {
	timer := h.clock.NewTimer(tokenCatchUp)
	defer timer.Stop()
	for {
		changed := h.fsm.Changed()
		if tok := h.fsm.View().TokenByHash(hash); tok != nil {
			return tok
		}
		select {
		case <-changed:
		case <-timer.C():
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// refuse counts and logs a refused call. The forwarding mark is logged as
// forwarded_by when it can be trusted (forwardedByHead), else as
// forwarded_mark_untrusted: a client can write any.
func (h *Head) refuse(ctx context.Context, tok *wire.Token, method string, ref *acl.Refusal) {
	h.metrics.aclRefusals.WithLabelValues(method, ref.Reason).Inc()
	md, _ := metadata.FromIncomingContext(ctx)
	fwd := "forwarded_mark_untrusted"
	if h.forwardedByHead(ctx) {
		fwd = "forwarded_by"
	}
	h.logger.Warn("acl: refused a call", "method", method, "reason", ref.Reason, "accessor", tok.GetAccessor(),
		"role", acl.RoleName(tok.GetRole()), "tenant", tok.GetTenant(), fwd, strings.Join(md.Get(forwardedKey), ","), "err", ref.Err.Message)
}

// refuseScope is a tenant refusal of an authenticated call.
func (h *Head) refuseScope(ctx context.Context, tok *wire.Token, method string, err *errs.Error) error {
	h.refuse(ctx, tok, method, &acl.Refusal{Err: err, Reason: acl.ReasonTenant})
	return errs.ToStatus(err)
}

// bootstrapMethod is the once-only, public BootstrapACL, audited although
// it needs no token.
const bootstrapMethod = "/megaflow.v1.MegaflowService/BootstrapACL"

// auditedMethods are the admin writes the head logs at info when they
// succeed, with the caller's accessor.
var auditedMethods = map[string]bool{
	"CreateToken": true, "RevokeToken": true, "BootstrapACL": true, "SetQuota": true, "SetAdmissionPolicy": true,
	"RemoveHead": true, "SnapshotRestore": true, "SnapshotSave": true,
}

// audit logs an admin write (auditedMethods) by its caller, once: on the
// head the client called, not again on the leader it forwarded to when
// the forwarding can be trusted (forwardedByHead; with ACLs on and no TLS
// both heads log it, so a client's forged mark never skips the audit).
func (h *Head) audit(ctx context.Context, tok *wire.Token, method string, req any, err error) {
	name := method[strings.LastIndex(method, "/")+1:]
	if !auditedMethods[name] {
		return
	}
	if h.forwardedByHead(ctx) {
		return
	}
	attrs := []any{"method", method, "accessor", tok.GetAccessor(), "role", acl.RoleName(tok.GetRole())}
	switch r := req.(type) {
	case *wire.SetQuotaRequest:
		attrs = append(attrs, "tenant", r.GetQuota().GetTenant(), "cluster", r.GetCluster())
	case *wire.SetAdmissionPolicyRequest:
		attrs = append(attrs, "tenant", r.GetPolicy().GetTenant(), "cluster", r.GetCluster())
	case *wire.CreateTokenRequest:
		attrs = append(attrs, "tenant", r.GetTenant(), "new_role", acl.RoleName(r.GetRole()))
	case *wire.RevokeTokenRequest:
		attrs = append(attrs, "revoked", r.GetAccessor())
	case *wire.RemoveHeadRequest:
		attrs = append(attrs, "removed_head", r.GetHeadId())
	}
	if err != nil {
		h.logger.Info("acl audit: admin call failed", append(attrs, "err", err)...)
		return
	}
	h.logger.Info("acl audit: admin call", attrs...)
}

// scope binds a tenant-scoped request to tok's tenant (an admin token
// reaches every tenant): a tenant field naming another is PermissionDenied,
// an empty one is set to the token's, and an object of another tenant is
// NotFound. Objects this head has not applied yet are looked up again after
// the request's min_index, if it names one.
func (h *Head) scope(ctx context.Context, tok *wire.Token, method string, req any) error {
	tenant := acl.TenantOf(tok)
	if tenant == "" {
		return nil
	}
	name := method[strings.LastIndex(method, "/")+1:]
	bind := func(field *string, what string) error {
		switch *field {
		case "":
			*field = tenant
		case tenant:
		default:
			return h.refuseScope(ctx, tok, method, errs.New(errs.PermissionDenied,
				"%s names tenant %q (%s); your token (accessor %s) is of tenant %q and reaches only its objects", name, *field, what, acl.Short(tok.GetAccessor()), tenant))
		}
		return nil
	}
	own := func(kind, id string, minIndex uint64) error {
		if id == "" {
			return nil // the handler refuses a missing id
		}
		t, found := objectTenant(h.fsm.View(), kind, id)
		if !found && minIndex > 0 {
			if err := h.waitApplied(ctx, minIndex, 0); err != nil {
				return errs.ToStatus(err)
			}
			t, found = objectTenant(h.fsm.View(), kind, id)
		}
		if found && t != tenant {
			return h.refuseScope(ctx, tok, method, errs.New(errs.NotFound, "%s: no %s %s of tenant %s", name, kind, id, tenant))
		}
		return nil
	}
	switch r := req.(type) {
	case *wire.SubmitGraphRequest:
		if r.GetGraph() == nil {
			return nil
		}
		return bind(&r.Graph.Tenant, "graph.tenant")
	case *wire.ListGraphsRequest:
		return bind(&r.Tenant, "tenant")
	case *wire.ListTasksRequest:
		if err := own("graph", r.GetGraphId(), r.GetRead().GetMinIndex()); err != nil {
			return err
		}
		if r.GetGraphId() != "" {
			return nil
		}
		return bind(&r.Tenant, "tenant")
	case *wire.GetAdmissionPolicyRequest:
		return bind(&r.Tenant, "tenant")
	case *wire.ListSandboxesRequest:
		return bind(&r.Tenant, "tenant")
	case *wire.ListSnapshotsRequest:
		return bind(&r.Tenant, "tenant")
	case *wire.CreateSandboxRequest:
		if r.GetSpec() == nil {
			return nil
		}
		return bind(&r.Spec.Tenant, "spec.tenant")
	case *wire.PoolWarmRequest:
		if r.GetTarget() == nil {
			return nil
		}
		return bind(&r.Target.Tenant, "target.tenant")
	case *wire.WatchRequest:
		if r.GetGraphId() == "" {
			return h.refuseScope(ctx, tok, method, errs.New(errs.PermissionDenied,
				"Watch of every graph needs role admin; your token (accessor %s) is of tenant %q: watch one graph of it (graph_id)", acl.Short(tok.GetAccessor()), tenant))
		}
		return own("graph", r.GetGraphId(), 0)
	case *wire.GetGraphRequest:
		return own("graph", r.GetGraphId(), r.GetRead().GetMinIndex())
	case *wire.CancelGraphRequest:
		return own("graph", r.GetGraphId(), 0)
	case *wire.DeleteGraphRequest:
		return own("graph", r.GetGraphId(), 0)
	case *wire.GetTaskRequest:
		return own("task", r.GetTaskId(), r.GetRead().GetMinIndex())
	case *wire.CancelTaskRequest:
		return own("task", r.GetTaskId(), 0)
	case *wire.LogsRequest:
		return own("task", r.GetTaskId(), r.GetRead().GetMinIndex())
	case *wire.ArtifactListRequest:
		return own("task", r.GetTaskId(), r.GetRead().GetMinIndex())
	case *wire.ArtifactGetRequest:
		return own("task", r.GetTaskId(), r.GetRead().GetMinIndex())
	case *wire.GetSandboxRequest:
		return own("sandbox", r.GetId(), r.GetMinIndex())
	case *wire.CloseSandboxRequest:
		return own("sandbox", r.GetId(), r.GetMinIndex())
	case *wire.SetSandboxTimeoutRequest:
		return own("sandbox", r.GetId(), r.GetMinIndex())
	case *wire.PauseSandboxRequest:
		return own("sandbox", r.GetId(), r.GetMinIndex())
	case *wire.ResumeSandboxRequest:
		return own("sandbox", r.GetId(), r.GetMinIndex())
	case *wire.SandboxExecRequest:
		return own("sandbox", r.GetSandboxId(), r.GetMinIndex())
	case *wire.SandboxWriteFileRequest:
		return own("sandbox", r.GetSandboxId(), r.GetMinIndex())
	case *wire.SandboxReadFileRequest:
		return own("sandbox", r.GetSandboxId(), r.GetMinIndex())
	case *wire.SandboxUploadArchiveRequest:
		return own("sandbox", r.GetSandboxId(), r.GetMinIndex())
	case *wire.SandboxDownloadArchiveRequest:
		return own("sandbox", r.GetSandboxId(), r.GetMinIndex())
	case *wire.SnapshotSandboxRequest:
		return own("sandbox", r.GetSandboxId(), r.GetMinIndex())
	case *wire.DeleteSnapshotRequest:
		return own("snapshot", r.GetId(), r.GetMinIndex())
	case *wire.PoolListRequest, *wire.ServiceListRequest:
		return nil // the answer is filtered (filterResponse)
	}
	// A tenant-scoped method whose request this switch does not know: refuse
	// rather than guess (TestScopeCoversTenantMethods keeps it complete).
	return h.refuseScope(ctx, tok, method, errs.New(errs.PermissionDenied, "%s: the head cannot tell which tenant %T reaches; call it with an admin token", name, req))
}

// objectTenant is the tenant of a graph, task (its graph's), sandbox (its
// graph's) or snapshot in v, archived graphs included; found is false when
// v has no such object.
func objectTenant(v *state.View, kind, id string) (tenant string, found bool) {
	graph := func(id string) (string, bool) {
		if g := v.Graph(id); g != nil {
			return g.Tenant, true
		}
		if g := v.Archived(id); g != nil {
			return g.GetTenant(), true
		}
		return "", false
	}
	switch kind {
	case "graph", "sandbox":
		return graph(id)
	case "task":
		if t := v.Task(id); t != nil {
			return t.Tenant, true
		}
		if i := strings.LastIndex(id, "/"); i > 0 {
			return graph(id[:i])
		}
	case "snapshot":
		if s := v.Snapshot(id); s != nil {
			return s.GetTenant(), true
		}
	}
	return "", false
}

// filterResponse narrows the answers that list every tenant's rows to
// tenant's: pre-warm targets and services.
func filterResponse(v *state.View, tenant string, resp any) {
	if tenant == "" {
		return
	}
	switch r := resp.(type) {
	case *wire.PoolListResponse:
		kept := r.Targets[:0]
		for _, t := range r.GetTargets() {
			if t.GetTenant() == tenant {
				kept = append(kept, t)
			}
		}
		r.Targets = kept
	case *wire.ServiceListResponse:
		kept := r.Services[:0]
		for _, s := range r.GetServices() {
			ids := s.GetTaskIds()
			if len(ids) > 0 {
				if t, _ := objectTenant(v, "task", ids[0]); t == tenant {
					kept = append(kept, s)
				}
			}
		}
		r.Services = kept
	}
}
