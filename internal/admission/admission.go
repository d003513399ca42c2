// Package admission owns the container admission policy's pure logic: its
// bounds and normal form, a tenant's effective policy, and the check of a
// task's spec against it (docs/security.md). The head's state store and
// service, and the worker, import it; it does no I/O.
package admission

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// Bounds on a policy's fields.
const (
	// MaxNetworks bounds AdmissionPolicy.allowed_networks.
	MaxNetworks = 32
	// MaxCapabilities bounds AdmissionPolicy.allowed_capabilities (Linux
	// has about 41).
	MaxCapabilities = 64
	// MaxPids bounds AdmissionPolicy.max_pids (the kernel's pid_max limit).
	MaxPids = 1 << 22
	// MinPids is the smallest nonzero max_pids: the container's init
	// (megaflow-init, a Go program) needs about 8 threads, each counted as
	// a process, before the task starts; below it every task fails to
	// start ("newosproc").
	MinPids = 32
	// MaxUserBytes bounds AdmissionPolicy.run_as_user ("4294967294:4294967294"
	// is 21 bytes).
	MaxUserBytes = 32
	// MaxTenantBytes bounds AdmissionPolicy.tenant, as every tenant.
	MaxTenantBytes = spec.MaxIDBytes
)

// AnyNetwork in allowed_networks allows "bridge" and every named network,
// but not "host": the built-in default.
const AnyNetwork = "*"

// Reasons (errs.Error.Reason) of a refusal, one per field; the head counts
// refusals by field (megaflow_admission_refusals_total{field}).
const (
	ReasonNetwork    = "ADMISSION_DENIED_NETWORK"
	ReasonCapability = "ADMISSION_DENIED_CAPABILITY"
	// ReasonRuntime is the worker's refusal of a policy its runtime cannot
	// enforce (the process runtime and run_as_user, read_only_root_fs or
	// max_pids).
	ReasonRuntime = "ADMISSION_DENIED_RUNTIME"
)

// Field names the field of a refusal's reason: "network", "capabilities",
// "runtime", or "" for a reason that is not a refusal.
func Field(reason string) string {
	switch reason {
	case ReasonNetwork:
		return "network"
	case ReasonCapability:
		return "capabilities"
	case ReasonRuntime:
		return "runtime"
	}
	return ""
}

// ACLDefaultUser is the user of the built-in default policy of a cluster
// whose ACLs were bootstrapped (DefaultFor): nobody, 65534:65534.
const ACLDefaultUser = "65534:65534"

// Default returns the built-in default policy of a cluster without ACLs, a
// new value each call: "bridge" and every named network but not "host", no
// added capabilities, the image's user, no process limit, a writable root.
func Default() *wire.AdmissionPolicy {
	return &wire.AdmissionPolicy{AllowedNetworks: []string{AnyNetwork}}
}

// DefaultFor returns the built-in default policy in force, a new value each
// call: Default without ACLs; with them (acl: the table holds the ACL
// bootstrap marker), the confining default of a multi-tenant cluster: no
// network but "none" (a task or service that asks for bridge, or gets it
// by default as a service or a user of services does, is refused until an
// admin allows it), no added capabilities, and every container run as
// ACLDefaultUser (nobody). `megaflow policy set --cluster --allow-network
// bridge --user 0:0` brings bridge and root back.
func DefaultFor(acl bool) *wire.AdmissionPolicy {
	if acl {
		return &wire.AdmissionPolicy{RunAsUser: ACLDefaultUser}
	}
	return Default()
}

// DefaultSource is where the built-in default policy in force comes from:
// ADMISSION_POLICY_SOURCE_DEFAULT_ACL with ACLs (acl), else
// ADMISSION_POLICY_SOURCE_DEFAULT.
func DefaultSource(acl bool) wire.AdmissionPolicySource {
	if acl {
		return wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_DEFAULT_ACL
	}
	return wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_DEFAULT
}

// IsDefault reports whether p (in normal form) allows exactly what the
// built-in default of a cluster without ACLs allows and forces nothing
// (IsDefaultFor(p, false)).
func IsDefault(p *wire.AdmissionPolicy) bool { return IsDefaultFor(p, false) }

// IsDefaultFor reports whether p (in normal form) equals the built-in
// default policy in force (DefaultFor(acl)): such a row is removed.
func IsDefaultFor(p *wire.AdmissionPolicy, acl bool) bool {
	d := DefaultFor(acl)
	return slices.Equal(p.GetAllowedNetworks(), d.GetAllowedNetworks()) && len(p.GetAllowedCapabilities()) == 0 &&
		!p.GetReadOnlyRootFs() && p.GetRunAsUser() == d.GetRunAsUser() && p.GetMaxPids() == 0
}

