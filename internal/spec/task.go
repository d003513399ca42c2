package spec

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/wire"
)

// checkTask checks task i's fields in the order Validate documents.
func (v *validator) checkTask(i int, t *wire.TaskSpec) error {
	lim := v.lim
	if t == nil {
		return v.taskErr(i, "", "is nil; remove the entry or fill it in")
	}
	if p := unknownProblem(t); p != "" {
		return v.taskErr(i, "", "%s", p)
	}
	if t.Resources != nil {
		if p := unknownProblem(t.Resources); p != "" {
			return v.taskErr(i, "resources", "%s", p)
		}
	}
	if t.Service != nil {
		if p := unknownProblem(t.Service); p != "" {
			return v.taskErr(i, "service", "%s", p)
		}
	}

	// name
	if p := identProblem(t.Name, lim.MaxNameLen); p != "" {
		return v.taskErr(i, "name", "%s", p)
	}
	if j := v.index[t.Name]; j != i {
		return v.taskErr(i, "name", "%q is also the name of tasks[%d]; task names must be unique within a graph", t.Name, j)
	}

	// image and command: a plain process needs no image (imageOptional)
	if p := imageProblem(t.Image); p != "" && (t.Image != "" || !imageOptional(t)) {
		switch {
		case t.Image != "", t.Runtime == "docker":
		case t.Runtime == "process":
			p = `is empty; a persistent task, a session or a sandbox runs in a container even on a process-runtime worker: name its image, e.g. "python:3.12-slim"`
		case !validRuntime(t.Runtime):
			return v.taskErr(i, "runtime", "%s", runtimeProblem(t.Runtime)) // the misspelt runtime first: the image hint names a runtime
		default:
			p += `, or set runtime: process to run the command as a plain process without an image (on process-runtime workers only)`
		}
		return v.taskErr(i, "image", "%s", p)
	}
	switch n := len(t.Command); {
	case n == 0:
		return v.taskErr(i, "command", `is empty; give the program and its arguments, e.g. ["python", "rollout.py"]`)
	case n > lim.MaxCommandArgs:
		return v.taskErr(i, "command", "has %d elements; the limit is %d; pass long inputs in a file", n, lim.MaxCommandArgs)
	case t.Command[0] == "":
		return v.taskErr(i, "command[0]", `the program is empty; give the program to run, e.g. "python"`)
	}
	for k, a := range t.Command {
		if p := argProblem(a); p != "" {
			return v.taskErr(i, fmt.Sprintf("command[%d]", k), "%s", p)
		}
	}

	if err := v.checkEnv(i, t.Env); err != nil {
		return err
	}
	if err := v.checkResources(i, t.Resources); err != nil {
		return err
	}
	if err := v.checkDependsOn(i, t); err != nil {
		return err
	}

	// queueing
	if p := typeProblem(t.Type); p != "" {
		return v.taskErr(i, "type", "%s", p)
	}
	if t.Priority != 0 {
		if p := priorityProblem(t.Priority); p != "" {
			return v.taskErr(i, "priority", "%s; or 0 to inherit the graph's", p)
		}
	}
	switch r := t.MaxRetries; {
	case r < 0:
		return v.taskErr(i, "max_retries", "%d is negative; give 0 to %d", r, lim.MaxRetries)
	case r > lim.MaxRetries:
		return v.taskErr(i, "max_retries", "%d is more than %d; give 0 to %d", r, lim.MaxRetries, lim.MaxRetries)
	}
	if p := secondsProblem(t.TimeoutSeconds, lim.MaxTaskTimeout, "no timeout"); p != "" {
		return v.taskErr(i, "timeout_seconds", "%s", p)
	}

	// kind, mode, session, service
	switch t.Kind {
	case wire.TaskKind_TASK_KIND_UNSPECIFIED, wire.TaskKind_TASK_KIND_BATCH, wire.TaskKind_TASK_KIND_SERVICE:
	default:
		return v.taskErr(i, "kind", "%d is not a task kind; use TASK_KIND_BATCH (the default) or TASK_KIND_SERVICE", int32(t.Kind))
	}
	switch t.Mode {
	case wire.ExecutionMode_EXECUTION_MODE_UNSPECIFIED, wire.ExecutionMode_EXECUTION_MODE_EPHEMERAL, wire.ExecutionMode_EXECUTION_MODE_PERSISTENT:
	default:
		return v.taskErr(i, "mode", "%d is not an execution mode; use EXECUTION_MODE_EPHEMERAL (the default) or EXECUTION_MODE_PERSISTENT", int32(t.Mode))
	}
	if t.Session != "" {
		if p := identProblem(t.Session, lim.MaxNameLen); p != "" {
			return v.taskErr(i, "session", "%s", p)
		}
		if t.Mode != wire.ExecutionMode_EXECUTION_MODE_PERSISTENT {
			return v.taskErr(i, "session", "%q needs mode EXECUTION_MODE_PERSISTENT (only persistent tasks share a warm container); set mode or clear session", t.Session)
		}
	}
	if t.Gang != "" {
		if p := identProblem(t.Gang, lim.MaxNameLen); p != "" {
			return v.taskErr(i, "gang", "%s", p)
		}
		if t.Session != "" {
			return v.taskErr(i, "gang", "%q with session %q: a gang's tasks run each on its own worker, a session's in one container; use one or the other", t.Gang, t.Session)
		}
		if t.Kind == wire.TaskKind_TASK_KIND_SERVICE {
			return v.taskErr(i, "gang", "%q on a service task: gangs are for batch tasks (multi-node training); run each server as its own service task", t.Gang)
		}
	}
	if err := v.checkService(i, t); err != nil {
		return err
	}
	for _, s := range t.UsesServices {
		if p := serviceNameProblem(s, lim.MaxNameLen); p != "" {
			return v.taskErr(i, "uses_services", "%s", p)
		}
	}
	if a, _ := firstDuplicate(t.UsesServices, nil); a >= 0 {
		return v.taskErr(i, "uses_services", "%q is listed twice; list each service once", t.UsesServices[a])
	}

	// container
	if !validRuntime(t.Runtime) {
		return v.taskErr(i, "runtime", "%s", runtimeProblem(t.Runtime))
	}
	if p := networkProblem(t.Network); p != "" {
		return v.taskErr(i, "network", "%s", p)
	}
	if p := absPathProblem(t.WorkingDir); p != "" {
		return v.taskErr(i, "working_dir", "%s", p)
	}
	if n := len(t.OutputPaths); n > lim.MaxOutputPaths {
		return v.taskErr(i, "output_paths", "lists %d paths; the limit is %d; collect a directory instead", n, lim.MaxOutputPaths)
	}
	for _, p := range t.OutputPaths {
		if q := relPathProblem(p); q != "" {
			return v.taskErr(i, "output_paths", "%s", q)
		}
	}
	if a, _ := firstDuplicate(t.OutputPaths, nil); a >= 0 {
		return v.taskErr(i, "output_paths", "%q is listed twice; list each path once", t.OutputPaths[a])
	}
	if field, p := labelsProblem("node_selector", t.NodeSelector, lim.MaxLabels); p != "" {
		return v.taskErr(i, field, "%s", p)
	}
	for _, c := range t.Capabilities {
		if p := capabilityProblem(c); p != "" {
			return v.taskErr(i, "capabilities", "%s", p)
		}
	}
	if a, b := firstDuplicate(t.Capabilities, canonicalCapability); a >= 0 {
		if t.Capabilities[a] == t.Capabilities[b] {
			return v.taskErr(i, "capabilities", "%q is listed twice; list each capability once", t.Capabilities[a])
		}
		return v.taskErr(i, "capabilities", "%q and %q name the same capability; list it once", t.Capabilities[a], t.Capabilities[b])
	}

	// size, last: the other checks name the culprit better
	if size := v.taskSize(t); size > lim.MaxTaskSpecBytes {
		return v.taskErr(i, "", "the spec encodes to %d bytes (depends_on not counted); the limit is %d; move large inputs (prompts, data) into files or artifacts",
			size, lim.MaxTaskSpecBytes)
	}
	return nil
}

