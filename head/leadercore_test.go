package head

import (
	"cmp"
	"flag"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/lease"
	"github.com/megaflow/megaflow/internal/scenario"
	"github.com/megaflow/megaflow/internal/wire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rewrite regenerates the expected output of the leader's scenarios:
//
//	go test ./head -run TestLeaderScenarios -rewrite
var rewrite = flag.Bool("rewrite", false, "rewrite the expected output in testdata/leader/*.txt")

// TestLeaderScenarios drives the leader's decisions (leadercore.go) through
// scenario files in the style of head/scheduler's: a table built by
// applying commands to a real FSM at given log indexes, a time the script
// sets ("at=5s" from the scenario's epoch), and what only the leader knows
// (which workers are connected, when it last heard from each, when it
// became leader). Every command the decisions return is printed and then
// applied, as the leader would propose it. No Raft, socket, clock or sleep.
//
// A scenario file is a list of blocks:
//
//	# comments and blank lines between blocks are kept
//	command arg key=value ...
//	----
//	expected output, up to a blank line or the end of the file
func TestLeaderScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/leader/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			scenario.Run(t, f, *rewrite, newLeaderSim(t).do)
		})
	}
}

// leaderSim is a leader's table and what it knows beside the table.
type leaderSim struct {
	t      *testing.T
	f      *fsm.FSM
	index  uint64
	epoch  time.Time
	graphs []string
	// connected: workers with a stream to this leader.
	connected map[string]bool
	// heard: when the leader last heard from each worker.
	heard map[string]time.Time
	// sent: each worker stream's delivered attempts.
	sent  map[string]map[attemptKey]bool
	since time.Time // when this head became leader
	term  uint64
	cfg   Config
	// rulesSet: the rules version was chosen (at the first command).
	rulesSet bool
	// lastResult: the FSM's answer to the last command applied.
	lastResult any
}

