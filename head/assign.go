package head

import (
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// The assignment builder: what a worker's stream delivers (assignments
// and stops, in order) and what each assignment carries beyond the task's
// spec (identity, parents' results, gang peers, service endpoints,
// artifact inputs).

// deliveries returns what a worker's stream must deliver now: every
// active attempt the table holds on workerID that the stream has not
// delivered, and a stop for every such attempt whose task was cancelled
// (or whose gang restarts). The stops go first, so that a cancel committed
// with (or before) further assignments reaches the worker before any of
// them. It records the messages in sent (the stream's delivered attempts)
// and forgets the attempts that are no longer active: the stream may live
// for months. A stream whose Send fails ends, and sent with it.
func deliveries(view *state.View, workerID string, sent map[attemptKey]bool) []*wire.HeadMessage {
	var out []*wire.HeadMessage
	open := map[string]map[string]int{} // graph -> session -> unfinished tasks
	active := make(map[attemptKey]bool, len(sent))
	assigned := view.AssignedTo(workerID)
	var fresh []*state.Task // active, not yet delivered, not stopping
	for _, t := range assigned {
		cur := t.CurrentAttempt()
		if t.Stopping() { // cancelled, or its gang restarts
			k := attemptKey{task: t.ID, attempt: cur.Number, stop: true}
			active[k] = true
			if !sent[k] {
				sent[k] = true
				out = append(out, stopMsg(t.ID, cur.Number, t.Reason))
			}
			continue
		}
		k := attemptKey{task: t.ID, attempt: cur.Number}
		active[k] = true
		if !sent[k] {
			fresh = append(fresh, t)
		}
	}
	for _, t := range fresh {
		cur := t.CurrentAttempt()
		sent[attemptKey{task: t.ID, attempt: cur.Number}] = true
		a := &wire.Assignment{TaskId: t.ID, Attempt: cur.Number, LeaderTerm: cur.LeaderTerm, GraphId: t.GraphID,
			Tenant: t.Tenant, Spec: t.Spec, GpuUuids: cur.GPUUUIDs, Env: taskEnv(view, t), ArtifactInputs: artifactInputs(view, t)}
		if view.Rules() >= state.RulesAdmission {
			// The worker enforces the policy in force now (docs/security.md).
			a.AdmissionPolicy, a.AdmissionSource = view.EffectiveAdmission(t.Tenant)
		}
		if s := t.Spec.GetSession(); s != "" {
			if open[t.GraphID] == nil {
				open[t.GraphID] = unfinishedBySession(view, t.GraphID)
			}
			a.SessionEnds = open[t.GraphID][s] <= 1
		}
		out = append(out, &wire.HeadMessage{Msg: &wire.HeadMessage_Assign{Assign: a}})
	}
	for k := range sent {
		if !active[k] {
			delete(sent, k)
		}
	}
	return out
}

// maxAssignmentBatchBytes bounds the encoded assignments of one
// AssignmentBatch: a quarter of gRPC's default 4 MiB receive limit, which
// the worker's stream keeps.
const maxAssignmentBatchBytes = 1 << 20

// batchAssignments returns msgs with each run of consecutive assignments
// in AssignmentBatch messages of at most maxBytes of encoded assignments,
// in order; other messages (stops) stay where they are, and so does an
// assignment alone in its run or larger than maxBytes (as an Assignment,
// which every worker handles). A worker that starts a batch's attempts
// together reports their starts in one event batch: one commit where
// assignments sent one by one caused several.
func batchAssignments(msgs []*wire.HeadMessage, maxBytes int) []*wire.HeadMessage {
	out := make([]*wire.HeadMessage, 0, len(msgs))
	var run []*wire.Assignment
	size := 0
	end := func() {
		switch len(run) {
		case 0:
		case 1:
			out = append(out, &wire.HeadMessage{Msg: &wire.HeadMessage_Assign{Assign: run[0]}})
		default:
			out = append(out, &wire.HeadMessage{Msg: &wire.HeadMessage_Assignments{Assignments: &wire.AssignmentBatch{Assignments: run}}})
		}
		run, size = nil, 0
	}
	for _, m := range msgs {
		a := m.GetAssign()
		if a == nil {
			end()
			out = append(out, m)
			continue
		}
		n := proto.Size(a)
		if len(run) > 0 && size+n > maxBytes {
			end()
		}
		run = append(run, a)
		size += n
	}
	end()
	return out
}

// unfinishedBySession counts a graph's tasks that have not finished, by
// session key.
func unfinishedBySession(view *state.View, graphID string) map[string]int {
	out := map[string]int{}
	for _, t := range view.TasksOfGraph(graphID) {
		if s := t.Spec.GetSession(); s != "" && !state.IsTerminal(t.State) {
			out[s]++
		}
	}
	return out
}

// taskEnv is the environment a task receives beyond its spec: its identity,
// its parents' JSON results (MEGAFLOW_PARENT_<NAME>_RESULT), and for each
// service it names in uses_services the service's ready endpoints as of
// the assignment's delivery, comma-separated and sorted
// (MEGAFLOW_SERVICE_<NAME>=http://10.0.0.5:31000,http://10.0.0.6:31002;
// NAME is the service name upper-cased with every character other than a
// letter or digit turned into '_': "model/qwen-7b" gives MODEL_QWEN_7B).
func taskEnv(view *state.View, t *state.Task) map[string]string {
	env := map[string]string{
		"MEGAFLOW_TASK_ID":  t.ID,
		"MEGAFLOW_GRAPH_ID": t.GraphID,
		"MEGAFLOW_TENANT":   t.Tenant,
		"MEGAFLOW_ATTEMPT":  strconv.FormatUint(uint64(t.CurrentAttempt().Number), 10),
	}
	for _, dep := range t.Spec.GetDependsOn() {
		p := view.Task(t.GraphID + "/" + dep)
		if p != nil && len(p.Result) > 0 {
			env["MEGAFLOW_PARENT_"+envName(dep)+"_RESULT"] = string(p.Result)
		}
	}
	if g := t.Spec.GetGang(); g != "" {
		gangEnv(view, t, env)
	}
	for _, name := range t.Spec.GetUsesServices() {
		eps := view.ServiceEndpoints(name)
		urls := make([]string, len(eps))
		for i, e := range eps {
			urls[i] = e.URL
		}
		env[spec.ServiceEnvVar(name)] = strings.Join(urls, ",")
	}
	return env
}

// gangEnv adds what a task of a gang needs to find its peers (multi-node
// training: torchrun's --nnodes, --node_rank and --master_addr): the gang's
// name (MEGAFLOW_GANG), the task's rank, 0-based in the order
// state.GangLess gives the gang's task names (MEGAFLOW_GANG_RANK), the
// gang's size (MEGAFLOW_GANG_SIZE), the hosts of the workers its tasks were
// placed on, by rank and comma-separated (MEGAFLOW_GANG_HOSTS), and rank
// 0's host (MEGAFLOW_GANG_LEADER_HOST). A gang is placed in one plan, so
// every task of it has its attempt when any is delivered.
func gangEnv(view *state.View, t *state.Task, env map[string]string) {
	members := view.GangMembers(t.GraphID, t.Spec.GetGang())
	hosts := make([]string, len(members))
	for i, m := range members {
		if m.ID == t.ID {
			env["MEGAFLOW_GANG_RANK"] = strconv.Itoa(i)
		}
		if a := m.CurrentAttempt(); a != nil {
			if w := view.Worker(a.WorkerID); w != nil {
				hosts[i] = w.Info.GetHost()
			}
		}
	}
	env["MEGAFLOW_GANG"] = t.Spec.GetGang()
	env["MEGAFLOW_GANG_SIZE"] = strconv.Itoa(len(members))
	env["MEGAFLOW_GANG_HOSTS"] = strings.Join(hosts, ",")
	if len(hosts) > 0 {
		env["MEGAFLOW_GANG_LEADER_HOST"] = hosts[0]
	}
}

// artifactInputs names the parents of t whose declared output files t
// receives as inputs: parent task name -> its succeeded attempt number.
// Parents that declared no output_paths, or did not succeed (a task that
// runs on upstream failure), are left out.
func artifactInputs(view *state.View, t *state.Task) map[string]uint32 {
	var out map[string]uint32
	for _, dep := range t.Spec.GetDependsOn() {
		p := view.Task(t.GraphID + "/" + dep)
		if p == nil || p.State != wire.TaskState_TASK_STATE_SUCCEEDED || len(p.Spec.GetOutputPaths()) == 0 {
			continue
		}
		if a := p.CurrentAttempt(); a != nil {
			if out == nil {
				out = map[string]uint32{}
			}
			out[dep] = a.Number
		}
	}
	return out
}

func envName(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}