// normalizeGrowth bounds how many bytes Normalize can add to the encoding
// of one task: kind, mode, network, priority, resources and a restart policy.
const normalizeGrowth = 64

// taskSize returns the encoded size of t once normalized, without its
// depends_on list. Sizes are those of the normalized form so that Validate
// gives the same verdict before and after Normalize; t is normalized (on a
// copy) only when the difference could matter.
func (v *validator) taskSize(t *wire.TaskSpec) int {
	size := proto.Size(t)
	if size > v.lim.MaxTaskSpecBytes-normalizeGrowth {
		c := proto.Clone(t).(*wire.TaskSpec)
		normalizeTask(c, v.g.Priority)
		size = proto.Size(c)
	}
	for _, d := range t.DependsOn {
		size -= protowire.SizeTag(6) + protowire.SizeBytes(len(d))
	}
	return size
}

// graphSize returns the encoded size of the graph once normalized; see
// taskSize.
func (v *validator) graphSize() int {
	size := proto.Size(v.g)
	if size > v.lim.MaxGraphSpecBytes-normalizeGrowth*(len(v.g.Tasks)+1) {
		size = proto.Size(Normalize(v.g))
	}
	return size
}

func (v *validator) checkEnv(i int, env map[string]string) error {
	if n := len(env); n > v.lim.MaxEnvEntries {
		return v.taskErr(i, "env", "sets %d variables; the limit is %d; pass configuration in a file", n, v.lim.MaxEnvEntries)
	}
	if len(env) == 0 {
		return nil
	}
	total := 0
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if p := envKeyProblem(k); p != "" {
			return v.taskErr(i, "env", "%s", p)
		}
		if p := argProblem(env[k]); p != "" {
			return v.taskErr(i, fmt.Sprintf("env[%q]", k), "%s", p)
		}
		total += len(k) + len(env[k])
	}
	if total > v.lim.MaxEnvBytes {
		return v.taskErr(i, "env", "holds %d bytes of names and values; the limit is %d; pass large values in a file", total, v.lim.MaxEnvBytes)
	}
	return nil
}

