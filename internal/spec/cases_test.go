package spec

import (
	"fmt"
	"strings"
	"time"

	"github.com/megaflow/megaflow/internal/wire"
)

type invalidCase struct {
	name string
	// mut turns base() into the invalid graph; nil graph when it returns nil.
	mut func(g *wire.GraphSpec) *wire.GraphSpec
	// lim adjusts DefaultLimits().
	lim  func(l *Limits)
	want string
}

// t1 applies f to task name of g and returns g.
func t1(name string, f func(t *wire.TaskSpec)) func(g *wire.GraphSpec) *wire.GraphSpec {
	return func(g *wire.GraphSpec) *wire.GraphSpec { f(named(g, name)); return g }
}

// gr applies f to g and returns it.
func gr(f func(g *wire.GraphSpec)) func(g *wire.GraphSpec) *wire.GraphSpec {
	return func(g *wire.GraphSpec) *wire.GraphSpec { f(g); return g }
}

func withService(t *wire.TaskSpec, f func(s *wire.ServiceSpec)) {
	t.Kind = wire.TaskKind_TASK_KIND_SERVICE
	t.Service = &wire.ServiceSpec{Name: "model/qwen-7b", Port: 8000}
	f(t.Service)
}

var bigWorker = &wire.Resources{CpuMillis: 16000, MemoryBytes: 16 * gib, Gpus: 8, GpuMemoryBytes: 80 * gib}

