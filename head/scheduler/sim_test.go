package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/megaflow/megaflow/internal/resources"
)

// sim is the small cluster the scenario files drive: workers, queued and
// running tasks, quotas. It plays the leader's part: it builds an Input,
// calls Place, and on "allocate" commits the last plan.
type sim struct {
	workers map[string]*Worker
	tasks   map[string]*simTask
	seq     uint64
	policy  Policy
	quotas  map[string]Quota // limits only; usage is computed
	cluster Quota
	last    *Plan
}

type simTask struct {
	t        Task
	worker   string // "" while queued
	gpus     []string
	starting bool
}

func newSim() *sim {
	return &sim{workers: map[string]*Worker{}, tasks: map[string]*simTask{}, quotas: map[string]Quota{}}
}

func (s *sim) do(line string) (string, error) {
	fields := strings.Fields(line)
	pos, kv := args(fields[1:])
	switch fields[0] {
	case "add-worker":
		return "", s.addWorker(pos, kv)
	case "kill-worker":
		return s.killWorker(pos)
	case "submit":
		return "", s.submit(pos, kv)
	case "policy":
		return "", s.setPolicy(kv)
	case "quota":
		return "", s.setQuota(pos, kv)
	case "place":
		return s.place(kv)
	case "allocate":
		return s.allocate()
	case "started":
		return "", s.each(pos, func(st *simTask) error {
			if !st.starting {
				return errorf("%s is not starting", st.t.ID)
			}
			st.starting = false
			s.workers[st.worker].StartsInFlight--
			return nil
		})
	case "finish":
		return "", s.each(pos, s.finish)
	case "workers":
		return s.showWorkers(), nil
	}
	return "", errorf("unknown command %q", fields[0])
}

// ids expands "t1..t3" into t1, t2, t3.
func ids(pos []string) ([]string, error) {
	var out []string
	for _, p := range pos {
		from, to, ok := strings.Cut(p, "..")
		if !ok {
			out = append(out, p)
			continue
		}
		i := strings.IndexAny(from, "0123456789")
		if i < 0 || !strings.HasPrefix(to, from[:i]) {
			return nil, errorf("bad range %q", p)
		}
		a, err1 := strconv.Atoi(from[i:])
		b, err2 := strconv.Atoi(to[i:])
		if err1 != nil || err2 != nil || a > b {
			return nil, errorf("bad range %q", p)
		}
		for n := a; n <= b; n++ {
			out = append(out, from[:i]+strconv.Itoa(n))
		}
	}
	return out, nil
}

func parseBytes(s string) (int64, error) {
	for suffix, m := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v * m, err
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

func parseMap(s string) map[string]string {
	if s == "" {
		return nil
	}
	m := map[string]string{}
	for _, p := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(p, "=")
		m[k] = v
	}
	return m
}

// request reads cpu= (millicores), mem=, gpus=, model=, gpumem=.
func request(kv map[string]string) (r resources.Resources, model string, gpuMem int64, err error) {
	num := func(key string, parse func(string) (int64, error)) int64 {
		v, ok := kv[key]
		if !ok || err != nil {
			return 0
		}
		n, e := parse(v)
		if e != nil {
			err = errorf("%s=%s: %v", key, v, e)
		}
		return n
	}
	atoi := func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }
	r = resources.Resources{CPUMillis: num("cpu", atoi), MemoryBytes: num("mem", parseBytes), GPUs: num("gpus", atoi)}
	return r, kv["model"], num("gpumem", parseBytes), err
}

func (s *sim) addWorker(pos []string, kv map[string]string) error {
	names, err := ids(pos)
	if err != nil {
		return err
	}
	capacity, model, gpuMem, err := request(kv)
	if err != nil {
		return err
	}
	maxStarts, _ := strconv.Atoi(kv["max-starts"])
	starts, _ := strconv.Atoi(kv["starts"])
	for _, id := range names {
		w := &Worker{ID: id, Capacity: capacity, Labels: parseMap(kv["labels"]), MaxConcurrentStarts: maxStarts,
			StartsInFlight: starts, Runtime: kv["runtime"], ServesSandboxes: kv["sandboxes"] == "yes"}
		if im := kv["images"]; im != "" {
			w.Images = strings.Split(im, ",")
		}
		for i := range capacity.GPUs {
			w.GPUs = append(w.GPUs, GPU{UUID: fmt.Sprintf("%s-gpu%d", id, i), Model: model, MemoryBytes: gpuMem})
		}
		s.workers[id] = w
	}
	return nil
}

func (s *sim) killWorker(pos []string) (string, error) {
	var requeued []string
	for _, id := range pos {
		if s.workers[id] == nil {
			return "", errorf("no worker %s", id)
		}
		delete(s.workers, id)
		for _, st := range s.sortedTasks() {
			if st.worker == id {
				st.worker, st.gpus, st.starting = "", nil, false
				requeued = append(requeued, st.t.ID)
			}
		}
	}
	if len(requeued) == 0 {
		return "", nil
	}
	return "requeued " + strings.Join(requeued, " "), nil
}

