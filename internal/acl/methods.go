package acl

import (
	"strings"
	"time"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// Scope is what a call reaches, beyond the role it needs.
type Scope uint8

const (
	// ScopeTenant: one tenant's objects (graphs, tasks, logs, artifacts,
	// sandboxes, snapshots, pools). The head binds the call to the token's
	// tenant (an admin token reaches every tenant).
	ScopeTenant Scope = iota + 1
	// ScopeCluster: the cluster's own state, nothing of a tenant's
	// (ClusterStatus, GetLimits): any role, worker tokens included.
	ScopeCluster
	// ScopeAdmin: every tenant at once, or the cluster's settings.
	ScopeAdmin
	// ScopeWorker: a worker's connection.
	ScopeWorker
	// ScopePublic: no token needed (health checks, the schema, the
	// once-only bootstrap).
	ScopePublic
)

// Rule is what one RPC needs.
type Rule struct {
	// Need is the least role that may make the call (0 for ScopePublic).
	Need  wire.TokenRole
	Scope Scope
}

var (
	read   = Rule{wire.TokenRole_TOKEN_ROLE_READ, ScopeTenant}
	submit = Rule{wire.TokenRole_TOKEN_ROLE_SUBMIT, ScopeTenant}
	admin  = Rule{wire.TokenRole_TOKEN_ROLE_ADMIN, ScopeAdmin}
	info   = Rule{wire.TokenRole_TOKEN_ROLE_READ, ScopeCluster}
	worker = Rule{wire.TokenRole_TOKEN_ROLE_WORKER, ScopeWorker}
	public = Rule{0, ScopePublic}
)

// Methods is the rule of every RPC the head serves, by full method name
// (the table test fails when a service gains an RPC without a row). A
// method not in it is refused.
var Methods = map[string]Rule{
	"/megaflow.v1.MegaflowService/SubmitGraph":           submit,
	"/megaflow.v1.MegaflowService/GetGraph":              read,
	"/megaflow.v1.MegaflowService/ListGraphs":            read,
	"/megaflow.v1.MegaflowService/GetTask":               read,
	"/megaflow.v1.MegaflowService/ListTasks":             read,
	"/megaflow.v1.MegaflowService/Watch":                 read,
	"/megaflow.v1.MegaflowService/CancelGraph":           submit,
	"/megaflow.v1.MegaflowService/CancelTask":            submit,
	"/megaflow.v1.MegaflowService/ClusterStatus":         info,
	"/megaflow.v1.MegaflowService/RemoveHead":            admin,
	"/megaflow.v1.MegaflowService/ListWorkers":           admin,
	"/megaflow.v1.MegaflowService/SetQuota":              admin,
	"/megaflow.v1.MegaflowService/GetQuotas":             admin,
	"/megaflow.v1.MegaflowService/SetAdmissionPolicy":    admin,
	"/megaflow.v1.MegaflowService/GetAdmissionPolicy":    read,
	"/megaflow.v1.MegaflowService/ListAdmissionPolicies": admin,
	"/megaflow.v1.MegaflowService/GetLimits":             info,
	"/megaflow.v1.MegaflowService/PoolWarm":              submit,
	"/megaflow.v1.MegaflowService/PoolList":              read,
	"/megaflow.v1.MegaflowService/Logs":                  read,
	"/megaflow.v1.MegaflowService/ArtifactList":          read,
	"/megaflow.v1.MegaflowService/ArtifactGet":           read,
	"/megaflow.v1.MegaflowService/DeleteGraph":           submit,
	"/megaflow.v1.MegaflowService/ListServices":          read,
	"/megaflow.v1.MegaflowService/BootstrapACL":          public,
	"/megaflow.v1.MegaflowService/CreateToken":           admin,
	"/megaflow.v1.MegaflowService/ListTokens":            admin,
	"/megaflow.v1.MegaflowService/RevokeToken":           admin,

	"/megaflow.v1.SandboxService/CreateSandbox":     submit,
	"/megaflow.v1.SandboxService/GetSandbox":        read,
	"/megaflow.v1.SandboxService/ListSandboxes":     read,
	"/megaflow.v1.SandboxService/CloseSandbox":      submit,
	"/megaflow.v1.SandboxService/Exec":              submit,
	"/megaflow.v1.SandboxService/WriteFile":         submit,
	"/megaflow.v1.SandboxService/ReadFile":          submit,
	"/megaflow.v1.SandboxService/SnapshotSandbox":   submit,
	"/megaflow.v1.SandboxService/ListSnapshots":     read,
	"/megaflow.v1.SandboxService/DeleteSnapshot":    submit,
	"/megaflow.v1.SandboxService/SetSandboxTimeout": submit,
	"/megaflow.v1.SandboxService/PauseSandbox":      submit,
	"/megaflow.v1.SandboxService/ResumeSandbox":     submit,
	"/megaflow.v1.SandboxService/UploadArchive":     submit,
	"/megaflow.v1.SandboxService/DownloadArchive":   submit,

	"/megaflow.v1.OperatorService/SnapshotSave":    admin,
	"/megaflow.v1.OperatorService/SnapshotRestore": admin,

	"/megaflow.v1.WorkerService/Connect": worker,

	"/grpc.health.v1.Health/Check":                                   public,
	"/grpc.health.v1.Health/Watch":                                   public,
	"/grpc.health.v1.Health/List":                                    public,
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      public,
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": public,
}

// Refusal reasons: the reason label of megaflow_acl_refusals_total.
const (
	ReasonNoToken  = "no_token"
	ReasonUnknown  = "unknown_token"
	ReasonExpired  = "expired"
	ReasonRole     = "role"
	ReasonTenant   = "tenant"
	ReasonNoRule   = "no_rule"
	ReasonStale    = "stale"
	ReasonBadToken = "malformed"
)

// Refusal is a refused call: an *errs.Error to answer and the reason
// label for the refusal counter.
type Refusal struct {
	Err    *errs.Error
	Reason string
}

// Authorize decides whether tok (nil: the call came without a known
// token; found says whether a token was presented at all) may call method
// at now. It returns the method's rule and nil, or a Refusal whose error
// says what to do: Unauthenticated for a missing, unknown or expired
// token, PermissionDenied for a role below the method's.
func Authorize(tok *wire.Token, presented bool, method string, now time.Time) (Rule, *Refusal) {
	rule, ok := Methods[method]
	if !ok {
		return Rule{}, &Refusal{errs.New(errs.PermissionDenied, "%s has no ACL rule: nobody may call it on a cluster with ACLs on", method), ReasonNoRule}
	}
	if rule.Scope == ScopePublic {
		return rule, nil
	}
	name := shortMethod(method)
	switch {
	case tok == nil && !presented:
		return rule, &Refusal{errs.New(errs.Unauthenticated,
			"%s needs a token of role %s: this cluster has ACLs on; pass one with --token or MEGAFLOW_TOKEN (an admin makes one with megaflow token create)", name, RoleName(rule.Need)), ReasonNoToken}
	case tok == nil:
		return rule, &Refusal{errs.New(errs.Unauthenticated,
			"%s: the token is not one this cluster knows (revoked, mistyped, or from another cluster); ask an admin for a new one (megaflow token create)", name), ReasonUnknown}
	case tok.GetExpireUnixNanos() != 0 && now.UnixNano() >= tok.GetExpireUnixNanos():
		return rule, &Refusal{errs.New(errs.Unauthenticated,
			"%s: your token (accessor %s) expired at %s; ask an admin for a new one (megaflow token create --ttl)", name, Short(tok.GetAccessor()),
			time.Unix(0, tok.GetExpireUnixNanos()).UTC().Format(time.RFC3339)), ReasonExpired}
	case rule.Scope == ScopeCluster && tok.GetRole() == wire.TokenRole_TOKEN_ROLE_WORKER:
		// A worker whose leader went silent asks the heads who leads.
	case !Allows(tok.GetRole(), rule.Need):
		return rule, &Refusal{errs.New(errs.PermissionDenied,
			"%s needs role %s; your token (accessor %s) has role %s", name, RoleName(rule.Need), Short(tok.GetAccessor()), RoleName(tok.GetRole())), ReasonRole}
	}
	return rule, nil
}

// shortMethod is "MegaflowService/SubmitGraph" of a full method name.
func shortMethod(method string) string {
	s := strings.TrimPrefix(method, "/")
	if i := strings.LastIndex(s, "."); i >= 0 && i < strings.Index(s, "/") {
		s = s[i+1:]
	}
	return s
}

// TenantOf is the tenant a token's calls are bound to: its own, or "" (every
// tenant) for an admin token.
func TenantOf(tok *wire.Token) string {
	if tok.GetRole() == wire.TokenRole_TOKEN_ROLE_ADMIN {
		return ""
	}
	return tok.GetTenant()
}