var invalidCases = []invalidCase{
	// The graph's own fields.
	{name: "nil graph", mut: func(*wire.GraphSpec) *wire.GraphSpec { return nil },
		want: "graph: no spec given"},
	{name: "graph unknown field", mut: gr(func(g *wire.GraphSpec) { g.ProtoReflect().SetUnknown(unknownField(99)) }),
		want: `graph "step-42": field number 99 is unknown to this version of MegaFlow`},
	{name: "id slash", mut: gr(func(g *wire.GraphSpec) { g.Id = "a/b" }),
		want: `graph "a/b": id: "a/b" has '/' at byte 1; use only ASCII letters, digits, '.', '_' and '-'; or leave it empty`},
	{name: "id leading dot", mut: gr(func(g *wire.GraphSpec) { g.Id = ".." }),
		want: `graph "..": id: ".." starts with '.'`},
	{name: "id leading dash", mut: gr(func(g *wire.GraphSpec) { g.Id = "-rf" }),
		want: `id: "-rf" starts with '-'`},
	{name: "id too long", mut: gr(func(g *wire.GraphSpec) { g.Id = strings.Repeat("a", 129) }),
		want: `id: is 129 bytes long; the limit is 128`},
	{name: "id non-ASCII", mut: gr(func(g *wire.GraphSpec) { g.Id = "schritt-ü" }),
		want: `id: "schritt-ü" has 'ü' at byte 8`},
	{name: "tenant charset", mut: gr(func(g *wire.GraphSpec) { g.Tenant = "team a" }),
		want: `graph "step-42": tenant: "team a" has ' ' at byte 4`},
	{name: "name control character", mut: gr(func(g *wire.GraphSpec) { g.Name = "sweep\n" }),
		want: `graph "step-42": name: "sweep\n" has '\n' at byte 5`},
	{name: "name invalid UTF-8", mut: gr(func(g *wire.GraphSpec) { g.Name = "a\xffb" }),
		want: `name: "a\xffb" has invalid UTF-8 at byte 1`},
	{name: "name too long", mut: gr(func(g *wire.GraphSpec) { g.Name = strings.Repeat("n", 257) }),
		want: `name: is 257 bytes long; the limit is 256`},
	{name: "graph priority high", mut: gr(func(g *wire.GraphSpec) { g.Priority = 5000 }),
		want: `graph "step-42": priority: 5000 is out of range; give -1000 to 1000`},
	{name: "graph priority low", mut: gr(func(g *wire.GraphSpec) { g.Priority = -1001 }),
		want: `priority: -1001 is out of range`},
	{name: "deadline negative", mut: gr(func(g *wire.GraphSpec) { g.DeadlineSeconds = -1 }),
		want: `graph "step-42": deadline_seconds: -1 is negative; give seconds from 0 (no deadline) to 2592000`},
	{name: "deadline too long", mut: gr(func(g *wire.GraphSpec) { g.DeadlineSeconds = 31 * 86400 }),
		want: `deadline_seconds: 2678400 is more than 30 days (2592000 seconds)`},
	{name: "deadline over custom limit", mut: gr(func(g *wire.GraphSpec) { g.DeadlineSeconds = 7201 }),
		lim: func(l *Limits) { l.MaxGraphDeadline = 2 * time.Hour }, want: `deadline_seconds: 7201 is more than 2 hours (7200 seconds)`},
	{name: "too many labels", mut: gr(func(g *wire.GraphSpec) { g.Labels = map[string]string{"a": "", "b": "", "c": ""} }),
		lim: func(l *Limits) { l.MaxLabels = 2 }, want: `graph "step-42": labels: has 3 entries; the limit is 2`},
	{name: "label key charset", mut: gr(func(g *wire.GraphSpec) { g.Labels = map[string]string{"ok": "1", "a b": "2"} }),
		want: `graph "step-42": labels: key "a b" has ' '`},
	{name: "label key edge", mut: gr(func(g *wire.GraphSpec) { g.Labels = map[string]string{"megaflow.io/": "x"} }),
		want: `labels: key "megaflow.io/" must start and end with a letter or digit`},
	{name: "label key empty", mut: gr(func(g *wire.GraphSpec) { g.Labels = map[string]string{"": "x"} }),
		want: `labels: empty key`},
	{name: "label value control", mut: gr(func(g *wire.GraphSpec) { g.Labels = map[string]string{"step": "4\x002"} }),
		want: `graph "step-42": labels["step"]: "4\x002" has '\x00'`},
	{name: "label value too long", mut: gr(func(g *wire.GraphSpec) { g.Labels = map[string]string{"k": strings.Repeat("v", 257)} }),
		want: `labels["k"]: is 257 bytes long; the limit is 256`},
	{name: "no tasks", mut: gr(func(g *wire.GraphSpec) { g.Tasks = nil }),
		want: `graph "step-42": tasks: the graph has no tasks; add at least one`},
	{name: "too many tasks", mut: func(g *wire.GraphSpec) *wire.GraphSpec { return g },
		lim: func(l *Limits) { l.MaxTasks = 2 }, want: `graph "step-42": tasks: the graph has 3 tasks; the limit is 2`},
	{name: "graph too big", mut: func(g *wire.GraphSpec) *wire.GraphSpec { return g },
		lim: func(l *Limits) { l.MaxGraphSpecBytes = 50 }, want: `graph "step-42": the spec encodes to`},
	{name: "no id, named", mut: gr(func(g *wire.GraphSpec) { g.Id = ""; g.Name = "sweep"; g.Tasks = nil }),
		want: `graph (no id yet, name "sweep"): tasks:`},
	{name: "no id, no name", mut: gr(func(g *wire.GraphSpec) { g.Id = ""; g.Tasks = nil }),
		want: `graph (no id yet): tasks:`},

	// Tasks: presence, unknown fields, name.
	{name: "nil task", mut: gr(func(g *wire.GraphSpec) { g.Tasks[1] = nil }),
		want: `graph "step-42": tasks[1]: is nil`},
	{name: "task unknown field", mut: t1("setup", func(t *wire.TaskSpec) { t.ProtoReflect().SetUnknown(unknownField(77)) }),
		want: `graph "step-42": task "setup": field number 77 is unknown`},
	{name: "resources unknown field", mut: t1("setup", func(t *wire.TaskSpec) {
		t.Resources = &wire.Resources{}
		t.Resources.ProtoReflect().SetUnknown(unknownField(9))
	}), want: `task "setup": resources: field number 9 is unknown`},
	{name: "service unknown field", mut: t1("setup", func(t *wire.TaskSpec) {
		withService(t, func(s *wire.ServiceSpec) { s.ProtoReflect().SetUnknown(unknownField(12)) })
	}), want: `task "setup": service: field number 12 is unknown`},
	{name: "name empty", mut: t1("setup", func(t *wire.TaskSpec) { t.Name = "" }),
		want: `graph "step-42": tasks[0]: name: is empty`},
	{name: "name slash", mut: t1("setup", func(t *wire.TaskSpec) { t.Name = "a/b" }),
		want: `graph "step-42": tasks[0]: name: "a/b" has '/' at byte 1`},
	{name: "name dot", mut: t1("setup", func(t *wire.TaskSpec) { t.Name = "." }),
		want: `tasks[0]: name: "." starts with '.'`},
	{name: "name too long", mut: t1("setup", func(t *wire.TaskSpec) { t.Name = strings.Repeat("x", 129) }),
		want: `tasks[0]: name: is 129 bytes long; the limit is 128`},
	{name: "name shorter limit", mut: t1("rollout", func(t *wire.TaskSpec) { t.Name = "rollouts" }),
		lim: func(l *Limits) { l.MaxNameLen = 7 }, want: `graph "step-42": tasks[1]: name: is 8 bytes long; the limit is 7`},
	{name: "name duplicate", mut: t1("eval", func(t *wire.TaskSpec) { t.Name = "setup" }),
		want: `graph "step-42": tasks[2]: name: "setup" is also the name of tasks[0]; task names must be unique within a graph`},

	// Image and command.
	{name: "image empty", mut: t1("setup", func(t *wire.TaskSpec) { t.Image = "" }),
		want: `graph "step-42": task "setup": image: is empty; name a container image, e.g. "python:3.12-slim", or set runtime: process to run the command as a plain process`},
	{name: "image empty, persistent on the process runtime", mut: t1("setup", func(t *wire.TaskSpec) {
		t.Image, t.Runtime, t.Mode = "", "process", wire.ExecutionMode_EXECUTION_MODE_PERSISTENT
	}), want: `task "setup": image: is empty; a persistent task, a session or a sandbox runs in a container even on a process-runtime worker`},
	{name: "image empty, a session on the process runtime", mut: t1("setup", func(t *wire.TaskSpec) {
		t.Image, t.Runtime, t.Mode, t.Session = "", "process", wire.ExecutionMode_EXECUTION_MODE_PERSISTENT, "s1"
	}), want: `task "setup": image: is empty; a persistent task, a session or a sandbox runs in a container`},
	{name: "image empty, runtime misspelt", mut: t1("setup", func(t *wire.TaskSpec) { t.Image, t.Runtime = "", "proces" }),
		want: `task "setup": runtime: "proces" is not a runtime; use "docker"`},
	{name: "image empty, runtime docker", mut: t1("setup", func(t *wire.TaskSpec) { t.Image, t.Runtime = "", "docker" }),
		want: `task "setup": image: is empty; name a container image, e.g. "python:3.12-slim"`},
	{name: "image space", mut: t1("setup", func(t *wire.TaskSpec) { t.Image = "python 3" }),
		want: `task "setup": image: "python 3" has ' ' at byte 6`},
	{name: "image dash", mut: t1("setup", func(t *wire.TaskSpec) { t.Image = "-x" }),
		want: `task "setup": image: "-x" starts with '-'`},
	{name: "image too long", mut: t1("setup", func(t *wire.TaskSpec) { t.Image = strings.Repeat("i", 513) }),
		want: `image: is 513 bytes long; the limit is 512`},
	{name: "command empty", mut: t1("rollout", func(t *wire.TaskSpec) { t.Command = nil }),
		want: `graph "step-42": task "rollout": command: is empty; give the program and its arguments`},
	{name: "command program empty", mut: t1("rollout", func(t *wire.TaskSpec) { t.Command = []string{"", "x"} }),
		want: `task "rollout": command[0]: the program is empty`},
	{name: "command too long", mut: t1("rollout", func(t *wire.TaskSpec) { t.Command = []string{"a", "b", "c"} }),
		lim: func(l *Limits) { l.MaxCommandArgs = 2 }, want: `task "rollout": command: has 3 elements; the limit is 2`},
	{name: "command NUL", mut: t1("rollout", func(t *wire.TaskSpec) { t.Command = []string{"sh", "-c", "a\x00b"} }),
		want: `task "rollout": command[2]: "a\x00b" has '\x00' at byte 1`},

	// Environment.
	{name: "env key equals", mut: t1("setup", func(t *wire.TaskSpec) { t.Env = map[string]string{"A=B": "1"} }),
		want: `task "setup": env: name "A=B" has '=' at byte 1`},
	{name: "env key digit", mut: t1("setup", func(t *wire.TaskSpec) { t.Env = map[string]string{"1A": "1"} }),
		want: `env: name "1A" starts with a digit`},
	{name: "env key empty", mut: t1("setup", func(t *wire.TaskSpec) { t.Env = map[string]string{"": "1"} }),
		want: `env: empty name`},
	{name: "env key dash", mut: t1("setup", func(t *wire.TaskSpec) { t.Env = map[string]string{"MY-VAR": "1"} }),
		want: `env: name "MY-VAR" has '-'`},
	{name: "env value NUL", mut: t1("setup", func(t *wire.TaskSpec) { t.Env = map[string]string{"A": "x\x00"} }),
		want: `task "setup": env["A"]: "x\x00" has '\x00'`},
	{name: "env too many", mut: t1("setup", func(t *wire.TaskSpec) { t.Env = map[string]string{"A": "1", "B": "2"} }),
		lim: func(l *Limits) { l.MaxEnvEntries = 1 }, want: `task "setup": env: sets 2 variables; the limit is 1`},
	{name: "env too big", mut: t1("setup", func(t *wire.TaskSpec) { t.Env = map[string]string{"A": "1234"} }),
		lim: func(l *Limits) { l.MaxEnvBytes = 4 }, want: `task "setup": env: holds 5 bytes of names and values; the limit is 4`},

	// Resources.
	{name: "cpu negative", mut: t1("rollout", func(t *wire.TaskSpec) { t.Resources = &wire.Resources{CpuMillis: -5} }),
		want: `graph "step-42": task "rollout": resources.cpu_millis: -5 is negative; give millicores >= 0`},
	{name: "memory negative", mut: t1("rollout", func(t *wire.TaskSpec) { t.Resources = &wire.Resources{MemoryBytes: -1} }),
		want: `task "rollout": resources.memory_bytes: -1 is negative; give bytes >= 0`},
	{name: "gpus negative", mut: t1("rollout", func(t *wire.TaskSpec) { t.Resources = &wire.Resources{Gpus: -1} }),
		want: `task "rollout": resources.gpus: -1 is negative`},
	{name: "gpu memory negative", mut: t1("rollout", func(t *wire.TaskSpec) { t.Resources = &wire.Resources{Gpus: 1, GpuMemoryBytes: -1} }),
		want: `task "rollout": resources.gpu_memory_bytes: -1 is negative`},
	{name: "gpu model charset", mut: t1("rollout", func(t *wire.TaskSpec) { t.Resources = &wire.Resources{Gpus: 1, GpuModel: "A100;rm"} }),
		want: `task "rollout": resources.gpu_model: "A100;rm" has ';'`},
	{name: "gpu model without gpus", mut: t1("rollout", func(t *wire.TaskSpec) { t.Resources = &wire.Resources{GpuModel: "H100"} }),
		want: `task "rollout": resources.gpu_model: "H100" is set but resources.gpus is 0`},
	{name: "gpu memory without gpus", mut: t1("rollout", func(t *wire.TaskSpec) { t.Resources = &wire.Resources{GpuMemoryBytes: 40 * gib} }),
		want: `task "rollout": resources.gpu_memory_bytes: 42949672960 is set but resources.gpus is 0`},
	{name: "memory over largest worker", mut: t1("rollout", func(t *wire.TaskSpec) { t.Resources = &wire.Resources{MemoryBytes: 64 * gib} }),
		lim:  func(l *Limits) { l.MaxWorker = bigWorker },
		want: `graph "step-42": task "rollout": resources.memory_bytes: needs 64 GiB of memory but the largest worker has 16 GiB`},
	{name: "cpu over largest worker", mut: t1("rollout", func(t *wire.TaskSpec) { t.Resources = &wire.Resources{CpuMillis: 64000} }),
		lim:  func(l *Limits) { l.MaxWorker = bigWorker },
		want: `task "rollout": resources.cpu_millis: needs 64 cores but the largest worker has 16 cores`},
	{name: "gpus over largest worker", mut: t1("rollout", func(t *wire.TaskSpec) { t.Resources = &wire.Resources{Gpus: 16} }),
		lim:  func(l *Limits) { l.MaxWorker = bigWorker },
		want: `task "rollout": resources.gpus: needs 16 GPUs but the largest worker has 8`},
	{name: "gpu on a cluster without GPUs", mut: t1("rollout", func(t *wire.TaskSpec) { t.Resources = &wire.Resources{Gpus: 1} }),
		lim:  func(l *Limits) { l.MaxWorker = &wire.Resources{CpuMillis: 8000, MemoryBytes: 32 * gib} },
		want: `resources.gpus: needs 1 GPUs but the largest worker has 0`},
	{name: "gpu memory over largest worker", mut: t1("rollout", func(t *wire.TaskSpec) { t.Resources = &wire.Resources{Gpus: 1, GpuMemoryBytes: 141 * gib} }),
		lim:  func(l *Limits) { l.MaxWorker = bigWorker },
		want: `resources.gpu_memory_bytes: needs GPUs with 141 GiB of memory each but the largest worker's GPUs have 80 GiB`},

	// Dependencies.
	{name: "depends on unknown", mut: t1("eval", func(t *wire.TaskSpec) { t.DependsOn = []string{"rollot"} }),
		want: `graph "step-42": task "eval": depends_on: unknown task "rollot" (tasks are: "rollout", "setup")`},
	{name: "depends on itself", mut: t1("eval", func(t *wire.TaskSpec) { t.DependsOn = []string{"rollout", "eval"} }),
		want: `graph "step-42": task "eval": depends_on: "eval" is the task itself`},
	{name: "depends on twice", mut: t1("eval", func(t *wire.TaskSpec) { t.DependsOn = []string{"rollout", "setup", "rollout"} }),
		want: `graph "step-42": task "eval": depends_on: "rollout" is listed twice`},
	{name: "depends on empty name", mut: t1("eval", func(t *wire.TaskSpec) { t.DependsOn = []string{""} }),
		want: `task "eval": depends_on: lists an empty name`},
	{name: "depends on only task", mut: func(*wire.GraphSpec) *wire.GraphSpec {
		return &wire.GraphSpec{Id: "step-42", Tasks: []*wire.TaskSpec{newTask("solo", "ghost")}}
	}, want: `task "solo": depends_on: unknown task "ghost" (the graph has no other task)`},

	// Queueing.
	{name: "type uppercase", mut: t1("setup", func(t *wire.TaskSpec) { t.Type = "Train" }),
		want: `graph "step-42": task "setup": type: "Train" has 'T' at byte 0; use "train", "eval", "synth", "" (the default queue) or a custom queue name`},
	{name: "type digit first", mut: t1("setup", func(t *wire.TaskSpec) { t.Type = "1x" }),
		want: `task "setup": type: "1x" must start with a letter`},
	{name: "type trailing dash", mut: t1("setup", func(t *wire.TaskSpec) { t.Type = "x-" }),
		want: `type: "x-" must start with a letter and not end with '-'`},
	{name: "type too long", mut: t1("setup", func(t *wire.TaskSpec) { t.Type = strings.Repeat("q", 33) }),
		want: `type: "qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq" is 33 bytes long`},
	{name: "task priority", mut: t1("setup", func(t *wire.TaskSpec) { t.Priority = 2000 }),
		want: `task "setup": priority: 2000 is out of range; give -1000 to 1000 (higher runs first); or 0 to inherit the graph's`},
	{name: "retries negative", mut: t1("setup", func(t *wire.TaskSpec) { t.MaxRetries = -1 }),
		want: `task "setup": max_retries: -1 is negative; give 0 to 100`},
	{name: "retries too many", mut: t1("setup", func(t *wire.TaskSpec) { t.MaxRetries = 101 }),
		want: `task "setup": max_retries: 101 is more than 100; give 0 to 100`},
	{name: "timeout negative", mut: t1("setup", func(t *wire.TaskSpec) { t.TimeoutSeconds = -5 }),
		want: `task "setup": timeout_seconds: -5 is negative; give seconds from 0 (no timeout) to 604800`},
	{name: "timeout too long", mut: t1("setup", func(t *wire.TaskSpec) { t.TimeoutSeconds = 604801 }),
		want: `task "setup": timeout_seconds: 604801 is more than 7 days (604800 seconds); give at most 604800`},

	// Kind, mode, session, service.
	{name: "kind unknown", mut: t1("setup", func(t *wire.TaskSpec) { t.Kind = 7 }),
		want: `task "setup": kind: 7 is not a task kind; use TASK_KIND_BATCH (the default) or TASK_KIND_SERVICE`},
	{name: "mode unknown", mut: t1("setup", func(t *wire.TaskSpec) { t.Mode = 9 }),
		want: `task "setup": mode: 9 is not an execution mode`},
	{name: "session not persistent", mut: t1("setup", func(t *wire.TaskSpec) { t.Session = "s1" }),
		want: `task "setup": session: "s1" needs mode EXECUTION_MODE_PERSISTENT`},
	{name: "session explicitly ephemeral", mut: t1("setup", func(t *wire.TaskSpec) {
		t.Session = "s1"
		t.Mode = wire.ExecutionMode_EXECUTION_MODE_EPHEMERAL
	}), want: `task "setup": session: "s1" needs mode EXECUTION_MODE_PERSISTENT`},
	{name: "session charset", mut: t1("setup", func(t *wire.TaskSpec) {
		t.Session = "s/1"
		t.Mode = wire.ExecutionMode_EXECUTION_MODE_PERSISTENT
	}), want: `task "setup": session: "s/1" has '/'`},
	{name: "service missing", mut: t1("setup", func(t *wire.TaskSpec) { t.Kind = wire.TaskKind_TASK_KIND_SERVICE }),
		want: `task "setup": service: is missing; a TASK_KIND_SERVICE task needs service.name`},
	{name: "service on batch", mut: t1("setup", func(t *wire.TaskSpec) { t.Service = &wire.ServiceSpec{Name: "x"} }),
		want: `task "setup": service: is set on a batch task; set kind to TASK_KIND_SERVICE or remove service`},
	{name: "service on explicit batch", mut: t1("setup", func(t *wire.TaskSpec) {
		t.Kind = wire.TaskKind_TASK_KIND_BATCH
		t.Service = &wire.ServiceSpec{Name: "x"}
	}), want: `task "setup": service: is set on a batch task`},
	{name: "service name empty", mut: t1("setup", func(t *wire.TaskSpec) { withService(t, func(s *wire.ServiceSpec) { s.Name = "" }) }),
		want: `task "setup": service.name: is empty`},
	{name: "service name double slash", mut: t1("setup", func(t *wire.TaskSpec) { withService(t, func(s *wire.ServiceSpec) { s.Name = "model//x" }) }),
		want: `task "setup": service.name: "model//x" has an empty part`},
	{name: "service name leading slash", mut: t1("setup", func(t *wire.TaskSpec) { withService(t, func(s *wire.ServiceSpec) { s.Name = "/x" }) }),
		want: `service.name: "/x" has an empty part`},
	{name: "service name charset", mut: t1("setup", func(t *wire.TaskSpec) { withService(t, func(s *wire.ServiceSpec) { s.Name = "model/qwen 7b" }) }),
		want: `service.name: "model/qwen 7b": part "qwen 7b" has ' '`},
	{name: "service port negative", mut: t1("setup", func(t *wire.TaskSpec) { withService(t, func(s *wire.ServiceSpec) { s.Port = -1 }) }),
		want: `task "setup": service.port: -1 is out of range; give 1 to 65535, or 0 to let the worker pick one`},
	{name: "service port too big", mut: t1("setup", func(t *wire.TaskSpec) { withService(t, func(s *wire.ServiceSpec) { s.Port = 70000 }) }),
		want: `service.port: 70000 is out of range`},
	{name: "restart policy", mut: t1("setup", func(t *wire.TaskSpec) { withService(t, func(s *wire.ServiceSpec) { s.RestartPolicy = "sometimes" }) }),
		want: `task "setup": service.restart_policy: "sometimes" is not a restart policy; use "always" (the default), "on-failure" or "never"`},
	{name: "readiness path relative", mut: t1("setup", func(t *wire.TaskSpec) { withService(t, func(s *wire.ServiceSpec) { s.ReadinessHttpPath = "health" }) }),
		want: `task "setup": service.readiness_http_path: "health" does not start with '/'`},
	{name: "readiness path space", mut: t1("setup", func(t *wire.TaskSpec) { withService(t, func(s *wire.ServiceSpec) { s.ReadinessHttpPath = "/a b" }) }),
		want: `service.readiness_http_path: "/a b" has ' '`},
	{name: "both probes", mut: t1("setup", func(t *wire.TaskSpec) {
		withService(t, func(s *wire.ServiceSpec) { s.ReadinessHttpPath = "/health"; s.TcpProbe = true })
	}), want: `task "setup": service.tcp_probe: is set together with readiness_http_path "/health"; probe by HTTP or by TCP, not both`},
	{name: "uses services charset", mut: t1("setup", func(t *wire.TaskSpec) { t.UsesServices = []string{"model/ok", "model/"} }),
		want: `task "setup": uses_services: "model/" has an empty part`},
	{name: "depends on a service", mut: t1("setup", func(t *wire.TaskSpec) { withService(t, func(*wire.ServiceSpec) {}) }),
		want: `task "rollout": depends_on: "setup" is a service task, which never ends to unblock its dependents; name its service "model/qwen-7b" in uses_services instead`},
	{name: "persistent service", mut: t1("eval", func(t *wire.TaskSpec) {
		withService(t, func(*wire.ServiceSpec) {})
		t.Mode = wire.ExecutionMode_EXECUTION_MODE_PERSISTENT
	}), want: `task "eval": mode: is EXECUTION_MODE_PERSISTENT on a service task; a service runs in its own container`},
	{name: "service uses itself", mut: t1("eval", func(t *wire.TaskSpec) {
		withService(t, func(*wire.ServiceSpec) {})
		t.UsesServices = []string{"model/qwen-7b"}
	}), want: `task "eval": uses_services: names "model/qwen-7b", the task's own service; it would wait for itself forever`},
	{name: "uses services twice", mut: t1("setup", func(t *wire.TaskSpec) { t.UsesServices = []string{"model/a", "model/b", "model/a"} }),
		want: `task "setup": uses_services: "model/a" is listed twice`},

	// Container.
	{name: "runtime unknown", mut: t1("setup", func(t *wire.TaskSpec) { t.Runtime = "podman" }),
		want: `task "setup": runtime: "podman" is not a runtime; use "docker" (containers: never a process worker), "process", or leave it empty for any worker`},
	{name: "network container mode", mut: t1("setup", func(t *wire.TaskSpec) { t.Network = "container:abc" }),
		want: `task "setup": network: "container:abc" has ':' at byte 9; use "none" (the default), "bridge", "host"`},
	{name: "network leading dot", mut: t1("setup", func(t *wire.TaskSpec) { t.Network = ".net" }),
		want: `network: ".net" must start with a letter or digit`},
	{name: "working dir relative", mut: t1("setup", func(t *wire.TaskSpec) { t.WorkingDir = "work" }),
		want: `task "setup": working_dir: "work" is relative; give an absolute path`},
	{name: "working dir unclean", mut: t1("setup", func(t *wire.TaskSpec) { t.WorkingDir = "/a/../b/" }),
		want: `task "setup": working_dir: "/a/../b/" is not clean; write it as "/b"`},
	{name: "output path absolute", mut: t1("setup", func(t *wire.TaskSpec) { t.OutputPaths = []string{"/out/x"} }),
		want: `task "setup": output_paths: "/out/x" is absolute; give a path relative to the output directory ($MEGAFLOW_OUTPUT_DIR), e.g. "out/x"`},
	{name: "output path dotdot", mut: t1("setup", func(t *wire.TaskSpec) { t.OutputPaths = []string{"../secrets"} }),
		want: `task "setup": output_paths: "../secrets" leaves the output directory through ".."`},
	{name: "output path hidden dotdot", mut: t1("setup", func(t *wire.TaskSpec) { t.OutputPaths = []string{"a/../../b"} }),
		want: `output_paths: "a/../../b" leaves the output directory`},
	{name: "output path unclean", mut: t1("setup", func(t *wire.TaskSpec) { t.OutputPaths = []string{"out/./x"} }),
		want: `output_paths: "out/./x" is not clean; write it as "out/x"`},
	{name: "output path empty", mut: t1("setup", func(t *wire.TaskSpec) { t.OutputPaths = []string{""} }),
		want: `task "setup": output_paths: is empty`},
	{name: "output path NUL", mut: t1("setup", func(t *wire.TaskSpec) { t.OutputPaths = []string{"a\x00"} }),
		want: `output_paths: "a\x00" has '\x00'`},
	{name: "output paths twice", mut: t1("setup", func(t *wire.TaskSpec) { t.OutputPaths = []string{"out", "log", "out"} }),
		want: `task "setup": output_paths: "out" is listed twice`},
	{name: "output paths too many", mut: t1("setup", func(t *wire.TaskSpec) { t.OutputPaths = []string{"a", "b"} }),
		lim: func(l *Limits) { l.MaxOutputPaths = 1 }, want: `task "setup": output_paths: lists 2 paths; the limit is 1`},
	{name: "node selector key", mut: t1("setup", func(t *wire.TaskSpec) { t.NodeSelector = map[string]string{"zone=a": "b"} }),
		want: `task "setup": node_selector: key "zone=a" has '='`},
	{name: "node selector value", mut: t1("setup", func(t *wire.TaskSpec) { t.NodeSelector = map[string]string{"zone": "a\tb"} }),
		want: `task "setup": node_selector["zone"]: "a\tb" has '\t'`},
	{name: "node selector too many", mut: t1("setup", func(t *wire.TaskSpec) { t.NodeSelector = map[string]string{"a": "1", "b": "2"} }),
		lim: func(l *Limits) { l.MaxLabels = 1 }, want: `task "setup": node_selector: has 2 entries; the limit is 1`},
	{name: "capability lower case", mut: t1("setup", func(t *wire.TaskSpec) { t.Capabilities = []string{"net_admin"} }),
		want: `task "setup": capabilities: "net_admin" has 'n' at byte 0; write capabilities in upper case`},
	{name: "capability bare prefix", mut: t1("setup", func(t *wire.TaskSpec) { t.Capabilities = []string{"CAP_"} }),
		want: `task "setup": capabilities: "CAP_" names no capability`},
	{name: "capability digit first", mut: t1("setup", func(t *wire.TaskSpec) { t.Capabilities = []string{"9P"} }),
		want: `capabilities: "9P" must start with a letter`},
	{name: "capability too long", mut: t1("setup", func(t *wire.TaskSpec) { t.Capabilities = []string{strings.Repeat("A", 33)} }),
		want: `bytes long without "CAP_"; the limit is 32`},
	{name: "capability twice", mut: t1("setup", func(t *wire.TaskSpec) { t.Capabilities = []string{"NET_ADMIN", "NET_ADMIN"} }),
		want: `task "setup": capabilities: "NET_ADMIN" is listed twice`},
	{name: "capability twice spelled apart", mut: t1("setup", func(t *wire.TaskSpec) { t.Capabilities = []string{"NET_ADMIN", "SYS_PTRACE", "CAP_NET_ADMIN"} }),
		want: `task "setup": capabilities: "NET_ADMIN" and "CAP_NET_ADMIN" name the same capability`},
	{name: "task too big", mut: t1("setup", func(t *wire.TaskSpec) { t.Command = append(t.Command, strings.Repeat("p", 200)) }),
		lim: func(l *Limits) { l.MaxTaskSpecBytes = 100 }, want: `task "setup": the spec encodes to 258 bytes (depends_on not counted); the limit is 100`},

	// Cycles.
	{name: "cycle", mut: func(*wire.GraphSpec) *wire.GraphSpec {
		return &wire.GraphSpec{Id: "step-42", Tasks: []*wire.TaskSpec{
			newTask("start"), newTask("a", "c", "start"), newTask("b", "a"), newTask("c", "b"), newTask("end", "c"),
		}}
	}, want: `graph "step-42": task "a": depends_on: cycle: a -> c -> b -> a; each arrow reads "depends on"; remove one of these dependencies`},
	{name: "two-task cycle", mut: func(*wire.GraphSpec) *wire.GraphSpec {
		return &wire.GraphSpec{Id: "step-42", Tasks: []*wire.TaskSpec{newTask("x", "y"), newTask("y", "x")}}
	}, want: `task "x": depends_on: cycle: x -> y -> x`},

	// Gangs.
	{name: "gang charset", mut: t1("setup", func(t *wire.TaskSpec) { t.Gang = "train 1" }),
		want: `task "setup": gang: "train 1" has ' ' at byte 5`},
	{name: "gang with session", mut: t1("setup", func(t *wire.TaskSpec) {
		t.Gang, t.Session, t.Mode = "train", "s1", wire.ExecutionMode_EXECUTION_MODE_PERSISTENT
	}), want: `task "setup": gang: "train" with session "s1": a gang's tasks run each on its own worker`},
	{name: "gang on a service", mut: t1("setup", func(t *wire.TaskSpec) {
		withService(t, func(*wire.ServiceSpec) {})
		t.Gang = "train"
	}), want: `task "setup": gang: "train" on a service task`},
	{name: "gang member depends on another", mut: func(*wire.GraphSpec) *wire.GraphSpec {
		g := &wire.GraphSpec{Id: "step-42", Tasks: []*wire.TaskSpec{
			newTask("data"), newTask("rank0", "data"), newTask("mid", "rank0"), newTask("rank1", "data", "mid"),
		}}
		named(g, "rank0").Gang, named(g, "rank1").Gang = "train", "train"
		return g
	}, want: `graph "step-42": task "rank1": gang: "train": the task depends, directly or through other tasks, on task "rank0" of its own gang`},
	{name: "gang too large", mut: func(*wire.GraphSpec) *wire.GraphSpec {
		g := &wire.GraphSpec{Id: "step-42"}
		for i := range MaxGangSize + 1 {
			t := newTask(fmt.Sprintf("r%d", i))
			t.Gang = "train"
			g.Tasks = append(g.Tasks, t)
		}
		return g
	}, want: `task "r0": gang: gang "train" holds 257 tasks; the limit is 256`},
}