// Normalize checks p against the bounds and returns its normal form, a new
// value (p is not modified): capabilities canonical (no "CAP_"), both
// lists sorted without duplicates, "none" dropped from the networks (it is
// always allowed). Errors: InvalidArgument naming the field, its value and
// the bound.
func Normalize(p *wire.AdmissionPolicy) (*wire.AdmissionPolicy, error) {
	who := "admission policy of the cluster"
	if p.GetTenant() != "" {
		who = fmt.Sprintf("admission policy of tenant %q", p.GetTenant())
	}
	bad := func(format string, args ...any) error {
		return errs.New(errs.InvalidArgument, "%s: %s", who, fmt.Sprintf(format, args...))
	}
	if n := len(p.GetTenant()); n > MaxTenantBytes {
		return nil, bad("tenant is %d bytes long; the limit is %d", n, MaxTenantBytes)
	}
	if n := len(p.GetAllowedNetworks()); n > MaxNetworks {
		return nil, bad("allowed_networks has %d entries; the limit is %d", n, MaxNetworks)
	}
	if n := len(p.GetAllowedCapabilities()); n > MaxCapabilities {
		return nil, bad("allowed_capabilities has %d entries; the limit is %d", n, MaxCapabilities)
	}
	out := &wire.AdmissionPolicy{Tenant: p.GetTenant(), ReadOnlyRootFs: p.GetReadOnlyRootFs(), RunAsUser: p.GetRunAsUser(),
		MaxPids: p.GetMaxPids(), ModifyIndex: p.GetModifyIndex(), UpdateUnixNanos: p.GetUpdateUnixNanos()}
	for _, n := range p.GetAllowedNetworks() {
		if n == "" {
			return nil, bad("allowed_networks has an empty name; give \"bridge\", \"host\", a network's name or %q", AnyNetwork)
		}
		if n == spec.NetworkNone {
			continue
		}
		if n != AnyNetwork {
			if prob := spec.NetworkProblem(n); prob != "" {
				return nil, bad("allowed_networks: %s; give a network's name, or %q for bridge and every named network", prob, AnyNetwork)
			}
		}
		out.AllowedNetworks = append(out.AllowedNetworks, n)
	}
	for _, c := range p.GetAllowedCapabilities() {
		if prob := spec.CapabilityProblem(c); prob != "" {
			return nil, bad("allowed_capabilities: %s", prob)
		}
		name := spec.CanonicalCapability(c)
		if name == "ALL" {
			return nil, bad("allowed_capabilities: %q would let the tenant's tasks ask for every capability at once; list the capabilities they need", c)
		}
		if !slices.Contains(linuxCapabilities, name) {
			return nil, bad("allowed_capabilities: %q is not a Linux capability (capabilities(7): e.g. NET_ADMIN, SYS_PTRACE)", c)
		}
		out.AllowedCapabilities = append(out.AllowedCapabilities, name)
	}
	slices.Sort(out.AllowedNetworks)
	out.AllowedNetworks = slices.Compact(out.AllowedNetworks)
	slices.Sort(out.AllowedCapabilities)
	out.AllowedCapabilities = slices.Compact(out.AllowedCapabilities)
	if err := CheckUser(out.RunAsUser); err != nil {
		return nil, bad("%v", err)
	}
	if m := out.MaxPids; m < 0 || m > MaxPids || m > 0 && m < MinPids {
		return nil, bad("max_pids %d is out of range; give 0 (the worker's default) or %d to %d (the container's init needs a few)", m, MinPids, MaxPids)
	}
	return out, nil
}

// CheckUser checks a run_as_user value: "" (the image's user), "uid" or
// "uid:gid", each a decimal number below 4294967295 ("0" and "0:0" are
// root, whatever the image's user). It returns an error
// saying what is wrong, or nil.
func CheckUser(u string) error {
	if u == "" {
		return nil
	}
	if len(u) > MaxUserBytes {
		return fmt.Errorf("run_as_user is %d bytes long; the limit is %d", len(u), MaxUserBytes)
	}
	uid, gid, hasGid := strings.Cut(u, ":")
	ids := []string{uid}
	if hasGid {
		ids = append(ids, gid)
	}
	for _, id := range ids {
		n, err := strconv.ParseUint(id, 10, 32)
		if err != nil || n == 1<<32-1 || id != strconv.FormatUint(n, 10) {
			return fmt.Errorf("run_as_user %q is not \"uid\" or \"uid:gid\" in decimal (e.g. \"65534:65534\"); user names are not accepted", u)
		}
	}
	return nil
}