func (v *validator) checkResources(i int, r *wire.Resources) error {
	switch {
	case r.GetCpuMillis() < 0:
		return v.taskErr(i, "resources.cpu_millis", "%d is negative; give millicores >= 0 (1000 = one core)", r.GetCpuMillis())
	case r.GetMemoryBytes() < 0:
		return v.taskErr(i, "resources.memory_bytes", "%d is negative; give bytes >= 0", r.GetMemoryBytes())
	case r.GetGpus() < 0:
		return v.taskErr(i, "resources.gpus", "%d is negative; give a whole number of GPUs >= 0", r.GetGpus())
	case r.GetGpuMemoryBytes() < 0:
		return v.taskErr(i, "resources.gpu_memory_bytes", "%d is negative; give bytes per GPU >= 0 (0: any)", r.GetGpuMemoryBytes())
	}
	if p := gpuModelProblem(r.GetGpuModel()); p != "" {
		return v.taskErr(i, "resources.gpu_model", "%s", p)
	}
	if r.GetGpus() == 0 {
		if r.GetGpuModel() != "" {
			return v.taskErr(i, "resources.gpu_model", "%q is set but resources.gpus is 0; ask for at least one GPU or clear gpu_model", r.GetGpuModel())
		}
		if r.GetGpuMemoryBytes() != 0 {
			return v.taskErr(i, "resources.gpu_memory_bytes", "%d is set but resources.gpus is 0; ask for at least one GPU or clear gpu_memory_bytes", r.GetGpuMemoryBytes())
		}
	}

	m := v.lim.MaxWorker
	if m == nil || m.CpuMillis == 0 && m.MemoryBytes == 0 && m.Gpus == 0 {
		return nil
	}
	if c := r.GetCpuMillis(); c > m.CpuMillis {
		return v.taskErr(i, "resources.cpu_millis", "needs %s but the largest worker has %s; ask for at most that or add a larger worker",
			formatCPU(c), formatCPU(m.CpuMillis))
	}
	if b := r.GetMemoryBytes(); b > m.MemoryBytes {
		return v.taskErr(i, "resources.memory_bytes", "needs %s of memory but the largest worker has %s; ask for at most that or add a larger worker",
			formatBytes(b), formatBytes(m.MemoryBytes))
	}
	if n := r.GetGpus(); n > m.Gpus {
		return v.taskErr(i, "resources.gpus", "needs %d GPUs but the largest worker has %d; ask for at most that or add a larger worker", n, m.Gpus)
	}
	if b := r.GetGpuMemoryBytes(); m.GpuMemoryBytes > 0 && b > m.GpuMemoryBytes {
		return v.taskErr(i, "resources.gpu_memory_bytes", "needs GPUs with %s of memory each but the largest worker's GPUs have %s; ask for at most that or add a larger worker",
			formatBytes(b), formatBytes(m.GpuMemoryBytes))
	}
	return nil
}

