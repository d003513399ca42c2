package fsm

import (
	"bytes"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/race"
	"github.com/megaflow/megaflow/internal/wire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// logGen generates a random but valid-looking command log: submissions
// (some chunked, some resent, some with a chunk lost, some conflicting),
// cancels of graphs and tasks (known or not), staging drops, workers coming
// and going, plans, worker events and lost attempts, deletions of graphs
// (finished ones, some right after their submission and cancel, unfinished
// and unknown ones), quotas, queued tasks failed by the leader, pre-warm
// targets, GPU health reports and rules versions. Every entry is applied
// to a reference FSM as it is generated, so that placements and events aim
// at the table's real state (current attempts, free GPUs) most of the time,
// and miss it on purpose (stale attempts, wrong workers, taken GPUs) the
// rest of the time.
type logGen struct {
	rng    *rand.Rand
	tb     testing.TB
	graphs []*wire.GraphSpec
	nanos  int64
	term   uint64
	ref    *testFSM
	out    [][]byte
	// plans, when set, draws the placements that some submissions and
	// event batches carry (SubmitGraphCommand.plan, rules 8;
	// TaskEventsCommand.plan, rules 9): a stream of its own, so that the
	// rest of the log is what rng alone gives.
	plans *rand.Rand
	// rareEvery is 1 in how many entries is followed by a rare op; 0:
	// none.
	rareEvery int
	// sandboxEvery is 1 in how many entries is followed by a sandbox op
	// of rules 3 (sandboxOp); 0: none, and the random sequence is that
	// of a generator without them.
	sandboxEvery int
	// snapshots counts the snapshot ids sandboxOp handed out; sandboxes
	// are the ids of the sandbox graphs it submitted.
	snapshots int
	sandboxes []string
	// deleted counts the graphs the reference deleted.
	deleted int
	// seen, if set, counts what the reference's table reaches, every 64
	// entries (deletions remove graphs before the end).
	seen *coverage
}

const genWorkers = 5 // worker ids w0..w4; w5 is never announced

func (g *logGen) randomGraph(id string) *wire.GraphSpec {
	n := 1 + g.rng.Intn(12)
	gs := &wire.GraphSpec{Id: id, Tenant: []string{"", "acme", "beta"}[g.rng.Intn(3)], Priority: int32(g.rng.Intn(3))}
	for i := range n {
		s := spec(fmt.Sprintf("t%d", i))
		s.Type = []string{"", "eval", "train"}[g.rng.Intn(3)]
		s.Priority = int32(g.rng.Intn(3))
		s.RunOnUpstreamFailure = g.rng.Intn(5) == 0
		s.Env = map[string]string{"K": fmt.Sprint(g.rng.Intn(3)), "B": "x"}
		s.MaxRetries = int32(g.rng.Intn(3))
		s.Resources = &wire.Resources{CpuMillis: int64(g.rng.Intn(4)) * 500, MemoryBytes: int64(g.rng.Intn(3)) << 30,
			Gpus: []int32{0, 0, 0, 1, 2}[g.rng.Intn(5)]}
		for j := range i {
			if g.rng.Intn(4) == 0 {
				s.DependsOn = append(s.DependsOn, fmt.Sprintf("t%d", j))
			}
		}
		if len(s.DependsOn) == 0 && g.rng.Intn(3) == 0 {
			s.Gang = "gang" // no member depends on anything, so on no other member
		} else if g.rng.Intn(8) == 0 {
			s.Sandbox = &wire.SandboxSpec{IdleTimeoutSeconds: 30} // a lost start fails it under rules 2
		}
		gs.Tasks = append(gs.Tasks, s)
	}
	if g.rng.Intn(2) == 0 { // a service, and tasks that use it (it may stop with the graph, or end first)
		name := []string{"model/a", "model/b"}[g.rng.Intn(2)]
		svc := spec("svc")
		svc.Kind = wire.TaskKind_TASK_KIND_SERVICE
		svc.Service = &wire.ServiceSpec{Name: name, RestartPolicy: []string{"", "on-failure", "never", "never"}[g.rng.Intn(4)]}
		for _, t := range gs.Tasks {
			if t.Gang == "" && g.rng.Intn(2) == 0 {
				t.UsesServices = []string{name}
			}
		}
		gs.Tasks = append(gs.Tasks, svc)
	}
	return gs
}

// add appends an entry to the log and applies it to the reference FSM,
// checking the table's invariants every few entries.
func (g *logGen) add(e []byte) {
	g.out = append(g.out, e)
	g.ref.index++
	if _, ok := g.ref.Apply(&raft.Log{Index: g.ref.index, Type: raft.LogCommand, Data: e}).(*DeleteGraphResult); ok {
		g.deleted++
	}
	if g.ref.index%16 == 0 {
		checkInvariants(g.tb, g.ref.View())
	}
	if g.seen != nil && g.ref.index%64 == 0 {
		g.seen.add(g.ref.View())
	}
}

func (g *logGen) cmd(op Op, msg proto.Message) { g.add(entry(g.tb, op, msg)) }

func (g *logGen) workerID() string { return fmt.Sprintf("w%d", g.rng.Intn(genWorkers+1)) }

func (g *logGen) entries(n int) [][]byte {
	if g.ref == nil {
		g.ref = newTestFSM(g.tb, 0)
	}
	g.out = nil
	for len(g.out) < n {
		g.nanos += 1 + int64(g.rng.Intn(1000))
		switch k := g.rng.Intn(20); {
		case k < 6 || len(g.graphs) == 0: // a new graph
			gs := g.randomGraph(fmt.Sprintf("g%d", len(g.graphs)))
			g.graphs = append(g.graphs, gs)
			cmds := chunkCmds(gs, 1+g.rng.Intn(5), g.nanos)
			if g.plans != nil && g.plans.Intn(3) == 0 { // the last chunk carries placements (rules 8), some of them refused
				p := &wire.PlanCommand{LeaderTerm: 7, UnixNanos: g.nanos}
				for range 1 + g.plans.Intn(4) {
					p.Attempts = append(p.Attempts, &wire.PlannedAttempt{TaskId: fmt.Sprintf("%s/t%d", gs.Id, g.plans.Intn(len(gs.Tasks)+1)),
						Attempt: 1, WorkerId: fmt.Sprintf("w%d", g.plans.Intn(genWorkers+1))})
				}
				cmds[len(cmds)-1].Plan = p
			}
			lose := len(cmds) > 1 && g.rng.Intn(6) == 0
			abandon := len(cmds) > 1 && g.rng.Intn(6) == 0 // stays staged
			for i, c := range cmds {
				if (lose && i == 0) || (abandon && i == len(cmds)-1) {
					continue
				}
				g.cmd(OpSubmitGraph, c)
				if g.rng.Intn(8) == 0 { // a resent chunk
					g.cmd(OpSubmitGraph, c)
				}
			}
		case k == 6: // resubmit or conflict with an existing graph
			gs := g.graphs[g.rng.Intn(len(g.graphs))]
			if g.rng.Intn(2) == 0 {
				gs = g.randomGraph(gs.Id)
			}
			g.cmd(OpSubmitGraph, submitCmd(gs, g.nanos))
		case k < 9: // cancel a task, maybe unknown
			gs := g.graphs[g.rng.Intn(len(g.graphs))]
			id := fmt.Sprintf("%s/t%d", gs.Id, g.rng.Intn(len(gs.Tasks)+1))
			g.cmd(OpCancel, &wire.CancelCommand{TaskId: id, Reason: "r", UnixNanos: g.nanos})
		case k == 9: // cancel a graph, maybe unknown
			id := fmt.Sprintf("g%d", g.rng.Intn(len(g.graphs)+1))
			g.cmd(OpCancel, &wire.CancelCommand{GraphId: id, UnixNanos: g.nanos})
		case k == 10: // the sweeper
			g.cmd(OpDropStaged, &wire.DropStagedCommand{
				GraphIds: []string{fmt.Sprintf("g%d", g.rng.Intn(len(g.graphs)))}, UnixNanos: g.nanos})
		case k == 11: // a worker announces itself
			g.cmd(OpWorkerUpsert, &wire.WorkerUpsertCommand{UnixNanos: g.nanos, Info: &wire.WorkerInfo{
				Id:       fmt.Sprintf("w%d", g.rng.Intn(genWorkers)),
				Capacity: &wire.Resources{CpuMillis: 1000 * int64(1+g.rng.Intn(8)), MemoryBytes: int64(1+g.rng.Intn(8)) << 30, Gpus: int32(g.rng.Intn(5))},
				Labels:   map[string]string{"zone": fmt.Sprint(g.rng.Intn(2)), "pool": "p", "a": "b"},
				Runtime:  "fake"}})
		case k == 12: // a worker dies or leaves, maybe unknown
			g.cmd(OpWorkerDown, &wire.WorkerDownCommand{WorkerId: g.workerID(), Reason: []string{"heartbeat", "gossip: dead"}[g.rng.Intn(2)],
				Left: g.rng.Intn(3) == 0, UnixNanos: g.nanos})
		case k < 16:
			g.plan()
		case k < 19:
			g.events()
		default:
			g.lost()
		}
		if g.rareEvery > 0 && g.rng.Intn(g.rareEvery) == 0 {
			g.rare()
		}
		if g.sandboxEvery > 0 && g.rng.Intn(g.sandboxEvery) == 0 {
			g.sandboxOp()
		}
		if g.rng.Intn(100) == 0 { // the leader raises the rules version (or repeats one)
			g.cmd(OpSetRules, wrapperspb.UInt64(uint64(g.rng.Intn(int(RulesCurrent)+1))))
		}
		if g.rng.Intn(50) == 0 { // an op from a newer version
			g.add([]byte{byte(OpIgnorable | 0x10), 1, 2, 3})
		}
	}
	return g.out
}

// rare appends one of the ops that come seldom: a deletion (of a finished
// graph mostly; of a new graph cancelled at once, so that submit, cancel and
// delete may share a batch; of an unfinished or unknown graph, refused), a
// quota, a failure of queued tasks, a pre-warm target, a GPU health report,
// an archiving (rules 5: refused below; finished graphs mostly, some not
// archivable, some archived summaries dropped, an archived graph
// resubmitted).
func (g *logGen) rare() {
	v := g.ref.View()
	switch k := g.rng.Intn(9); {
	case k == 8:
		cmd := &wire.ArchiveGraphsCommand{UnixNanos: g.nanos}
		for gr := range v.Graphs() {
			if g.rng.Intn(2) == 0 {
				cmd.GraphIds = append(cmd.GraphIds, gr.ID) // running ones are skipped
			}
		}
		var archived []string
		for gr := range v.ArchivedGraphs() {
			archived = append(archived, gr.GetId())
		}
		for _, id := range archived {
			if g.rng.Intn(4) == 0 {
				cmd.DropIds = append(cmd.DropIds, id)
			}
		}
		cmd.GraphIds, cmd.DropIds = cmd.GraphIds[:min(len(cmd.GraphIds), MaxArchiveBatch)], cmd.DropIds[:min(len(cmd.DropIds), MaxArchiveBatch)]
		g.cmd(OpArchiveGraphs, cmd)
		if len(archived) > 0 { // a retry of an archived graph: existed, nothing runs
			for _, gs := range g.graphs {
				if gs.Id == archived[0] {
					g.cmd(OpSubmitGraph, submitCmd(gs, g.nanos))
				}
			}
		}
	case k < 2: // delete a finished graph, or try an unfinished or unknown one
		var done []string
		for gr := range v.Graphs() {
			if state.IsGraphTerminal(gr.State) {
				done = append(done, gr.ID)
			}
		}
		id := fmt.Sprintf("g%d", g.rng.Intn(len(g.graphs)+1))
		if len(done) > 0 && g.rng.Intn(4) != 0 {
			id = done[g.rng.Intn(len(done))]
		}
		g.cmd(OpDeleteGraph, &wire.DeleteGraphCommand{GraphId: id, UnixNanos: g.nanos})
	case k == 2: // submit, cancel and delete at once
		gs := g.randomGraph(fmt.Sprintf("g%d", len(g.graphs)))
		g.graphs = append(g.graphs, gs)
		g.cmd(OpSubmitGraph, submitCmd(gs, g.nanos))
		g.cmd(OpCancel, &wire.CancelCommand{GraphId: gs.Id, Reason: "at once", UnixNanos: g.nanos})
		g.cmd(OpDeleteGraph, &wire.DeleteGraphCommand{GraphId: gs.Id, UnixNanos: g.nanos})
	case k == 3:
		// A tenant's limits, or none (all zero); seldom the cluster's.
		// Loose enough that the histories still run tasks to their end.
		q := &wire.Quota{Tenant: []string{"acme", "beta", "acme", "beta", ""}[g.rng.Intn(5)]}
		if g.rng.Intn(3) != 0 {
			q.MaxRunning, q.CpuMillis, q.Gpus = int32(4+g.rng.Intn(8)), int64(4+g.rng.Intn(8))*1000, int32(2+g.rng.Intn(4))
		}
		g.cmd(OpSetQuota, &wire.SetQuotaCommand{UnixNanos: g.nanos, Quota: q})
	case k == 4: // the leader fails tasks queued for too long, some no longer queued
		cmd := &wire.FailQueuedCommand{QueuedBeforeUnixNanos: g.nanos - int64(g.rng.Intn(5000)), UnixNanos: g.nanos}
		for _, q := range []string{"", "eval", "train"} {
			for t := range v.QueuedTasks(q) {
				if g.rng.Intn(4) == 0 {
					cmd.TaskIds, cmd.Reasons = append(cmd.TaskIds, t.ID), append(cmd.Reasons, "no worker fits")
				}
			}
		}
		if g.rng.Intn(3) == 0 && len(g.graphs) > 0 {
			cmd.TaskIds, cmd.Reasons = append(cmd.TaskIds, g.graphs[0].Id+"/t0"), append(cmd.Reasons, "maybe not queued")
		}
		g.cmd(OpFailQueued, cmd)
	case k == 5:
		g.cmd(OpPoolWarm, &wire.PoolWarmCommand{UnixNanos: g.nanos, Target: &wire.PoolTarget{
			Image: []string{"img", "other"}[g.rng.Intn(2)], Size: int32(g.rng.Intn(3)),
			Tenant: []string{"", "acme"}[g.rng.Intn(2)], CpuMillis: 500}})
	default: // GPU health: some GPUs unhealthy (those in use lose their attempts), or all healthy again
		w := g.workerID()
		cmd := &wire.GpuHealthCommand{WorkerId: w, UnixNanos: g.nanos}
		if g.rng.Intn(3) != 0 {
			cmd.Unhealthy = map[string]string{fmt.Sprintf("GPU-%d", g.rng.Intn(4)): "Xid 79"}
		}
		g.cmd(OpGpuHealth, cmd)
	}
}

// sandboxOp appends one of the sandbox ops of rules 3 and 4 (refused,
// changing nothing, below them): a new sandbox graph (one "box" task with
// a sandbox spec and a deadline), a sandbox's new deadline (of a sandbox,
// mostly; of a plain graph, an ended sandbox or out of range, refused), a
// snapshot of a sandbox on an ALIVE worker (mostly; of a plain graph or on
// another worker, refused; its id new, mostly; taken, refused; a tenant
// over the bound of 4, refused), a snapshot's deletion (maybe unknown), or
// (rules 4) a sandbox's pause or resume (of a running sandbox's current
// attempt, mostly; of a sandbox not running, a wrong attempt or a plain
// graph, refused).
// Workers going down (entries) take their snapshots with them. (The pause
// came after the rules2-3 golden log was written: its generator no longer
// writes that log.)
func (g *logGen) sandboxOp() {
	pick := func() string {
		if len(g.sandboxes) > 0 && g.rng.Intn(5) != 0 {
			return g.sandboxes[g.rng.Intn(len(g.sandboxes))]
		}
		return g.graphs[g.rng.Intn(len(g.graphs))].Id
	}
	switch k := g.rng.Intn(7); {
	case k < 2 || len(g.graphs) == 0:
		box := spec(sandboxTaskName)
		box.Sandbox = &wire.SandboxSpec{IdleTimeoutSeconds: 30}
		gs := &wire.GraphSpec{Id: fmt.Sprintf("sbx-%d", len(g.graphs)), Tenant: []string{"acme", "beta"}[g.rng.Intn(2)],
			DeadlineSeconds: 3600, Tasks: []*wire.TaskSpec{box}}
		g.graphs, g.sandboxes = append(g.graphs, gs), append(g.sandboxes, gs.Id)
		g.cmd(OpSubmitGraph, submitCmd(gs, g.nanos))
	case k == 2:
		secs := []int64{60, 7200, 86400, 0}[g.rng.Intn(4)]
		g.cmd(OpSandboxSetDeadline, &wire.SandboxSetDeadlineCommand{GraphId: pick(), DeadlineSeconds: secs, UnixNanos: g.nanos})
	case k < 5:
		if g.rng.Intn(8) != 0 || g.snapshots == 0 {
			g.snapshots++
		}
		id := fmt.Sprintf("snap-%d", g.snapshots)
		worker := g.workerID()
		if alive := g.ref.View().AliveWorkers(); len(alive) > 0 && g.rng.Intn(5) != 0 {
			worker = alive[g.rng.Intn(len(alive))].ID()
		}
		g.cmd(OpSnapshotAdd, &wire.SnapshotAddCommand{MaxPerTenant: 4, Snapshot: &wire.Snapshot{
			Id: id, Tenant: []string{"acme", "beta"}[g.rng.Intn(2)], SandboxId: pick(), WorkerId: worker,
			Image: "megaflow-snapshot:" + id, ImageId: "sha256:abc", SizeBytes: int64(g.rng.Intn(1 << 20)), CreateUnixNanos: g.nanos}})
	case k == 5:
		g.cmd(OpSnapshotDelete, &wire.SnapshotDeleteCommand{Id: fmt.Sprintf("snap-%d", 1+g.rng.Intn(g.snapshots+1))})
	default:
		v := g.ref.View()
		var running []string
		for _, id := range g.sandboxes {
			if t := v.Task(id + "/" + sandboxTaskName); t != nil && t.State == wire.TaskState_TASK_STATE_RUNNING {
				running = append(running, id)
			}
		}
		id := pick()
		if len(running) > 0 && g.rng.Intn(4) != 0 {
			id = running[g.rng.Intn(len(running))]
		}
		n := uint32(1 + g.rng.Intn(2))
		if t := v.Task(id + "/" + sandboxTaskName); t != nil && len(t.Attempts) > 0 && g.rng.Intn(5) != 0 {
			n = t.CurrentAttempt().Number
		}
		g.cmd(OpSandboxPause, &wire.SandboxPauseCommand{GraphId: id, Attempt: n, Paused: g.rng.Intn(3) != 0, UnixNanos: g.nanos})
	}
}

// sandboxTaskName is the name of a sandbox graph's one task
// (internal/spec.SandboxTaskName; the package name is taken by spec here).
const sandboxTaskName = "box"

// plan places some QUEUED tasks, mostly on ALIVE workers with room and free
// GPUs, and gives some others a queueing reason.
func (g *logGen) plan() {
	v := g.ref.View()
	if g.rng.Intn(10) == 0 {
		g.term++
	}
	var queued []*state.Task
	for _, q := range []string{"", "eval", "train"} {
		for t := range v.QueuedTasks(q) {
			queued = append(queued, t)
		}
	}
	g.rng.Shuffle(len(queued), func(i, j int) { queued[i], queued[j] = queued[j], queued[i] })
	alive := v.AliveWorkers()
	cmd := &wire.PlanCommand{LeaderTerm: g.term, UnixNanos: g.nanos}
	for i, t := range queued {
		if i >= 6 {
			if g.rng.Intn(2) == 0 {
				if cmd.Unplaced == nil {
					cmd.Unplaced = map[string]string{}
				}
				cmd.Unplaced[t.ID] = []string{"no room", "quota", "no GPU"}[g.rng.Intn(3)]
			}
			continue
		}
		p := &wire.PlannedAttempt{TaskId: t.ID, Attempt: uint32(len(t.Attempts)) + 1, WorkerId: g.workerID()}
		if len(alive) > 0 && g.rng.Intn(5) != 0 {
			p.WorkerId = alive[g.rng.Intn(len(alive))].ID()
		}
		if g.rng.Intn(10) == 0 {
			p.Attempt += uint32(g.rng.Intn(3)) - 1
		}
		need := int(t.Spec.GetResources().GetGpus())
		if w := v.Worker(p.WorkerId); w != nil && need > 0 && g.rng.Intn(4) != 0 {
			n := int(w.Info.GetCapacity().GetGpus())
			for _, d := range g.rng.Perm(n + 1) { // GPU-n does not exist: the table does not know
				u := fmt.Sprintf("GPU-%d", d)
				if w.GPUHolder(u) == "" || g.rng.Intn(5) == 0 {
					p.GpuUuids = append(p.GpuUuids, u)
				}
				if len(p.GpuUuids) == need {
					break
				}
			}
		}
		cmd.Attempts = append(cmd.Attempts, p)
		if g.rng.Intn(10) == 0 { // placed twice in one plan
			cmd.Attempts = append(cmd.Attempts, p)
		}
	}
	if len(g.graphs) > 0 && g.rng.Intn(2) == 0 { // a whole gang, one worker each when there are enough
		members := v.GangMembers(g.graphs[g.rng.Intn(len(g.graphs))].Id, "gang")
		ws := g.rng.Perm(len(alive))
		for i, t := range members {
			if i < len(ws) {
				cmd.Attempts = append(cmd.Attempts, &wire.PlannedAttempt{TaskId: t.ID, Attempt: uint32(len(t.Attempts)) + 1, WorkerId: alive[ws[i]].ID()})
			}
		}
	}
	g.cmd(OpPlan, cmd)
}

// events reports events of the attempts on a worker, mostly current ones
// from the right worker, with duplicates, stale attempts and strangers.
func (g *logGen) events() {
	v := g.ref.View()
	w := g.workerID()
	// Backoffs for both rules versions: the leader's waits (rules 0) and the
	// parameters and seed the FSM computes them from (rules 1).
	base := int64(g.rng.Intn(3)) * 1e9
	cmd := &wire.TaskEventsCommand{WorkerId: w, UnixNanos: g.nanos,
		RetrySeed: g.rng.Uint64(), RetryBackoffBaseNanos: base, RetryBackoffMaxNanos: 8 * base}
	if g.rng.Intn(8) == 0 {
		cmd.WorkerId = g.workerID()
	}
	for _, t := range v.AssignedTo(w) {
		if g.rng.Intn(3) == 0 {
			continue
		}
		a := t.CurrentAttempt()
		ev := &wire.AttemptEvent{TaskId: t.ID, Attempt: a.Number, UnixNanos: g.nanos - 1}
		if g.rng.Intn(10) == 0 {
			ev.Attempt--
		}
		switch k := g.rng.Intn(12); {
		case k < 4:
			ev.Kind = kStarted
		case k < 7:
			ev.Kind, ev.Result = kExited, []byte(fmt.Sprintf(`{"r":%d}`, g.rng.Intn(100)))
			if g.rng.Intn(100) == 0 {
				ev.Result = make([]byte, state.MaxResultBytes+1)
			}
		case k < 8:
			ev.Kind, ev.ExitCode = kExited, int32(1+g.rng.Intn(3))
		case k < 9:
			ev.Kind, ev.Reason, ev.OomKilled = kFailed, "crashed", g.rng.Intn(2) == 0
		case k < 10:
			ev.Kind = kTimedOut
		default:
			ev.Kind = kStopped
		}
		cmd.Events = append(cmd.Events, ev)
		cmd.RetryBackoffNanos = append(cmd.RetryBackoffNanos, int64(g.rng.Intn(3))*1e9)
		if g.rng.Intn(5) == 0 { // delivered twice
			cmd.Events = append(cmd.Events, ev)
		}
	}
	if g.plans != nil && g.plans.Intn(3) == 0 { // the batch carries placements (rules 9), some of them refused
		var queuedTasks []*state.Task
		for t := range v.Queued() {
			queuedTasks = append(queuedTasks, t)
		}
		p := &wire.PlanCommand{LeaderTerm: 7, UnixNanos: g.nanos}
		for range 1 + g.plans.Intn(4) {
			pa := &wire.PlannedAttempt{TaskId: "g0/t0", Attempt: 1, WorkerId: fmt.Sprintf("w%d", g.plans.Intn(genWorkers+1))}
			if len(queuedTasks) > 0 {
				t := queuedTasks[g.plans.Intn(len(queuedTasks))]
				pa.TaskId, pa.Attempt = t.ID, uint32(len(t.Attempts))+1+uint32(g.plans.Intn(5)/4)
			}
			p.Attempts = append(p.Attempts, pa)
		}
		cmd.Plan = p
	}
	g.cmd(OpTaskEvents, cmd)
}

// lost marks some attempts on a worker lost, and some that are not there.
func (g *logGen) lost() {
	v := g.ref.View()
	w := g.workerID()
	cmd := &wire.AttemptsLostCommand{Reason: "not running after reconnect", UnixNanos: g.nanos}
	for _, t := range v.AssignedTo(w) {
		if g.rng.Intn(2) == 0 {
			continue
		}
		p := &wire.PlannedAttempt{TaskId: t.ID, Attempt: t.CurrentAttempt().Number, WorkerId: w}
		if g.rng.Intn(6) == 0 {
			p.WorkerId = g.workerID()
		}
		cmd.Attempts = append(cmd.Attempts, p)
	}
	g.cmd(OpAttemptsLost, cmd)
}

func applyAll(f *testFSM, entries [][]byte, batched bool, rng *rand.Rand) {
	for i := 0; i < len(entries); {
		n := 1
		if batched {
			n = 1 + rng.Intn(8)
		}
		var logs []*raft.Log
		for ; n > 0 && i < len(entries); n-- {
			f.index++
			logs = append(logs, &raft.Log{Index: f.index, Type: raft.LogCommand, Data: entries[i]})
			i++
		}
		if batched {
			f.ApplyBatch(logs)
		} else {
			f.Apply(logs[0])
		}
	}
}

// TestDeterminism applies the same random log to two FSMs (one entry at a
// time and in batches) and checks equal tables and events; then restores a
// third from a snapshot of the first and checks it equal, before and after
// more entries.
func TestDeterminism(t *testing.T) {
	race.SkipPure(t)
	var seen coverage
	defer func() {
		if t.Failed() {
			return
		}
		// The random mix must reach every path it is meant to test.
		for name, n := range map[string]int{"succeeded": seen.succeeded, "retried": seen.retried, "lost": seen.lost,
			"lost 3 times": seen.lostOut, "timed out": seen.timedOut, "stopping": seen.stopping, "stopped": seen.stopped,
			"gpus pinned": seen.gpus, "workers down": seen.down, "queue reasons": seen.reasons,
			"services stopped with their graph": seen.servicesStopped, "waiters of an ended service cancelled": seen.waitersCancelled,
			"sandboxes lost": seen.sandboxesLost} {
			if n == 0 {
				t.Errorf("no %s in any history", name)
			}
		}
		t.Logf("%+v", seen)
	}()
	deleted := 0
	// Seeds 1 to 20 without the rare ops, 21 to 32 with them (deletions
	// remove much of what the coverage above looks for).
	for seed := int64(1); seed <= 32; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			gen := &logGen{rng: rand.New(rand.NewSource(seed)), plans: rand.New(rand.NewSource(seed)), tb: t, seen: &seen}
			if seed > 20 {
				gen.rareEvery = 6
			}
			// The snapshot is taken at a random point of the history.
			first := gen.entries(1 + rng.Intn(399))
			a, b := newTestFSM(t, 0), newTestFSM(t, 0)
			applyAll(a, first, false, nil)
			applyAll(b, first, true, rand.New(rand.NewSource(seed)))
			checkInvariants(t, a.View())
			da, db := dump(t, a.View()), dump(t, b.View())
			if d := DiffDumps(da, db, 20); d != "" {
				t.Fatalf("one entry at a time and in batches, tables differ after %d entries:\n%s", len(first), d)
			}
			if a.View().Index() != b.View().Index() || a.AppliedIndex() != b.AppliedIndex() {
				t.Fatal("indexes differ")
			}
			ea, _, _ := a.EventsAfter(Cursor{}, "", 1<<20)
			eb, _, _ := b.EventsAfter(Cursor{}, "", 1<<20)
			if fmtEvents(ea) != fmtEvents(eb) || len(ea) == 0 {
				t.Fatal("events differ")
			}

			snap := snapshotBytes(t, a.View())
			c := newTestFSM(t, 0)
			if err := c.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
				t.Fatal(err)
			}
			c.index = a.index
			if d := DiffDumps(da, dump(t, c.View()), 20); d != "" {
				t.Fatalf("restored table differs:\n%s", d)
			}
			if !bytes.Equal(snap, snapshotBytes(t, c.View())) {
				t.Fatal("snapshot of the restored table differs")
			}

			// The rest of the history: one at a time, in batches, and in
			// batches on the restored table.
			more := gen.entries(400 - len(first))
			applyAll(a, more, false, nil)
			applyAll(b, more, true, rand.New(rand.NewSource(seed+1000)))
			applyAll(c, more, true, rand.New(rand.NewSource(seed)))
			for name, other := range map[string]*testFSM{"in batches": b, "from the snapshot": c, "reference": gen.ref} {
				if d := DiffDumps(dump(t, a.View()), dump(t, other.View()), 20); d != "" {
					t.Fatalf("all %d entries, one at a time and %s, tables differ:\n%s", len(first)+len(more), name, d)
				}
			}
			if !bytes.Equal(snapshotBytes(t, a.View()), snapshotBytes(t, c.View())) {
				t.Fatal("snapshots differ at the end")
			}
			checkInvariants(t, c.View())
			deleted += gen.deleted
		})
	}
	if deleted == 0 {
		t.Error("no graph deleted in any history")
	}
}