// Effective returns the policy in force for a tenant: its own row (tenant,
// nil if none), else the cluster row (cluster, nil if none), else the
// built-in default in force (DefaultFor(acl); acl: the cluster's ACLs were
// bootstrapped), with where it comes from. The rows are returned as given,
// not copied.
func Effective(tenant, cluster *wire.AdmissionPolicy, acl bool) (*wire.AdmissionPolicy, wire.AdmissionPolicySource) {
	switch {
	case tenant != nil:
		return tenant, wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT
	case cluster != nil:
		return cluster, wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_CLUSTER
	}
	return DefaultFor(acl), DefaultSource(acl)
}

// SourceName names where a policy comes from in a message: "tenant
// team-a's policy", "the cluster policy", "the built-in default policy",
// "the built-in default policy for clusters with ACLs".
func SourceName(src wire.AdmissionPolicySource, tenant string) string {
	switch src {
	case wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT:
		return fmt.Sprintf("tenant %s's policy", tenant)
	case wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_CLUSTER:
		return "the cluster policy"
	case wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_DEFAULT_ACL:
		return "the built-in default policy for clusters with ACLs"
	}
	return "the built-in default policy"
}

// AllowsNetwork reports whether p lets a task ask for network n ("" and
// "none" always).
func AllowsNetwork(p *wire.AdmissionPolicy, n string) bool {
	if n == "" || n == spec.NetworkNone {
		return true
	}
	allowed := p.GetAllowedNetworks()
	return slices.Contains(allowed, n) || n != "host" && slices.Contains(allowed, AnyNetwork)
}

// Check returns nil if task (its name, for messages) of tenant may run
// under policy p, which comes from src; else a PermissionDenied *errs.Error
// whose reason names the field (ReasonNetwork, ReasonCapability) and whose
// message names the task, the first field and value refused and the
// policy, and gives the command that allows everything the task asks
// for. It reads the spec's network and capabilities (canonical or with
// "CAP_").
func Check(task string, t *wire.TaskSpec, tenant string, p *wire.AdmissionPolicy, src wire.AdmissionPolicySource) *errs.Error {
	reason, field, value, refused := problem(t, p)
	if !refused {
		return nil
	}
	return refuse(reason, task, field, value, tenant, p, src, widen(clone(p), t), 1)
}

// CheckGraph checks every task of a graph of tenant (Check) and returns
// the first task's refusal, with a command that allows every refused task
// at once (and how many there are), or nil. Task names are the graph's
// ("<graph id>/<name>").
func CheckGraph(graphID, tenant string, tasks []*wire.TaskSpec, p *wire.AdmissionPolicy, src wire.AdmissionPolicySource) *errs.Error {
	var reason, field, value, first string
	n := 0
	fix := clone(p)
	for _, t := range tasks {
		r, f, v, refused := problem(t, p)
		if !refused {
			continue
		}
		if n == 0 {
			reason, field, value, first = r, f, v, graphID+"/"+t.GetName()
		}
		n++
		fix = widen(fix, t)
	}
	if n == 0 {
		return nil
	}
	return refuse(reason, first, field, value, tenant, p, src, fix, n)
}

// problem returns the first thing t asks for beyond p: the refusal's
// reason, the field and the value; refused is false when t is within p.
func problem(t *wire.TaskSpec, p *wire.AdmissionPolicy) (reason, field, value string, refused bool) {
	if n := t.GetNetwork(); !AllowsNetwork(p, n) {
		return ReasonNetwork, "network", n, true
	}
	for _, c := range t.GetCapabilities() {
		if c = spec.CanonicalCapability(c); !slices.Contains(p.GetAllowedCapabilities(), c) {
			return ReasonCapability, "capabilities", c, true
		}
	}
	return "", "", "", false
}