func (v *validator) checkDependsOn(i int, t *wire.TaskSpec) error {
	for _, d := range t.DependsOn {
		if d == "" {
			return v.taskErr(i, "depends_on", "lists an empty name; list the names of tasks of this graph")
		}
		j, ok := v.index[d]
		if !ok {
			return v.taskErr(i, "depends_on", "unknown task %.140q %s", d, v.suggest(i, d))
		}
		if j == i {
			return v.taskErr(i, "depends_on", "%q is the task itself; a task cannot wait for itself", d)
		}
		if v.seen[j] == i+1 {
			return v.taskErr(i, "depends_on", "%q is listed twice; list each dependency once", d)
		}
		if o := v.g.Tasks[j]; o.GetKind() == wire.TaskKind_TASK_KIND_SERVICE {
			return v.taskErr(i, "depends_on", "%q is a service task, which never ends to unblock its dependents; name its service %q in uses_services instead (the task then waits for a ready endpoint)",
				d, o.GetService().GetName())
		}
		v.seen[j] = i + 1
		v.depIdx = append(v.depIdx, j)
	}
	v.depOff = append(v.depOff, len(v.depIdx))
	return nil
}

func (v *validator) checkService(i int, t *wire.TaskSpec) error {
	s := t.Service
	if t.Kind != wire.TaskKind_TASK_KIND_SERVICE {
		if s != nil {
			return v.taskErr(i, "service", "is set on a batch task; set kind to TASK_KIND_SERVICE or remove service")
		}
		return nil
	}
	if s == nil {
		return v.taskErr(i, "service", "is missing; a TASK_KIND_SERVICE task needs service.name (the name its endpoint is published under, e.g. {name: model/qwen-7b}); service.port is optional (the worker gives a port in $PORT)")
	}
	if p := serviceNameProblem(s.Name, v.lim.MaxNameLen); p != "" {
		return v.taskErr(i, "service.name", "%s", p)
	}
	if s.Port < 0 || s.Port > 65535 {
		return v.taskErr(i, "service.port", "%d is out of range; give 1 to 65535, or 0 to let the worker pick one", s.Port)
	}
	switch s.RestartPolicy {
	case "", RestartAlways, RestartOnFailure, RestartNever:
	default:
		return v.taskErr(i, "service.restart_policy", "%q is not a restart policy; use %q (the default), %q or %q",
			s.RestartPolicy, RestartAlways, RestartOnFailure, RestartNever)
	}
	if p := readinessPathProblem(s.ReadinessHttpPath); p != "" {
		return v.taskErr(i, "service.readiness_http_path", "%s", p)
	}
	if s.TcpProbe && s.ReadinessHttpPath != "" {
		return v.taskErr(i, "service.tcp_probe", "is set together with readiness_http_path %q; probe by HTTP or by TCP, not both", s.ReadinessHttpPath)
	}
	if t.Mode == wire.ExecutionMode_EXECUTION_MODE_PERSISTENT {
		return v.taskErr(i, "mode", "is EXECUTION_MODE_PERSISTENT on a service task; a service runs in its own container: remove mode")
	}
	if slices.Contains(t.UsesServices, s.Name) {
		return v.taskErr(i, "uses_services", "names %q, the task's own service; it would wait for itself forever", s.Name)
	}
	return nil
}

// imageOptional reports whether t may leave its image out: a task that
// runs only on process-runtime workers (runtime "process"), which start
// its command as a plain process and have no images, unless it asks for
// a warm container (persistent mode, a session) or is a sandbox, both of
// which are containers.
func imageOptional(t *wire.TaskSpec) bool {
	return t.Runtime == "process" && t.Mode != wire.ExecutionMode_EXECUTION_MODE_PERSISTENT && t.Session == "" && t.Sandbox == nil
}

// validRuntime reports whether r is a runtime a task may require.
func validRuntime(r string) bool { return r == "" || r == "docker" || r == "process" }

// runtimeProblem says why r is not a runtime and what to give instead.
func runtimeProblem(r string) string {
	return fmt.Sprintf("%q is not a runtime; use \"docker\" (containers: never a process worker), \"process\", or leave it empty for any worker", r)
}