// checkInvariants checks what every table must satisfy: graph counts match
// their tasks, a graph is terminal exactly when its tasks are, dependencies
// agree with states; every worker holds exactly what its active attempts
// hold (state.View.VerifyAccounting: resources released on every path, no
// GPU held twice); attempts are numbered in order, only the current one may
// be active, and it is active exactly while its task is ASSIGNED or RUNNING
// (or CANCELLED and being stopped); a result only with success; retries and
// losses within their bounds. Tasks reach ASSIGNED only through plans here,
// so every ASSIGNED or RUNNING task has an attempt.
func checkInvariants(t testing.TB, v *state.View) {
	t.Helper()
	if err := v.VerifyAccounting(); err != nil {
		t.Errorf("accounting: %v", err)
	}
	for task := range v.Tasks() {
		for i, a := range task.Attempts {
			if a.Number != uint32(i+1) || (!a.Active() && a.FinishUnixNanos < a.AssignUnixNanos) {
				t.Errorf("%s: attempt %d: %+v", task.ID, i+1, a)
			}
		}
		switch a := task.ActiveAttempt(); {
		case state.IsActive(task.State) && a == nil:
			t.Errorf("%s: %s without an active attempt", task.ID, task.State)
		case a != nil && !state.IsActive(task.State) && task.State != cancelled &&
			!(task.State == wire.TaskState_TASK_STATE_QUEUED && task.Spec.GetGang() != ""): // a gang restarting
			t.Errorf("%s: %s with attempt %d active", task.ID, task.State, a.Number)
		}
		if (task.Result != nil && task.State != succeeded) || task.LostCount > state.MaxLostAttempts ||
			task.RetriesUsed > uint32(max(task.Spec.GetMaxRetries(), 0)) {
			t.Errorf("%s: %s result %d bytes, lost %d, retries %d of %d", task.ID, task.State, len(task.Result),
				task.LostCount, task.RetriesUsed, task.Spec.GetMaxRetries())
		}
		if task.ReasonCode == wire.ReasonCode_REASON_CODE_SANDBOX_LOST && (task.Spec.GetSandbox() == nil || task.State != failed) {
			t.Errorf("%s: %s with SANDBOX_LOST, sandbox %v", task.ID, task.State, task.Spec.GetSandbox())
		}
		if task.State == failed && task.LostCount == state.MaxLostAttempts && task.Reason != "lost 3 times" {
			t.Errorf("%s: FAILED after %d losses with reason %q", task.ID, task.LostCount, task.Reason)
		}
	}
	for g := range v.Graphs() {
		var counts state.StateCounts
		tasks := v.TasksOfGraph(g.ID)
		allDone := true
		for _, task := range tasks {
			counts[task.State]++
			allDone = allDone && state.IsTerminal(task.State)
			switch task.State {
			case pending:
				if task.DepsRemaining == 0 {
					t.Errorf("%s: PENDING without dependencies", task.ID)
				}
			case queued:
				if task.DepsRemaining != 0 || task.QueueSeq == 0 {
					t.Errorf("%s: QUEUED with deps %d seq %d", task.ID, task.DepsRemaining, task.QueueSeq)
				}
			}
		}
		if counts != g.Counts || int(g.TaskCount) != len(tasks) {
			t.Errorf("%s: counts %v, tasks say %v", g.ID, g.Counts, counts)
		}
		if allDone != state.IsGraphTerminal(g.State) {
			t.Errorf("%s: %s with all tasks terminal = %v", g.ID, g.State, allDone)
		}
		// Services stop with their graph: none is live once every batch
		// task has ended; and no task of a graph waits for a service its
		// graph provided that ended with no provider left anywhere.
		batch, batchDone := 0, true
		for _, task := range tasks {
			if task.ServiceName() == "" {
				batch++
				batchDone = batchDone && state.IsTerminal(task.State)
			}
		}
		for _, task := range tasks {
			if name := task.ServiceName(); name != "" && batch > 0 && batchDone && !state.IsTerminal(task.State) {
				t.Errorf("%s: service %s is %s though every batch task of its graph has ended", task.ID, name, task.State)
			}
			if task.State != pending && task.State != queued {
				continue
			}
			for _, name := range task.Spec.GetUsesServices() {
				providedHere, live := false, len(v.Service(name).Tasks) > 0
				for _, p := range tasks {
					providedHere = providedHere || (p.ServiceName() == name && state.IsTerminal(p.State))
				}
				if providedHere && !live {
					t.Errorf("%s: %s waiting for service %s, which its graph provided and no task provides any more", task.ID, task.State, name)
				}
			}
		}
	}
}

