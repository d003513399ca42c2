package spec

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/wire"
)

// Normalize returns a deep copy of g with every default filled in and every
// list whose order carries no meaning sorted, so that equivalent specs become
// equal messages (and get equal digests). g is not modified; nil gives the
// normalized empty spec. Normalize is idempotent, accepts invalid specs, and
// never changes whether a spec is valid: it only rewrites a value into an
// equivalent one, so duplicates are kept (Validate reports them) and unknown
// fields are kept (Validate reports them too).
//
// The defaults, for the graph:
//   - tenant "" becomes DefaultTenant ("default").
//
// For each task (the order of tasks is kept: it is the FIFO order of tasks of
// equal priority within a queue):
//   - kind TASK_KIND_UNSPECIFIED becomes TASK_KIND_BATCH;
//   - mode EXECUTION_MODE_UNSPECIFIED becomes EXECUTION_MODE_EPHEMERAL;
//   - network "" becomes "bridge" for a service task and for a task that
//     names services in uses_services (a service's port must be published,
//     and a client of services must reach their endpoints), "none" for
//     every other task;
//   - priority 0 becomes the graph's priority (the inheritance the wire API
//     defines), so a task's priority is its effective priority;
//   - a missing resources message becomes an empty one (asks for nothing);
//   - a service spec's restart_policy "" becomes "always";
//   - capabilities lose their "CAP_" prefix ("CAP_NET_ADMIN" becomes
//     "NET_ADMIN", the form Docker also accepts);
//   - depends_on, uses_services, capabilities and output_paths are sorted
//     (each is a set);
//   - a nil entry in tasks becomes an empty task (still invalid).
//
// Kept as given: ids and names, image, command (argv order matters), env,
// node_selector and labels (maps: the deterministic encoding sorts them),
// type ("" is the default queue), session, working_dir, timeouts, retries,
// service port and probes.
func Normalize(g *wire.GraphSpec) *wire.GraphSpec {
	var n *wire.GraphSpec
	if g == nil {
		n = &wire.GraphSpec{}
	} else {
		n = proto.Clone(g).(*wire.GraphSpec)
	}
	if n.Tenant == "" {
		n.Tenant = DefaultTenant
	}
	for i, t := range n.Tasks {
		if t == nil {
			t = &wire.TaskSpec{}
			n.Tasks[i] = t
		}
		normalizeTask(t, n.Priority)
	}
	return n
}

// normalizeTask fills in t's defaults in place; graphPriority is inherited by
// a task priority of 0.
func normalizeTask(t *wire.TaskSpec, graphPriority int32) {
	if t.Kind == wire.TaskKind_TASK_KIND_UNSPECIFIED {
		t.Kind = wire.TaskKind_TASK_KIND_BATCH
	}
	if t.Mode == wire.ExecutionMode_EXECUTION_MODE_UNSPECIFIED {
		t.Mode = wire.ExecutionMode_EXECUTION_MODE_EPHEMERAL
	}
	if t.Network == "" {
		t.Network = defaultNetwork(t)
	}
	if t.Priority == 0 {
		t.Priority = graphPriority
	}
	if t.Resources == nil {
		t.Resources = &wire.Resources{}
	}
	if t.Service != nil && t.Service.RestartPolicy == "" {
		t.Service.RestartPolicy = RestartAlways
	}
	for i, c := range t.Capabilities {
		t.Capabilities[i] = canonicalCapability(c)
	}
	slices.Sort(t.DependsOn)
	slices.Sort(t.UsesServices)
	slices.Sort(t.Capabilities)
	slices.Sort(t.OutputPaths)
}

// Service restart policies. The empty policy means RestartAlways.
const (
	RestartAlways    = "always"
	RestartOnFailure = "on-failure"
	RestartNever     = "never"
)

// Container networks a task gets when it names none.
const (
	// NetworkNone is the default of a batch task that uses no services: no
	// network at all.
	NetworkNone = "none"
	// NetworkBridge is the default of a service task and of a task that
	// names services in uses_services: the engine's default bridge, which
	// publishes a service's port on the worker's host and reaches the
	// endpoints of services on other workers.
	NetworkBridge = "bridge"
)

// defaultNetwork is the network of task t (kind already defaulted) when it
// names none.
func defaultNetwork(t *wire.TaskSpec) string {
	if t.Kind == wire.TaskKind_TASK_KIND_SERVICE || len(t.UsesServices) > 0 {
		return NetworkBridge
	}
	return NetworkNone
}

// canonicalCapability strips every leading "CAP_" from a capability name,
// so that "CAP_NET_ADMIN" and "NET_ADMIN" compare equal. Stripping all of
// them, not one, keeps Normalize idempotent.
func canonicalCapability(c string) string {
	for strings.HasPrefix(c, "CAP_") {
		c = c[len("CAP_"):]
	}
	return c
}
