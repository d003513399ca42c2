package spec

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// Validate checks every field of g against lim and returns nil, or an
// error of class errs.InvalidArgument (test it with
// errors.Is(err, errs.ErrInvalidArgument); a *FieldError when the problem
// is one field's) describing the first problem found. The message names the graph, the task and the field, and says what
// to do, for example:
//
//	graph "step-42": task "eval": depends_on: unknown task "rollot" (tasks are: "rollout", "setup")
//	graph "step-42": task "rollout": resources.cpu_millis: -5 is negative; give millicores >= 0 (1000 = one core)
//	graph "step-42": task "a": depends_on: cycle: a -> b -> c -> a; each arrow reads "depends on"; remove one of these dependencies
//
// A task is named by its name when that name is valid and unique, else by its
// position, as in tasks[3]. The order of checks is fixed, so the error is
// deterministic: the graph's own fields, then each task in order (each
// task's fields in the order of the rules below), then the cycle check.
//
// Validate accepts specs before or after Normalize and gives the same verdict
// for both: unset values mean their defaults. It does not modify g or lim.
// It runs in time linear in the size of g, without recursion, so graphs of
// lim.MaxTasks tasks with deep chains are fine.
//
// The rules, for the graph:
//   - nothing unknown to this version of the wire API (fields set by a newer
//     client are refused, not silently ignored);
//   - id: empty (the head picks one) or an identifier: ASCII letters, digits,
//     '.', '_' and '-', 1 to lim.MaxNameLen bytes, not starting with '.' or
//     '-';
//   - tenant: empty (DefaultTenant) or an identifier;
//   - name: free text, printable UTF-8, at most 256 bytes;
//   - priority: MinPriority to MaxPriority;
//   - deadline_seconds: 0 (none) to lim.MaxGraphDeadline;
//   - labels: at most lim.MaxLabels; keys of 1 to 128 ASCII letters, digits,
//     '.', '_', '/' and '-' starting and ending with a letter or digit;
//     values printable UTF-8 of at most 256 bytes;
//   - tasks: 1 to lim.MaxTasks;
//   - encoded size (normalized) at most lim.MaxGraphSpecBytes.
//
// For each task:
//   - nothing unknown to this version of the wire API, in the task, its
//     resources or its service;
//   - name: an identifier (so never containing '/'), unique in the graph;
//   - image: 1 to 512 bytes of printable ASCII without spaces, not starting
//     with '-';
//   - command: 1 to lim.MaxCommandArgs elements; the first (the program) not
//     empty; none holding NUL bytes;
//   - env: at most lim.MaxEnvEntries entries and lim.MaxEnvBytes bytes of
//     keys and values; keys [A-Za-z_][A-Za-z0-9_]* (so never holding '=');
//     values without NUL bytes;
//   - resources: cpu_millis, memory_bytes, gpus and gpu_memory_bytes not
//     negative; gpu_model up to 64 ASCII letters, digits, spaces, '.', '_'
//     and '-'; gpu_model and gpu_memory_bytes only with gpus above 0; each
//     within lim.MaxWorker when that is known;
//   - depends_on: names of other tasks of the graph, each once (never the
//     task itself);
//   - type: "" (the default queue), TypeTrain, TypeEval, TypeSynth, or a
//     custom queue: a lowercase letter then up to 31 lowercase letters,
//     digits or '-', not ending with '-'; each type is its own queue;
//   - priority: 0 (inherit the graph's) or MinPriority to MaxPriority;
//   - max_retries: 0 to lim.MaxRetries;
//   - timeout_seconds: 0 (none) to lim.MaxTaskTimeout;
//   - kind and mode: a value the wire API defines (unspecified is fine);
//   - session: empty, or an identifier on a task of mode
//     EXECUTION_MODE_PERSISTENT;
//   - service: required on a TASK_KIND_SERVICE task, refused on a batch one;
//     its name "/"-separated identifiers such as "model/qwen-7b", at most
//     lim.MaxNameLen bytes; port 0 (the worker picks one) to 65535;
//     restart_policy "", "always", "on-failure" or "never";
//     readiness_http_path empty or a URL path starting with '/'; not both
//     an HTTP path and tcp_probe;
//     a service task is not persistent and does not use its own service;
//   - uses_services: service names as above, each once (the services may
//     belong to other graphs, so they are not looked up);
//   - depends_on never names a service task (a service never ends to
//     unblock dependents; name its service in uses_services instead);
//   - network: "" (Normalize's default: "bridge" for a service or a task
//     using services, else "none"), "none", "bridge", "host" or a user-defined
//     network: a letter or digit then letters, digits, '.', '_' or '-', at
//     most 64 bytes;
//   - working_dir: empty or an absolute, clean path;
//   - output_paths: at most lim.MaxOutputPaths, each relative to the
//     task's output directory (MEGAFLOW_OUTPUT_DIR), clean, not leaving it
//     through "..", listed once (symlinks out of it are refused when the
//     worker collects the files);
//   - node_selector: as labels;
//   - capabilities: uppercase Linux capability names with or without the
//     "CAP_" prefix (NET_ADMIN or CAP_NET_ADMIN), each once; whether the
//     tenant may have them is admission's business, not this package's;
//   - gang: empty, or an identifier on a batch task without a session;
//   - encoded size (normalized, without depends_on) at most
//     lim.MaxTaskSpecBytes.
//
// Finally the dependencies must not form a cycle (the error shows one),
// and each gang holds at most MaxGangSize tasks, none of which depends,
// directly or through other tasks, on another of its gang (a gang starts
// all at once).
func Validate(g *wire.GraphSpec, lim Limits) error {
	if g == nil {
		return errs.New(errs.InvalidArgument, "graph: no spec given; send a GraphSpec with at least one task")
	}
	v := &validator{g: g, lim: lim.withDefaults()}
	return v.validate()
}