// coverage counts what random histories reached.
type coverage struct {
	succeeded, retried, lost, lostOut, timedOut, stopping, stopped, gpus, down, reasons int
	// servicesStopped: services stopped with their graph; waitersCancelled:
	// tasks cancelled because their graph's service ended.
	servicesStopped, waitersCancelled int
	// sandboxesLost: sandboxes failed by a loss after they started (rules 2).
	sandboxesLost int
}

func (c *coverage) add(v *state.View) {
	for t := range v.Tasks() {
		a := t.CurrentAttempt()
		switch {
		case t.State == succeeded && a != nil:
			c.succeeded++
		case t.State == wire.TaskState_TASK_STATE_TIMED_OUT:
			c.timedOut++
		case t.Stopping():
			c.stopping++
		case t.State == cancelled && a != nil && a.State == cancelled:
			c.stopped++
		}
		if t.RetriesUsed > 0 {
			c.retried++
		}
		if t.LostCount > 0 {
			c.lost++
		}
		if t.LostCount == state.MaxLostAttempts {
			c.lostOut++
		}
		if t.ReasonCode == wire.ReasonCode_REASON_CODE_SANDBOX_LOST {
			c.sandboxesLost++
		}
		if a != nil && len(a.GPUUUIDs) > 0 {
			c.gpus++
		}
		if t.State == queued && t.Reason != "" {
			c.reasons++
		}
		if t.State == cancelled && t.Reason == state.ReasonStoppedWithGraph {
			c.servicesStopped++
		}
		if t.State == cancelled && strings.HasPrefix(t.Reason, "service ") {
			c.waitersCancelled++
		}
	}
	for _, w := range v.Workers() {
		if !w.Alive() {
			c.down++
		}
	}
}