// widen returns fix (modified) allowing also everything t asks for, its
// lists sorted without duplicates.
func widen(fix *wire.AdmissionPolicy, t *wire.TaskSpec) *wire.AdmissionPolicy {
	if n := t.GetNetwork(); !AllowsNetwork(fix, n) {
		fix.AllowedNetworks = append(fix.AllowedNetworks, n)
	}
	for _, c := range t.GetCapabilities() {
		fix.AllowedCapabilities = append(fix.AllowedCapabilities, spec.CanonicalCapability(c))
	}
	slices.Sort(fix.AllowedNetworks)
	fix.AllowedNetworks = slices.Compact(fix.AllowedNetworks)
	slices.Sort(fix.AllowedCapabilities)
	fix.AllowedCapabilities = slices.Compact(fix.AllowedCapabilities)
	return fix
}

// refuse builds the refusal of task's field value under p (from src),
// whose hint sets fix; n > 1 says that many tasks are refused and that
// the hint allows them all.
func refuse(reason, task, field, value, tenant string, p *wire.AdmissionPolicy, src wire.AdmissionPolicySource, fix *wire.AdmissionPolicy, n int) *errs.Error {
	allowed := "nothing"
	switch field {
	case "network":
		names := []string{spec.NetworkNone}
		for _, n := range p.GetAllowedNetworks() {
			if n == AnyNetwork {
				n = "bridge and any named network (\"*\")"
			}
			names = append(names, n)
		}
		allowed = strings.Join(names, ", ")
	case "capabilities":
		if len(p.GetAllowedCapabilities()) > 0 {
			allowed = strings.Join(p.GetAllowedCapabilities(), ", ")
		}
	}
	what := "it"
	if n > 1 {
		what = fmt.Sprintf("it and the graph's %d other refused tasks", n-1)
	}
	e := errs.New(errs.PermissionDenied,
		"task %q: %s %q is not allowed by %s (allowed: %s); an admin can allow %s: megaflow policy set %s%s",
		task, field, value, SourceName(src, tenant), allowed, what, tenant, Flags(fix))
	e.Reason = reason
	return e
}

func clone(p *wire.AdmissionPolicy) *wire.AdmissionPolicy {
	return &wire.AdmissionPolicy{Tenant: p.GetTenant(), AllowedNetworks: slices.Clone(p.GetAllowedNetworks()),
		AllowedCapabilities: slices.Clone(p.GetAllowedCapabilities()), ReadOnlyRootFs: p.GetReadOnlyRootFs(),
		RunAsUser: p.GetRunAsUser(), MaxPids: p.GetMaxPids()}
}

// Flags returns the `megaflow policy set` flags that set p, each with a
// leading space (" --allow-network '*' --allow-network host"); "" for a
// policy that allows no network but "none" and forces nothing.
func Flags(p *wire.AdmissionPolicy) string {
	var b strings.Builder
	for _, n := range p.GetAllowedNetworks() {
		if n == AnyNetwork {
			n = "'*'"
		}
		b.WriteString(" --allow-network " + n)
	}
	for _, c := range p.GetAllowedCapabilities() {
		b.WriteString(" --allow-cap " + c)
	}
	if p.GetReadOnlyRootFs() {
		b.WriteString(" --read-only-root")
	}
	if u := p.GetRunAsUser(); u != "" {
		b.WriteString(" --user " + u)
	}
	if n := p.GetMaxPids(); n > 0 {
		b.WriteString(" --max-pids " + strconv.FormatInt(n, 10))
	}
	return b.String()
}

// Confines reports whether p forces something on the container beyond
// what the spec asks: a user, a read-only root or a process limit. A
// runtime that cannot do these (the process runtime) refuses a task whose
// policy confines it.
func Confines(p *wire.AdmissionPolicy) bool {
	return p.GetRunAsUser() != "" || p.GetReadOnlyRootFs() || p.GetMaxPids() > 0
}

// linuxCapabilities are the capabilities of Linux 5.9 and later
// (capabilities(7), include/uapi/linux/capability.h), without "CAP_": what
// a policy may allow. An unknown name would pass the head and fail at the
// engine ("unknown capability").
var linuxCapabilities = []string{
	"AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF", "CHECKPOINT_RESTORE", "CHOWN",
	"DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE",
	"LINUX_IMMUTABLE", "MAC_ADMIN", "MAC_OVERRIDE", "MKNOD", "NET_ADMIN", "NET_BIND_SERVICE", "NET_BROADCAST",
	"NET_RAW", "PERFMON", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_ADMIN", "SYS_BOOT", "SYS_CHROOT",
	"SYS_MODULE", "SYS_NICE", "SYS_PACCT", "SYS_PTRACE", "SYS_RAWIO", "SYS_RESOURCE", "SYS_TIME",
	"SYS_TTY_CONFIG", "SYSLOG", "WAKE_ALARM",
}