// validator holds the state of one Validate call.
type validator struct {
	g     *wire.GraphSpec
	lim   Limits
	graph string         // how messages name the graph
	index map[string]int // first position of each task name
	// The resolved dependencies: task i's are depIdx[depOff[i]:depOff[i+1]].
	depOff []int
	depIdx []int
	// seen[j] == i+1 when task i has already listed task j in depends_on.
	seen []int
}

func (v *validator) validate() error {
	v.graph = graphRef(v.g)
	if err := v.checkGraph(); err != nil {
		return err
	}
	n := len(v.g.Tasks)
	v.index = make(map[string]int, n)
	for i, t := range v.g.Tasks {
		if _, ok := v.index[t.GetName()]; !ok {
			v.index[t.GetName()] = i
		}
	}
	v.depOff = make([]int, 1, n+1)
	v.seen = make([]int, n)
	for i, t := range v.g.Tasks {
		if err := v.checkTask(i, t); err != nil {
			return err
		}
	}
	if err := v.checkCycles(); err != nil {
		return err
	}
	return v.checkGangs()
}

// graphRef names g in messages.
func graphRef(g *wire.GraphSpec) string {
	switch {
	case g.Id != "":
		return fmt.Sprintf("graph %.140q", g.Id)
	case g.Name != "":
		return fmt.Sprintf("graph (no id yet, name %.140q)", g.Name)
	}
	return "graph (no id yet)"
}

// taskRef names task i in messages: by its name when that is valid and
// unique, else by its position.
func (v *validator) taskRef(i int) string {
	t := v.g.Tasks[i]
	if t != nil && identProblem(t.Name, v.lim.MaxNameLen) == "" && v.index[t.Name] == i {
		return fmt.Sprintf("task %q", t.Name)
	}
	return fmt.Sprintf("tasks[%d]", i)
}

// FieldError is how Validate reports a problem it can pin to one field:
// its message is the *errs.Error it wraps (class InvalidArgument), and
// Task and Field say where, so that a graph file's reader can add the
// line (client.ParseGraphYAML).
type FieldError struct {
	// Task is the position of the task in GraphSpec.tasks, or -1 for a
	// field of the graph itself.
	Task int
	// Field is the field's path in proto names ("depends_on",
	// "resources.cpu_millis", "labels"); "" for the task as a whole.
	Field string
	err   *errs.Error
}

// Error returns the message.
func (e *FieldError) Error() string { return e.err.Error() }

// Unwrap returns the *errs.Error, for errors.Is(err, errs.ErrInvalidArgument).
func (e *FieldError) Unwrap() error { return e.err }

// graphErr returns an error about the graph's field.
func (v *validator) graphErr(field, format string, args ...any) error {
	return &FieldError{Task: -1, Field: field,
		err: errs.New(errs.InvalidArgument, "%s: %s: %s", v.graph, field, fmt.Sprintf(format, args...))}
}