func (s *sim) submit(pos []string, kv map[string]string) error {
	names, err := ids(pos)
	if err != nil {
		return err
	}
	req, model, gpuMem, err := request(kv)
	if err != nil {
		return err
	}
	prio, _ := strconv.Atoi(kv["prio"])
	for _, id := range names {
		if s.tasks[id] != nil {
			return errorf("task %s exists", id)
		}
		s.seq++
		s.tasks[id] = &simTask{t: Task{ID: id, Tenant: kv["tenant"], Queue: kv["queue"], Priority: int32(prio),
			QueueSeq: s.seq, QueuedSinceUnixNanos: int64(s.seq) * 1000, Resources: req, GPUModel: model, GPUMemoryBytes: gpuMem,
			NodeSelector: parseMap(kv["selector"]), Image: kv["image"], Runtime: kv["runtime"], Gang: kv["gang"], Sandbox: kv["sandbox"] == "yes"}}
	}
	return nil
}

func (s *sim) setPolicy(kv map[string]string) error {
	atoi := func(k string) int { n, _ := strconv.Atoi(kv[k]); return n }
	if q, ok := kv["queue"]; ok {
		qp := s.policy.queue(q)
		if _, ok := kv["weight"]; ok {
			qp.Weight = atoi("weight")
		}
		if st, ok := kv["strategy"]; ok {
			qp.Strategy = map[string]Strategy{"spread": Spread, "binpack": BinPack}[st]
		}
		if q == "*" {
			s.policy.Default = qp
		} else {
			if s.policy.Queues == nil {
				s.policy.Queues = map[string]QueuePolicy{}
			}
			s.policy.Queues[q] = qp
		}
	}
	if _, ok := kv["image-bonus"]; ok {
		s.policy.ImageLocalityBonus = int64(atoi("image-bonus"))
	}
	if _, ok := kv["reservations"]; ok {
		s.policy.Reservations = atoi("reservations")
	}
	if _, ok := kv["max-placements"]; ok {
		s.policy.MaxPlacements = atoi("max-placements")
	}
	return nil
}

// setQuota handles "quota team-a running=2 cpu=... mem=... gpus=..." and
// "quota cluster running=...".
func (s *sim) setQuota(pos []string, kv map[string]string) error {
	if len(pos) != 1 {
		return errorf("quota needs a tenant (or cluster)")
	}
	max, _, _, err := request(kv)
	if err != nil {
		return err
	}
	running, _ := strconv.Atoi(kv["running"])
	q := Quota{MaxRunning: running, Max: max}
	if pos[0] == "cluster" {
		s.cluster = q
	} else {
		s.quotas[pos[0]] = q
	}
	return nil
}

func (s *sim) sortedTasks() []*simTask {
	out := make([]*simTask, 0, len(s.tasks))
	for _, st := range s.tasks {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b *simTask) int { return cmp.Compare(a.t.QueueSeq, b.t.QueueSeq) })
	return out
}

// input builds the Input the leader would: alive workers, queued tasks,
// tenant usage from the running tasks.
func (s *sim) input(seed uint64) Input {
	in := Input{Policy: s.policy, Seed: seed, Quotas: map[string]Quota{}, Cluster: s.cluster, Running: map[string]int{}}
	for _, id := range sortedKeys(s.workers) {
		in.Workers = append(in.Workers, *s.workers[id])
	}
	for tenant, q := range s.quotas {
		in.Quotas[tenant] = q
	}
	for _, st := range s.sortedTasks() {
		if st.worker == "" {
			in.Tasks = append(in.Tasks, st.t)
			continue
		}
		in.Running[st.t.Queue]++
		in.Cluster.Running++
		in.Cluster.Used = in.Cluster.Used.Add(st.t.Resources)
		if q, ok := in.Quotas[st.t.Tenant]; ok {
			q.Running++
			q.Used = q.Used.Add(st.t.Resources)
			in.Quotas[st.t.Tenant] = q
		}
	}
	return in
}

func (s *sim) place(kv map[string]string) (string, error) {
	seed, _ := strconv.ParseUint(kv["seed"], 10, 64)
	in := s.input(seed)
	p := Place(in)
	s.last = &p
	return s.formatPlan(p), nil
}

