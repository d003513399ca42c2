package harness

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/chaos/history"
	"github.com/megaflow/megaflow/internal/errs"
)

// graphRef is a graph the workload submitted.
type graphRef struct {
	id    string
	tasks []string // task ids
	owner int
	// acked: the submit was acknowledged (else its outcome is unknown).
	acked bool
}

// workload is the clients' shared state: the graphs submitted so far.
type workload struct {
	cfg     *Config
	c       *cluster
	rec     *history.Recorder
	execDir string

	mu     sync.Mutex
	graphs []graphRef
}

func newWorkload(cfg *Config, c *cluster, rec *history.Recorder) *workload {
	return &workload{cfg: cfg, c: c, rec: rec, execDir: filepath.Join(cfg.Dir, "hosts")}
}

// run runs the clients and two watchers until ctx ends.
func (w *workload) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range w.cfg.Clients {
		wg.Add(1)
		go func() { defer wg.Done(); w.client(ctx, i) }()
	}
	for i := range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); w.watch(ctx, 1000+i) }()
	}
	wg.Wait()
}

// dial returns a client of every head, starting at head n%3.
func (w *workload) dial(ctx context.Context, n int) (*client.Client, error) {
	addrs := append([]string(nil), w.c.grpc[n%len(w.c.grpc):]...)
	addrs = append(addrs, w.c.grpc[:n%len(w.c.grpc)]...)
	return client.Dial(ctx, addrs, client.WithBackoff(20*time.Millisecond, 500*time.Millisecond))
}

// client is one workload client: a loop of submits (1-task and 50-task
// graphs), cancels and reads, each recorded.
func (w *workload) client(ctx context.Context, n int) {
	cl, err := w.dial(ctx, n)
	if err != nil {
		w.cfg.say("chaos: client %d: %v", n, err)
		return
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(n)+1))
	seq := 0
	for ctx.Err() == nil {
		switch r := rng.IntN(100); {
		case r < 25:
			seq++
			w.submit(ctx, cl, n, fmt.Sprintf("c%d-%d", n, seq), 1, rng)
		case r < 26:
			seq++
			w.submit(ctx, cl, n, fmt.Sprintf("c%d-%d", n, seq), 50, rng)
		case r < 34:
			if g, ok := w.pick(n, rng); ok {
				w.cancel(ctx, cl, n, g, rng)
			}
		default:
			if g, ok := w.pick(n, rng); ok {
				w.read(ctx, cl, n, g, rng.IntN(100) < 40)
			}
		}
		if w.cfg.Pace > 0 {
			sleepUntil(ctx, time.Now().Add(w.cfg.Pace/2+time.Duration(rng.Int64N(int64(w.cfg.Pace)))))
		}
	}
}

// pick returns one of the graphs submitted: one of the client's own 20
// newest in 2 cases of 3, else any.
func (w *workload) pick(n int, rng *rand.Rand) (graphRef, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.graphs) == 0 {
		return graphRef{}, false
	}
	if rng.IntN(3) < 2 {
		for i, seen := len(w.graphs)-1, 0; i >= 0 && seen < 20*w.cfg.Clients; i, seen = i-1, seen+1 {
			if g := w.graphs[i]; g.owner == n && rng.IntN(4) == 0 {
				return g, true
			}
		}
	}
	return w.graphs[rng.IntN(len(w.graphs))], true
}

// taskCommand is a task's argv: it appends "start <attempt> <worker> <ns>"
// to its execution file on its worker's host, sleeps, appends "end ...",
// and exits with code. Stopped by SIGTERM or SIGINT (a cancel, its
// timeout, its worker's lease lapsing, its init), it appends "stop ..."
// instead, so that the verdict knows when it stopped running; SIGKILL
// leaves no end line.
func (w *workload) taskCommand(graph, task string, sleep float64, code int) []string {
	f := filepath.Join(w.execDir, "$MEGAFLOW_WORKER_ID", "exec", graph+"__"+task)
	script := fmt.Sprintf(`trap 'echo "stop $MEGAFLOW_ATTEMPT $MEGAFLOW_WORKER_ID $(date +%%s%%N)" >> %[1]s; exit 143' TERM INT; `+
		`echo "start $MEGAFLOW_ATTEMPT $MEGAFLOW_WORKER_ID $(date +%%s%%N)" >> %[1]s; sleep %.2[2]f; `+
		`echo "end $MEGAFLOW_ATTEMPT $MEGAFLOW_WORKER_ID $(date +%%s%%N)" >> %[1]s; exit %[3]d`, f, sleep, code)
	return []string{"sh", "-c", script}
}

// opErr classifies a call's error: notFound and failed are definite
// answers that changed nothing; anything else leaves the outcome unknown.
func opErr(err error) (notFound, failed bool) {
	switch errs.ClassOf(err) {
	case errs.NotFound:
		return true, false
	case errs.InvalidArgument, errs.AlreadyExists, errs.FailedPrecondition:
		return false, true
	}
	return false, false
}

func (w *workload) finishOp(op *history.Op, err error) {
	op.Return = w.rec.Now()
	if err != nil {
		op.Err = err.Error()
		op.NotFound, op.Failed = opErr(err)
		if !op.NotFound && !op.Failed {
			op.Return = history.Unknown
		}
		if errors.Is(err, context.Canceled) {
			op.Return = history.Unknown
		}
	}
	w.rec.Add(*op)
}