// taskErr returns an error about task i's field; an empty field means the
// task as a whole.
func (v *validator) taskErr(i int, field, format string, args ...any) error {
	if field == "" {
		return &FieldError{Task: i, err: errs.New(errs.InvalidArgument, "%s: %s: %s", v.graph, v.taskRef(i), fmt.Sprintf(format, args...))}
	}
	return &FieldError{Task: i, Field: field,
		err: errs.New(errs.InvalidArgument, "%s: %s: %s: %s", v.graph, v.taskRef(i), field, fmt.Sprintf(format, args...))}
}

func (v *validator) checkGraph() error {
	g, lim := v.g, v.lim
	if p := unknownProblem(g); p != "" {
		return errs.New(errs.InvalidArgument, "%s: %s", v.graph, p)
	}
	if g.Id != "" {
		if p := identProblem(g.Id, lim.MaxNameLen); p != "" {
			return v.graphErr("id", "%s; or leave it empty and the head picks one", p)
		}
	}
	if g.Tenant != "" {
		if p := identProblem(g.Tenant, lim.MaxNameLen); p != "" {
			return v.graphErr("tenant", "%s", p)
		}
	}
	if p := textProblem(g.Name, maxGraphNameLen); p != "" {
		return v.graphErr("name", "%s", p)
	}
	if p := priorityProblem(g.Priority); p != "" {
		return v.graphErr("priority", "%s", p)
	}
	if p := secondsProblem(g.DeadlineSeconds, lim.MaxGraphDeadline, "no deadline"); p != "" {
		return v.graphErr("deadline_seconds", "%s", p)
	}
	if field, p := labelsProblem("labels", g.Labels, lim.MaxLabels); p != "" {
		return v.graphErr(field, "%s", p)
	}
	switch n := len(g.Tasks); {
	case n == 0:
		return v.graphErr("tasks", "the graph has no tasks; add at least one")
	case n > lim.MaxTasks:
		return v.graphErr("tasks", "the graph has %d tasks; the limit is %d; split the work into several graphs", n, lim.MaxTasks)
	}
	if size := v.graphSize(); size > lim.MaxGraphSpecBytes {
		return errs.New(errs.InvalidArgument, "%s: the spec encodes to %d bytes; the limit is %d; split the work into several graphs or move large inputs into files",
			v.graph, size, lim.MaxGraphSpecBytes)
	}
	return nil
}

// unknownProblem describes the first field of m (not its sub-messages) that
// this version of the wire API does not know, or returns "".
func unknownProblem(m proto.Message) string {
	raw := m.ProtoReflect().GetUnknown()
	if len(raw) == 0 {
		return ""
	}
	num, _, n := protowire.ConsumeTag(raw)
	if n < 0 {
		return "carries undecodable data; send a well-formed message"
	}
	return fmt.Sprintf("field number %d is unknown to this version of MegaFlow (is the client newer than the head?); upgrade the heads or leave the field unset", num)
}

func priorityProblem(p int32) string {
	if p < MinPriority || p > MaxPriority {
		return fmt.Sprintf("%d is out of range; give %d to %d (higher runs first)", p, MinPriority, MaxPriority)
	}
	return ""
}

// secondsProblem checks a duration in seconds against 0..max; zero means
// what none says.
func secondsProblem(s int64, max time.Duration, none string) string {
	maxS := int64(max / time.Second)
	switch {
	case s < 0:
		return fmt.Sprintf("%d is negative; give seconds from 0 (%s) to %d", s, none, maxS)
	case s > maxS:
		return fmt.Sprintf("%d is more than %s (%d seconds); give at most %d", s, formatSeconds(maxS), maxS, maxS)
	}
	return ""
}

// labelsProblem checks a label map (graph labels, a node selector) and
// returns the field to name and the problem, or "", "".
func labelsProblem(field string, m map[string]string, max int) (string, string) {
	if len(m) == 0 {
		return "", ""
	}
	if len(m) > max {
		return field, fmt.Sprintf("has %d entries; the limit is %d", len(m), max)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if p := labelKeyProblem(k); p != "" {
			return field, p
		}
		if p := textProblem(m[k], maxLabelValueLen); p != "" {
			return fmt.Sprintf("%s[%q]", field, k), p
		}
	}
	return "", ""
}

// firstDuplicate returns the positions a < b of the earliest second
// occurrence b of an element of list that equals (after key, when key is
// not nil) an earlier element a, or -1, -1.
func firstDuplicate(list []string, key func(string) string) (int, int) {
	if len(list) < 2 {
		return -1, -1
	}
	seen := make(map[string]int, len(list))
	for b, s := range list {
		if key != nil {
			s = key(s)
		}
		if a, ok := seen[s]; ok {
			return a, b
		}
		seen[s] = b
	}
	return -1, -1
}