func (s *sim) formatPlan(p Plan) string {
	var b strings.Builder
	for _, pl := range p.Placements {
		fmt.Fprintf(&b, "%s -> %s", pl.TaskID, pl.WorkerID)
		if len(pl.GPUUUIDs) > 0 {
			fmt.Fprintf(&b, " gpus=%s", strings.Join(pl.GPUUUIDs, ","))
		}
		b.WriteString("\n")
	}
	for _, h := range p.Held {
		fmt.Fprintf(&b, "hold %s for %s\n", h.WorkerID, h.TaskID)
	}
	var unplaced []*simTask
	for id := range p.Unplaced {
		unplaced = append(unplaced, s.tasks[id])
	}
	slices.SortFunc(unplaced, func(a, b *simTask) int { return cmp.Compare(a.t.QueueSeq, b.t.QueueSeq) })
	// Runs of tasks (in submission order) with the same reason print as one
	// line: "s5..s30 (26 tasks): ..." or "a5, b2: ...".
	for i := 0; i < len(unplaced); {
		r := p.Unplaced[unplaced[i].t.ID]
		j := i + 1
		for j < len(unplaced) && p.Unplaced[unplaced[j].t.ID] == r {
			j++
		}
		id := unplaced[i].t.ID
		if j-i > 3 {
			id = fmt.Sprintf("%s..%s (%d tasks)", id, unplaced[j-1].t.ID, j-i)
		} else {
			for _, st := range unplaced[i+1 : j] {
				id += ", " + st.t.ID
			}
		}
		fmt.Fprintf(&b, "%s: %s: %s\n", id, r.Kind, r.Message)
		i = j
	}
	if b.Len() == 0 {
		return "nothing to place"
	}
	return b.String()
}

// allocate commits the last plan, as the leader's verifier would.
func (s *sim) allocate() (string, error) {
	if s.last == nil {
		return "", errorf("no plan")
	}
	for _, pl := range s.last.Placements {
		st, w := s.tasks[pl.TaskID], s.workers[pl.WorkerID]
		if st == nil || w == nil || st.worker != "" {
			return "", errorf("stale placement %v", pl)
		}
		w.Allocated = w.Allocated.Add(resources.Resources{CPUMillis: st.t.Resources.CPUMillis,
			MemoryBytes: st.t.Resources.MemoryBytes})
		for _, u := range pl.GPUUUIDs {
			i := slices.IndexFunc(w.GPUs, func(g GPU) bool { return g.UUID == u })
			if i < 0 || w.GPUs[i].InUse {
				return "", errorf("GPU %s of %s is not free", u, w.ID)
			}
			w.GPUs[i].InUse = true
		}
		w.StartsInFlight++
		st.worker, st.gpus, st.starting = w.ID, pl.GPUUUIDs, true
	}
	n := len(s.last.Placements)
	s.last = nil
	return fmt.Sprintf("allocated %d", n), nil
}

func (s *sim) each(pos []string, f func(*simTask) error) error {
	names, err := ids(pos)
	if err != nil {
		return err
	}
	for _, id := range names {
		st := s.tasks[id]
		if st == nil || st.worker == "" {
			return errorf("task %s is not running", id)
		}
		if err := f(st); err != nil {
			return err
		}
	}
	return nil
}

func (s *sim) finish(st *simTask) error {
	w := s.workers[st.worker]
	w.Allocated = w.Allocated.Sub(resources.Resources{CPUMillis: st.t.Resources.CPUMillis,
		MemoryBytes: st.t.Resources.MemoryBytes})
	for _, u := range st.gpus {
		i := slices.IndexFunc(w.GPUs, func(g GPU) bool { return g.UUID == u })
		w.GPUs[i].InUse = false
	}
	if st.starting {
		w.StartsInFlight--
	}
	delete(s.tasks, st.t.ID)
	return nil
}

func (s *sim) showWorkers() string {
	var b strings.Builder
	for _, id := range sortedKeys(s.workers) {
		w := s.workers[id]
		fmt.Fprintf(&b, "%s: cpu %s/%s, mem %s/%s", id, resources.FormatCPU(w.Allocated.CPUMillis),
			resources.FormatCPU(w.Capacity.CPUMillis), resources.FormatBytes(w.Allocated.MemoryBytes),
			resources.FormatBytes(w.Capacity.MemoryBytes))
		if len(w.GPUs) > 0 {
			busy := 0
			for _, g := range w.GPUs {
				if g.InUse {
					busy++
				}
			}
			fmt.Fprintf(&b, ", gpus %d/%d", busy, len(w.GPUs))
		}
		if w.StartsInFlight > 0 || w.MaxConcurrentStarts > 0 {
			fmt.Fprintf(&b, ", starting %d", w.StartsInFlight)
			if w.MaxConcurrentStarts > 0 {
				fmt.Fprintf(&b, "/%d", w.MaxConcurrentStarts)
			}
		}
		var on []string
		for _, st := range s.sortedTasks() {
			if st.worker == id {
				on = append(on, st.t.ID)
			}
		}
		if len(on) > 0 {
			fmt.Fprintf(&b, ": %s", strings.Join(on, " "))
		}
		b.WriteString("\n")
	}
	return b.String()
}