func (w *workload) submit(ctx context.Context, cl *client.Client, n int, id string, size int, rng *rand.Rand) {
	g := &client.GraphSpec{Id: id, Tenant: "chaos"}
	var ids []string
	for i := range size {
		name := fmt.Sprintf("t%d", i)
		ts := &client.TaskSpec{Name: name, Image: "none", MaxRetries: 5, Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 16 << 20}}
		switch r := rng.IntN(10); {
		case size == 1 && r == 0: // fails: one retry, then FAILED
			ts.Command, ts.MaxRetries = w.taskCommand(id, name, 0.1, 3), 1
		case size == 1 && r == 1: // times out
			ts.Command, ts.MaxRetries, ts.TimeoutSeconds = w.taskCommand(id, name, 3, 0), 0, 1
		case size == 1 && r == 2 && rng.IntN(2) == 0: // long: outlives the lease and margin, so a freeze or kill of its worker re-queues it
			ts.Command = w.taskCommand(id, name, 6, 0)
		default:
			ts.Command = w.taskCommand(id, name, 0.2+0.3*rng.Float64(), 0)
		}
		g.Tasks = append(g.Tasks, ts)
		ids = append(ids, id+"/"+name)
	}
	op := history.Op{Client: n, Kind: history.Submit, Graph: id, Tasks: ids, Call: w.rec.Now()}
	cctx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	res, err := cl.Submit(cctx, g)
	cancel()
	if err == nil {
		op.Index = res.Index
	}
	w.finishOp(&op, err)
	if err == nil || op.Return == history.Unknown {
		w.mu.Lock()
		w.graphs = append(w.graphs, graphRef{id: id, tasks: ids, owner: n, acked: err == nil})
		w.mu.Unlock()
	}
}

func (w *workload) cancel(ctx context.Context, cl *client.Client, n int, g graphRef, rng *rand.Rand) {
	op := history.Op{Client: n, Graph: g.id, Tasks: g.tasks, Call: w.rec.Now()}
	cctx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	var err error
	if len(g.tasks) == 1 && rng.IntN(2) == 0 {
		op.Kind = history.CancelTask
		op.Cancelled, err = cl.CancelTask(cctx, g.tasks[0], "chaos")
	} else {
		op.Kind = history.CancelGraph
		op.Cancelled, err = cl.CancelGraph(cctx, g.id, "chaos")
	}
	cancel()
	w.finishOp(&op, err)
}

func (w *workload) read(ctx context.Context, cl *client.Client, n int, g graphRef, lin bool) {
	op := history.Op{Client: n, Kind: history.Read, Graph: g.id, Tasks: g.tasks, Call: w.rec.Now(), Linearizable: lin}
	ro := client.ReadOptions{RequireLeader: lin}
	cctx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	defer cancel()
	if len(g.tasks) == 1 {
		t, meta, err := cl.GetTask(cctx, g.tasks[0], ro)
		if err == nil {
			op.Views, op.Index = []history.TaskView{taskView(t)}, meta.GetIndex()
		}
		w.finishOp(&op, err)
		return
	}
	ts, _, err := cl.ListTasks(cctx, client.TaskFilter{GraphID: g.id, PageSize: 100, OmitSpec: true, Read: ro})
	if err == nil {
		byID := map[string]*client.Task{}
		for _, t := range ts {
			byID[t.Id] = t
		}
		for _, id := range g.tasks {
			if t, ok := byID[id]; ok {
				op.Views = append(op.Views, taskView(t))
			} else {
				op.Views = append(op.Views, history.TaskView{ID: id})
			}
		}
	}
	w.finishOp(&op, err)
}

// watch follows every event from now on and records each task event as a
// Watch op of stream n (a new stream number after each restart).
func (w *workload) watch(ctx context.Context, n int) {
	cl, err := w.dial(ctx, n)
	if err != nil {
		return
	}
	defer cl.Close()
	for stream := n * 1000; ctx.Err() == nil; stream++ {
		for ev, err := range cl.Watch(ctx, client.WatchOptions{FromNow: true}) {
			if err != nil {
				break
			}
			if ev.TaskId == "" {
				continue
			}
			now := w.rec.Now()
			w.rec.Add(history.Op{Client: stream, Kind: history.Watch, Graph: ev.GraphId, Tasks: []string{ev.TaskId}, Call: now, Return: now,
				Index: ev.Index, Cancelled: ev.Seq, Views: []history.TaskView{{ID: ev.TaskId, Found: true, State: state(ev.TaskState)}}})
		}
		sleepUntil(ctx, time.Now().Add(200*time.Millisecond))
	}
}

// state maps a wire task state to the history's.
func state(s client.TaskState) history.State {
	switch s {
	case client.TaskPending:
		return history.Pending
	case client.TaskQueued:
		return history.Queued
	case client.TaskAssigned:
		return history.Assigned
	case client.TaskRunning:
		return history.Running
	case client.TaskSucceeded:
		return history.Succeeded
	case client.TaskFailed:
		return history.Failed
	case client.TaskCancelled:
		return history.Cancelled
	case client.TaskTimedOut:
		return history.TimedOut
	}
	return 0
}

// taskView is a task as the history records a read of it.
func taskView(t *client.Task) history.TaskView {
	v := history.TaskView{ID: t.Id, Found: true, State: state(t.State), Lost: t.LostCount}
	for _, a := range t.Attempts {
		v.Attempts = append(v.Attempts, history.Attempt{Number: a.Number, Worker: a.WorkerId, State: state(a.State)})
	}
	if len(t.Result) > 0 {
		h := fnv.New64a()
		h.Write(t.Result)
		v.Result = h.Sum64() | 1
	}
	return v
}