func newLeaderSim(t *testing.T) *leaderSim {
	f, err := fsm.New(fsm.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Lease = lease.Config{Duration: 10 * time.Second, Margin: 2 * time.Second}
	cfg.RetryBackoff, cfg.RetryBackoffMax = time.Second, 8*time.Second
	cfg.MaxQueueWait = 30 * time.Second
	cfg.StagedTTL = time.Minute
	cfg.ArtifactSweepInterval = time.Minute
	epoch := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	return &leaderSim{t: t, f: f, epoch: epoch, connected: map[string]bool{}, heard: map[string]time.Time{},
		sent: map[string]map[attemptKey]bool{}, since: epoch, term: 1, cfg: cfg}
}

// apply commits one command at the next index, as Raft would.
func (s *leaderSim) apply(op fsm.Op, msg proto.Message) error {
	b, err := fsm.Encode(op, msg)
	if err != nil {
		return err
	}
	s.index++
	s.lastResult = s.f.Apply(&raft.Log{Index: s.index, Term: s.term, Type: raft.LogCommand, Data: b})
	if err, ok := s.lastResult.(error); ok {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// at reads "at=5s" (from the epoch; default 0).
func (s *leaderSim) at(kv map[string]string) (time.Time, error) {
	v, ok := kv["at"]
	if !ok {
		return s.epoch, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return time.Time{}, fmt.Errorf("at=%s: %v", v, err)
	}
	return s.epoch.Add(d), nil
}

// rel prints a time as its offset from the epoch.
func (s *leaderSim) rel(t time.Time) string { return t.Sub(s.epoch).String() }

// attemptArg parses "g/a#2".
func attemptArg(a string) (string, uint32, error) {
	id, n, ok := strings.Cut(a, "#")
	if !ok {
		return "", 0, fmt.Errorf("%q: want task#attempt", a)
	}
	u, err := strconv.ParseUint(n, 10, 32)
	return id, uint32(u), err
}

func (s *leaderSim) do(line string) (string, error) {
	fields := strings.Fields(line)
	pos, kv := args(fields[1:])
	now, err := s.at(kv)
	if err != nil {
		return "", err
	}
	var out []string
	p := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	if !s.rulesSet {
		// A new cluster's leader commits this build's rules first
		// (ensureRules), unless the scenario starts with "rules0": a
		// cluster still at rules 0 (a rolling upgrade).
		s.rulesSet = true
		if fields[0] == "rules0" {
			return "", nil
		}
		if err := s.apply(fsm.OpSetRules, wrapperspb.UInt64(fsm.RulesCurrent)); err != nil {
			return "", err
		}
	}
	switch fields[0] {
	case "worker": // worker ID [cpu=MILLIS] [gpus=N] [starts=N] [sandboxes=no] [at=]: its stream opens (registers, or updates, it), connected, heard now; it serves sandboxes (advertises a sandbox address) unless sandboxes=no
		cpu, _ := strconv.ParseInt(cmp.Or(kv["cpu"], "4000"), 10, 64)
		starts, _ := strconv.Atoi(cmp.Or(kv["starts"], "0"))
		gpus, _ := strconv.Atoi(cmp.Or(kv["gpus"], "0"))
		info := &wire.WorkerInfo{Id: pos[0], Capacity: &wire.Resources{CpuMillis: cpu, MemoryBytes: 1 << 34, Gpus: int32(gpus)},
			MaxConcurrentStarts: int32(starts), Addr: pos[0] + ":7400"}
		if kv["sandboxes"] == "no" {
			info.Addr = ""
		}
		for i := range gpus {
			info.Gpus = append(info.Gpus, &wire.GpuDevice{Uuid: fmt.Sprintf("GPU-%s-%d", pos[0], i), Model: "H100", MemoryBytes: 80 << 30})
		}
		if err := s.apply(fsm.OpWorkerUpsert, workerUpsert(info, now)); err != nil {
			return "", err
		}
		s.connected[pos[0]], s.heard[pos[0]] = true, now
		s.sent[pos[0]] = map[attemptKey]bool{}
	case "connect", "disconnect": // the worker's stream to this leader opens or ends
		s.connected[pos[0]] = fields[0] == "connect"
		if fields[0] == "connect" {
			s.sent[pos[0]] = map[attemptKey]bool{}
		}
	case "heard": // heard WORKER at=: a message or a renewal through gossip
		s.heard[pos[0]] = now
	case "elected": // elected at=: this head becomes leader (a new term; it knows no renewals)
		s.term++
		s.since = now
		s.heard = map[string]time.Time{}
		for w := range s.connected {
			s.connected[w] = false
		}
	case "submit": // submit GRAPH TASK[:DEP+DEP] ... [retries=N] [cpu=MILLIS] [gpus=N] [deadline=S] [fork=SNAPSHOT@WORKER] [sandbox=yes] [chunks=N] [at=]: as the leader submits (submissionPlan: placed with the submission)
		g := &wire.GraphSpec{Id: pos[0]}
		if d := kv["deadline"]; d != "" {
			g.DeadlineSeconds, _ = strconv.ParseInt(d, 10, 64)
		}
		retries, _ := strconv.Atoi(cmp.Or(kv["retries"], "0"))
		cpu, _ := strconv.ParseInt(cmp.Or(kv["cpu"], "1000"), 10, 64)
		gpus, _ := strconv.Atoi(cmp.Or(kv["gpus"], "0"))
		for _, ts := range pos[1:] {
			name, deps, _ := strings.Cut(ts, ":")
			spec := &wire.TaskSpec{Name: name, Image: "img", Command: []string{"run"}, MaxRetries: int32(retries),
				Resources: &wire.Resources{CpuMillis: cpu, Gpus: int32(gpus)}, Session: kv["session"]}
			if deps != "" {
				spec.DependsOn = strings.Split(deps, "+")
			}
			if kv["sandbox"] == "yes" {
				spec.Sandbox = &wire.SandboxSpec{} // a sandbox from its image
			}
			if snap, w, ok := strings.Cut(kv["fork"], "@"); ok {
				// A sandbox created from a snapshot held by worker w, as
				// the head makes it (spec.ForkFrom).
				spec.Image = "megaflow-snapshot:" + snap
				spec.Sandbox = &wire.SandboxSpec{FromSnapshot: snap, SnapshotWorker: w}
			}
			g.Tasks = append(g.Tasks, spec)
		}
		// chunks=N (N > 1): the first chunk, holding every task, of a
		// submission in N chunks whose others never come (the client died
		// mid-way): the graph stays staged.
		chunks, _ := strconv.Atoi(cmp.Or(kv["chunks"], "1"))
		cmd := &wire.SubmitGraphCommand{Header: &wire.GraphSpec{Id: g.Id, DeadlineSeconds: g.DeadlineSeconds},
			Tasks: g.Tasks, Chunks: uint32(chunks), SpecDigest: []byte("digest"), UnixNanos: now.UnixNano(), TaskCount: uint32(len(g.Tasks))}
		// As the leader submits: with the placements of a round on the
		// table the submission leaves (submissionPlan).
		cmd.Plan = submissionPlan(roundInput{View: s.f.View(), Connected: func(id string) bool { return s.connected[id] },
			Term: s.term, Now: now, Policy: s.cfg.Scheduler, MaxQueueWait: s.cfg.MaxQueueWait}, cmd, false)
		printCarried(p, cmd.Plan, "with the submission")
		if err := s.apply(fsm.OpSubmitGraph, cmd); err != nil {
			return "", err
		}
		if r, ok := s.lastResult.(*fsm.SubmitResult); ok && r.Plan != nil {
			for _, id := range slices.Sorted(maps.Keys(r.Plan.Skipped)) {
				p("skipped %s: %s", id, r.Plan.Skipped[id])
			}
		}
		if chunks <= 1 {
			s.graphs = append(s.graphs, pos[0])
		}
	case "snapshot": // snapshot ID WORKER: tenant default's snapshot, its image on WORKER
		snap := &wire.Snapshot{Id: pos[0], Tenant: "default", SandboxId: "sbx-src", WorkerId: pos[1], Image: "megaflow-snapshot:" + pos[0],
			CreateUnixNanos: now.UnixNano()}
		if err := s.apply(fsm.OpSnapshotAdd, &wire.SnapshotAddCommand{Snapshot: snap, MaxPerTenant: 64}); err != nil {
			return "", err
		}
	case "round": // round [at=]: one scheduling round
		r := planRound(roundInput{View: s.f.View(), Connected: func(id string) bool { return s.connected[id] },
			Term: s.term, Now: now, Policy: s.cfg.Scheduler, MaxQueueWait: s.cfg.MaxQueueWait})
		if r.Plan != nil {
			for _, a := range r.Plan.Attempts {
				p("place %s#%d on %s", a.TaskId, a.Attempt, a.WorkerId)
			}
			for _, id := range slices.Sorted(maps.Keys(r.Plan.Unplaced)) {
				p("reason %s: %s", id, r.Plan.Unplaced[id])
			}
			if err := s.apply(fsm.OpPlan, r.Plan); err != nil {
				return "", err
			}
		}
		if r.Fail != nil {
			for i, id := range r.Fail.TaskIds {
				p("fail %s: %s", id, r.Fail.Reasons[i])
			}
			if err := s.apply(fsm.OpFailQueued, r.Fail); err != nil {
				return "", err
			}
		}
		if !r.Wake.IsZero() {
			p("wake at %s", s.rel(r.Wake))
		}
	case "event": // event WORKER TASK#N started|exited=CODE|failed|timedout [artifacts] [at=]: the worker reports (artifacts: with artifacts still uploading), as the leader commits it (eventsPlan: what its end frees or readies is placed with it)
		id, n, err := attemptArg(pos[1])
		if err != nil {
			return "", err
		}
		ev := &wire.AttemptEvent{TaskId: id, Attempt: n, UnixNanos: now.UnixNano()}
		if i := slices.Index(pos, "artifacts"); i >= 2 {
			ev.ArtifactsPending = true
			pos = slices.Delete(pos, i, i+1)
		}
		kind := ""
		if len(pos) > 2 {
			kind = pos[2]
		}
		if v, ok := kv["exited"]; ok {
			kind = "exited"
			c, _ := strconv.Atoi(v)
			ev.ExitCode = int32(c)
		}
		switch kind {
		case "started":
			ev.Kind = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STARTED
		case "exited":
			ev.Kind = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_EXITED
		case "failed":
			ev.Kind, ev.Reason = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_FAILED, "crashed"
		case "timedout":
			ev.Kind = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_TIMED_OUT
		default:
			return "", fmt.Errorf("event kind %q: want started, exited=CODE, failed or timedout", kind)
		}
		s.heard[pos[0]] = now
		// The seed is the command's index: the jitter is fixed per scenario.
		cmd := taskEvents(s.f.View(), pos[0], []*wire.AttemptEvent{ev}, now,
			s.cfg.RetryBackoff, s.cfg.RetryBackoffMax, s.index+1, func() float64 { return 0.5 })
		// As the leader commits events: with the placements of a round on
		// the table they leave, when an end frees or readies something.
		cmd.Plan = eventsPlan(roundInput{View: s.f.View(), Connected: func(id string) bool { return s.connected[id] },
			Term: s.term, Now: now, Policy: s.cfg.Scheduler, MaxQueueWait: s.cfg.MaxQueueWait}, cmd, false)
		printCarried(p, cmd.Plan, "with the event")
		if err := s.apply(fsm.OpTaskEvents, cmd); err != nil {
			return "", err
		}
		if r, ok := s.lastResult.(*fsm.TaskEventsResult); ok && r.Plan != nil {
			for _, id := range slices.Sorted(maps.Keys(r.Plan.Skipped)) {
				p("skipped %s: %s", id, r.Plan.Skipped[id])
			}
		}
		// What the FSM decided: a retry's wait, only for a task sent back.
		if t := s.f.View().Task(id); t != nil && t.State == wire.TaskState_TASK_STATE_QUEUED && t.NotBeforeUnixNanos > now.UnixNano() {
			p("backoff %s: %s", id, time.Duration(t.NotBeforeUnixNanos-now.UnixNano()).Round(time.Millisecond))
		}
	case "liveness": // liveness [at=]: the leader's lease check
		for _, cmd := range lapsedWorkers(s.f.View(), func(id string) time.Time { return s.heard[id] }, s.cfg.Lease, s.since, now) {
			p("down %s: %s (%s)", cmd.WorkerId, cmd.Reason, strings.TrimPrefix(cmd.ReasonCode.String(), "REASON_CODE_"))
			if err := s.apply(fsm.OpWorkerDown, cmd); err != nil {
				return "", err
			}
		}
	case "reconcile": // reconcile WORKER [TASK#N ...] [at=]: its stream opens announcing what it runs
		var running []*wire.RunningAttempt
		for _, a := range pos[1:] {
			id, n, err := attemptArg(a)
			if err != nil {
				return "", err
			}
			running = append(running, &wire.RunningAttempt{TaskId: id, Attempt: n, Started: true})
		}
		r := reconcile(s.f.View(), pos[0], running, now)
		for _, k := range slices.SortedFunc(maps.Keys(r.Held), func(a, b attemptKey) int { return strings.Compare(a.task, b.task) }) {
			p("held %s#%d", k.task, k.attempt)
		}
		for _, m := range r.Stops {
			p("stop %s#%d: %s", m.GetStop().GetTaskId(), m.GetStop().GetAttempt(), m.GetStop().GetReason())
		}
		if r.Lost != nil {
			for _, a := range r.Lost.Attempts {
				p("lost %s#%d: %s", a.TaskId, a.Attempt, r.Lost.Reason)
			}
			if err := s.apply(fsm.OpAttemptsLost, r.Lost); err != nil {
				return "", err
			}
		}
		s.connected[pos[0]], s.heard[pos[0]] = true, now
		s.sent[pos[0]] = r.Held
	case "deliver": // deliver WORKER: what its stream sends now
		if s.sent[pos[0]] == nil {
			s.sent[pos[0]] = map[attemptKey]bool{}
		}
		for _, m := range deliveries(s.f.View(), pos[0], s.sent[pos[0]]) {
			if a := m.GetAssign(); a != nil {
				p("assign %s#%d term=%d", a.TaskId, a.Attempt, a.LeaderTerm)
			} else {
				p("stop %s#%d: %s", m.GetStop().GetTaskId(), m.GetStop().GetAttempt(), m.GetStop().GetReason())
			}
		}
	case "cancel": // cancel GRAPH [at=]: a user cancels a graph
		if err := s.apply(fsm.OpCancel, &wire.CancelCommand{GraphId: pos[0], Reason: "cancelled by the user",
			ReasonCode: wire.ReasonCode_REASON_CODE_CANCELLED_BY_USER, UnixNanos: now.UnixNano()}); err != nil {
			return "", err
		}
	case "deadlines": // deadlines [at=]: the leader's deadline check
		for _, cmd := range deadlineCancels(s.f.View(), now) {
			p("cancel %s: %s", cmd.GraphId, cmd.Reason)
			if err := s.apply(fsm.OpCancel, cmd); err != nil {
				return "", err
			}
		}
	case "sweep-staged": // sweep-staged [at=]: the leader drops the submissions that never finished
		if cmd := staleStaged(s.f.View(), now, s.cfg.StagedTTL); cmd != nil {
			for _, g := range cmd.GraphIds {
				p("drop staged %s", g)
			}
			if err := s.apply(fsm.OpDropStaged, cmd); err != nil {
				return "", err
			}
		}
	case "staged": // the table's staged submissions
		for _, g := range s.f.View().StagedGraphs() {
			p("%s %d/%d chunks since %s", g.GraphID, g.Staged, g.Chunks, s.rel(time.Unix(0, g.FirstUnixNanos)))
		}
	case "artifacts": // artifacts [landed=TASK#N+...] [at=]: the leader's sweep for artifacts landed without their worker's word; landed: the manifests in the store
		landed := map[string]bool{}
		if v := kv["landed"]; v != "" {
			for _, a := range strings.Split(v, "+") {
				landed[a] = true
			}
		}
		var found []pendingArtifact
		for _, a := range pendingArtifacts(s.f.View(), now, s.cfg.ArtifactSweepInterval) {
			key := fmt.Sprintf("%s#%d", a.TaskID, a.Attempt)
			p("pending %s on %s: %s", key, a.WorkerID, a.Manifest)
			if landed[key] {
				found = append(found, a)
			}
		}
		for _, cmd := range artifactsLanded(found, now) {
			var names []string
			for _, ev := range cmd.Events {
				names = append(names, fmt.Sprintf("%s#%d", ev.TaskId, ev.Attempt))
			}
			p("landed %s: %s", cmd.WorkerId, strings.Join(names, " "))
			if err := s.apply(fsm.OpTaskEvents, cmd); err != nil {
				return "", err
			}
		}
	case "gpu-health": // gpu-health WORKER [UUID=REASON ...] [at=]: the worker reports its unhealthy GPUs (none: all healthy)
		unhealthy := map[string]string{}
		for k, v := range kv {
			if k != "at" {
				unhealthy[k] = v
			}
		}
		s.heard[pos[0]] = now
		cmd := gpuHealth(pos[0], unhealthy, now)
		if err := s.apply(fsm.OpGpuHealth, cmd); err != nil {
			return "", err
		}
		if res, ok := s.lastResult.(*fsm.GpuHealthResult); ok {
			p("unhealthy %d, lost: requeued %d failed %d stopped %d", res.Unhealthy, res.Lost.Requeued, res.Lost.Failed, res.Lost.Stopped)
		}
	case "gpus": // gpus WORKER: the worker's GPUs in the table
		w := s.f.View().Worker(pos[0])
		if w == nil {
			return "", fmt.Errorf("no worker %s", pos[0])
		}
		for _, d := range w.Info.GetGpus() {
			l := d.GetUuid()
			if holder := w.GPUHolder(d.GetUuid()); holder != "" {
				l += " held by " + holder
			}
			if d.GetUnhealthy() != "" {
				l += " unhealthy: " + d.GetUnhealthy()
			}
			out = append(out, l)
		}
	case "cluster-id": // cluster-id seed=N: the leader's cluster id check, drawing N, N+1, ...
		seed, _ := strconv.ParseUint(kv["seed"], 10, 64)
		if cmd := clusterIDCommand(s.f.View(), func() uint64 { seed++; return seed - 1 }); cmd != nil {
			p("set cluster id %s", state.FormatClusterID(cmd.GetValue()))
			if err := s.apply(fsm.OpSetClusterID, cmd); err != nil {
				return "", err
			}
		}
		p("cluster id %s", state.FormatClusterID(s.f.View().ClusterID()))
	case "rules": // rules VOTER[=V] ...: the leader's rules check; a voter without =V advertises nothing gossip knows
		var voters []string
		for _, f := range fields[1:] {
			if id, _, _ := strings.Cut(f, "="); id != "at" {
				voters = append(voters, id)
			}
		}
		canApply := func(id string) (uint64, bool) {
			v, ok := kv[id]
			if !ok {
				return 0, false
			}
			n, err := strconv.ParseUint(v, 10, 64)
			return n, err == nil
		}
		if cmd := rulesCommand(s.f.View(), voters, canApply); cmd != nil {
			p("set rules %d", cmd.GetValue())
			if err := s.apply(fsm.OpSetRules, cmd); err != nil {
				return "", err
			}
		}
		p("rules %d", s.f.View().Rules())
	case "tasks": // the table's tasks: state, attempts, reason
		for _, g := range s.graphs {
			for _, t := range s.f.View().TasksOfGraph(g) {
				l := fmt.Sprintf("%s %s attempts=%d", t.ID, strings.TrimPrefix(t.State.String(), "TASK_STATE_"), len(t.Attempts))
				if t.NotBeforeUnixNanos > 0 && t.State == wire.TaskState_TASK_STATE_QUEUED {
					l += " not-before=" + s.rel(time.Unix(0, t.NotBeforeUnixNanos))
				}
				if t.Reason != "" {
					l += ": " + t.Reason
				}
				out = append(out, l)
			}
		}
	case "workers": // the table's workers
		for _, w := range s.f.View().Workers() {
			p("%s %s", w.ID(), strings.TrimPrefix(w.Status.String(), "WORKER_STATUS_"))
		}
	default:
		return "", fmt.Errorf("unknown command %q", fields[0])
	}
	return strings.Join(out, "\n"), nil
}

// printCarried prints, with p, the placements and reasons of the plan a
// command carries (submissionPlan, eventsPlan), each marked (with).
func printCarried(p func(string, ...any), plan *wire.PlanCommand, with string) {
	for _, a := range plan.GetAttempts() {
		p("place %s#%d on %s (%s)", a.TaskId, a.Attempt, a.WorkerId, with)
	}
	for _, id := range slices.Sorted(maps.Keys(plan.GetUnplaced())) {
		p("reason %s: %s (%s)", id, plan.GetUnplaced()[id], with)
	}
}

// args splits "a b k=v" into positional arguments and key=value pairs.
func args(fields []string) (pos []string, kv map[string]string) { return scenario.Args(fields) }

// A carried plan (submissionPlan, eventsPlan) is none while the scheduling
// loop commits its own (both would place the same queued tasks), and its
// round considers the first carriedPlanPerQueue tasks of each queue: a
// task behind more than that many in its queue is left to the loop's
// round, which reads the queues whole. An event batch carries a plan only
// when an attempt ends in it.
func TestCarriedPlanBounds(t *testing.T) {
	sim := newLeaderSim(t)
	backlog := []string{"submit big"}
	for i := range carriedPlanPerQueue {
		backlog = append(backlog, fmt.Sprint("t", i))
	}
	// w1 has no GPU: the 256 tasks of big wait in the default queue (and
	// hold no room).
	for _, line := range []string{"worker w1 cpu=4000", strings.Join(backlog, " ") + " gpus=1"} {
		if _, err := sim.do(line); err != nil {
			t.Fatal(err)
		}
	}
	input := func() roundInput {
		return roundInput{View: sim.f.View(), Connected: func(string) bool { return true }, Term: sim.term, Now: sim.epoch, Policy: sim.cfg.Scheduler}
	}
	submission := func(graph, queue string) *wire.SubmitGraphCommand {
		return &wire.SubmitGraphCommand{Header: &wire.GraphSpec{Id: graph}, Chunks: 1, SpecDigest: []byte("d"), TaskCount: 1,
			Tasks: []*wire.TaskSpec{{Name: "x", Type: queue, Image: "img", Command: []string{"run"}, Resources: &wire.Resources{CpuMillis: 1}}}}
	}
	placedOnly := func(p *wire.PlanCommand, task string) bool {
		return len(p.GetAttempts()) == 1 && p.GetAttempts()[0].GetTaskId() == task
	}
	in := input()
	if p := submissionPlan(in, submission("small", ""), false); p != nil {
		t.Fatalf("behind %d tasks of its queue: placements %v; want no plan", carriedPlanPerQueue, p.GetAttempts())
	}
	after, err := fsm.Speculate(in.View, submission("small", ""))
	if err != nil {
		t.Fatal(err)
	}
	if loop := (roundInput{View: after, Connected: in.Connected, Term: in.Term, Now: in.Now, Policy: in.Policy}); !placedOnly(planRound(loop).Plan, "small/x") {
		t.Fatal("the loop's round does not place small/x either: the bound is not what leaves it out")
	}
	if p := submissionPlan(in, submission("small", "other"), false); !placedOnly(p, "small/x") {
		t.Fatalf("first in its own queue: placements %v; want small/x placed", p.GetAttempts())
	}
	if p := submissionPlan(in, submission("small", "other"), true); p != nil {
		t.Fatalf("while the loop commits its plan: placements %v; want no plan", p.GetAttempts())
	}

	// run/r fills w1; small/x (first in its queue) and late/x (behind big
	// in the default one) wait. r's end frees w1: small/x is placed with
	// it, unless the loop is committing its plan; r's start frees nothing.
	for _, line := range []string{"submit run r cpu=4000", "event w1 run/r#1 started"} {
		if _, err := sim.do(line); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []*wire.SubmitGraphCommand{submission("small", "other"), submission("late", "")} {
		if err := sim.apply(fsm.OpSubmitGraph, g); err != nil {
			t.Fatal(err)
		}
	}
	events := func(kind wire.AttemptEventKind) *wire.TaskEventsCommand {
		return &wire.TaskEventsCommand{WorkerId: "w1", UnixNanos: sim.epoch.UnixNano(), Events: []*wire.AttemptEvent{
			{TaskId: "run/r", Attempt: 1, Kind: kind}}}
	}
	in = input()
	if p := eventsPlan(in, events(wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STARTED), false); p != nil {
		t.Fatalf("a start: placements %v; want no plan", p.GetAttempts())
	}
	if p := eventsPlan(in, events(wire.AttemptEventKind_ATTEMPT_EVENT_KIND_EXITED), true); p != nil {
		t.Fatalf("an end while the loop commits its plan: placements %v; want no plan", p.GetAttempts())
	}
	if p := eventsPlan(in, events(wire.AttemptEventKind_ATTEMPT_EVENT_KIND_EXITED), false); !placedOnly(p, "small/x") {
		t.Fatalf("an end: placements %v; want small/x placed, late/x left to the loop", p.GetAttempts())
	}
}

// mayQueue: only an end can free or ready anything; a success readies
// something only with dependents, or frees a slot for a task that waits.
func TestMayQueue(t *testing.T) {
	sim := newLeaderSim(t)
	for _, line := range []string{"worker w1 cpu=2000", "submit g a b:a", "submit h c", "event w1 g/a#1 started", "event w1 h/c#1 started"} {
		if _, err := sim.do(line); err != nil {
			t.Fatal(err)
		}
	}
	ev := func(task string, kind wire.AttemptEventKind, code int32) *wire.AttemptEvent {
		return &wire.AttemptEvent{TaskId: task, Attempt: 1, Kind: kind, ExitCode: code}
	}
	const (
		started  = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STARTED
		exited   = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_EXITED
		failed   = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_FAILED
		timedOut = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_TIMED_OUT
		stopped  = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_STOPPED
		ready    = wire.AttemptEventKind_ATTEMPT_EVENT_KIND_SERVICE_READY
	)
	quiet := sim.f.View() // nothing queued
	if _, err := sim.do("submit wait w cpu=9000"); err != nil {
		t.Fatal(err)
	}
	waiting := sim.f.View() // wait/w queued
	for _, c := range []struct {
		name   string
		view   *state.View
		events []*wire.AttemptEvent
		want   bool
	}{
		{"a start", waiting, []*wire.AttemptEvent{ev("h/c", started, 0)}, false},
		{"a service ready", waiting, []*wire.AttemptEvent{ev("h/c", ready, 0)}, false},
		{"a success, nothing waits, no dependents", quiet, []*wire.AttemptEvent{ev("h/c", exited, 0)}, false},
		{"a success with dependents", quiet, []*wire.AttemptEvent{ev("g/a", exited, 0)}, true},
		{"a success while a task waits", waiting, []*wire.AttemptEvent{ev("h/c", started, 0), ev("h/c", exited, 0)}, true},
		{"a non-zero exit", quiet, []*wire.AttemptEvent{ev("h/c", exited, 1)}, true},
		{"a failure", quiet, []*wire.AttemptEvent{ev("h/c", failed, 0)}, true},
		{"a timeout", quiet, []*wire.AttemptEvent{ev("h/c", timedOut, 0)}, true},
		{"a stop", quiet, []*wire.AttemptEvent{ev("h/c", stopped, 0)}, true},
		{"nothing", waiting, nil, false},
	} {
		if got := mayQueue(c.view, c.events); got != c.want {
			t.Errorf("%s: mayQueue = %v; want %v", c.name, got, c.want)
		}
	}
}

// roomFor: a round after a change is skipped only when every connected
// worker lacks the CPU or the memory of the smallest waiting task and
// every waiting task has its reason; a task in a backoff counts only for
// the wake (nextBackoffEnd).
func TestRoomFor(t *testing.T) {
	sim := newLeaderSim(t)
	connected := func(id string) bool { return sim.connected[id] }
	check := func(name string, want bool) {
		t.Helper()
		if got := roomFor(sim.f.View(), connected, sim.epoch.Add(time.Hour)); got != want {
			t.Errorf("%s: roomFor = %v; want %v", name, got, want)
		}
	}
	for _, line := range []string{"worker w1 cpu=1000", "submit run r cpu=1000"} {
		if _, err := sim.do(line); err != nil {
			t.Fatal(err)
		}
	}
	check("nothing waits", false)
	if err := sim.apply(fsm.OpSubmitGraph, &wire.SubmitGraphCommand{Header: &wire.GraphSpec{Id: "q"}, Chunks: 1, SpecDigest: []byte("d"), TaskCount: 1,
		Tasks: []*wire.TaskSpec{{Name: "x", Image: "img", Command: []string{"run"}, Resources: &wire.Resources{CpuMillis: 500, MemoryBytes: 1 << 20}}}}); err != nil {
		t.Fatal(err)
	}
	check("a waiting task without a reason", true)
	if _, err := sim.do("round"); err != nil {
		t.Fatal(err)
	}
	check("w1 full, every reason given", false)
	for _, line := range []string{"worker w2 cpu=400"} {
		if _, err := sim.do(line); err != nil {
			t.Fatal(err)
		}
	}
	check("w2 lacks the task's CPU", false)
	if _, err := sim.do("worker w3 cpu=600"); err != nil {
		t.Fatal(err)
	}
	check("w3 has room", true)
	if _, err := sim.do("disconnect w3"); err != nil {
		t.Fatal(err)
	}
	check("w3 has room but no stream", false)
	if got := nextBackoffEnd(sim.f.View(), sim.epoch); !got.IsZero() {
		t.Errorf("nextBackoffEnd = %v; want none (no task in a backoff)", got)
	}

	// A failed task waits out its backoff: no round for it before then,
	// and the loop wakes at its end.
	sim = newLeaderSim(t)
	for _, line := range []string{"worker w1 cpu=1000", "submit b y retries=1 cpu=100", "event w1 b/y#1 started", "event w1 b/y#1 failed"} {
		if _, err := sim.do(line); err != nil {
			t.Fatal(err)
		}
	}
	y := sim.f.View().Task("b/y")
	if y.State != wire.TaskState_TASK_STATE_QUEUED || y.NotBeforeUnixNanos <= sim.epoch.UnixNano() {
		t.Fatalf("b/y %s, not before %d; want QUEUED in a backoff", y.State, y.NotBeforeUnixNanos)
	}
	if roomFor(sim.f.View(), connected, sim.epoch) {
		t.Error("a task in its backoff: roomFor = true; want false")
	}
	if got := nextBackoffEnd(sim.f.View(), sim.epoch); got.UnixNano() != y.NotBeforeUnixNanos {
		t.Errorf("nextBackoffEnd = %v; want b/y's backoff end %v", got, time.Unix(0, y.NotBeforeUnixNanos))
	}
}

// A queue longer than a round considers (maxQueuedPerQueue): the tasks
// past it get a reason once (they had none, and roomFor then asked for a
// round after every change, for ever), and roomFor looks only at the
// tasks a round considers. Found by a fault trial.
func TestRoomForALongQueue(t *testing.T) {
	sim := newLeaderSim(t)
	connected := func(id string) bool { return sim.connected[id] }
	if _, err := sim.do("worker w1 cpu=1100"); err != nil {
		t.Fatal(err)
	}
	// Two tasks of 500m fill w1 but for 100m, which only the last task
	// (100m, past what a round considers) would fit.
	n := maxQueuedPerQueue + 100
	cmd := &wire.SubmitGraphCommand{Header: &wire.GraphSpec{Id: "q"}, Chunks: 1, SpecDigest: []byte("d"), TaskCount: uint32(n)}
	for i := range n {
		cpu := int64(500)
		if i == n-1 {
			cpu = 100
		}
		cmd.Tasks = append(cmd.Tasks, &wire.TaskSpec{Name: fmt.Sprintf("x%d", i), Image: "img", Command: []string{"run"},
			Resources: &wire.Resources{CpuMillis: cpu, MemoryBytes: 1 << 20}})
	}
	if err := sim.apply(fsm.OpSubmitGraph, cmd); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.do("round"); err != nil {
		t.Fatal(err)
	}
	behind := 0
	for task := range sim.f.View().Queued() {
		switch task.Reason {
		case "":
			t.Fatalf("%s waits without a reason after a round", task.ID)
		case behindReason:
			behind++
		}
	}
	if want := n - maxQueuedPerQueue; behind != want {
		t.Errorf("%d tasks say %q; want the %d past the first %d", behind, behindReason, want, maxQueuedPerQueue)
	}
	if roomFor(sim.f.View(), connected, sim.epoch.Add(time.Hour)) {
		t.Errorf("w1 full for every task a round considers (2 of %d placed), every task has its reason: roomFor = true", n)
	}
}
