package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
	localcluster "github.com/megaflow/megaflow/internal/cluster"
	"github.com/megaflow/megaflow/worker"
)

// soakOptions are the flags of `megaflow-bench soak`.
type soakOptions struct {
	duration         time.Duration
	rate             float64 // tasks per second
	graphSize        int     // tasks per graph
	clients          int
	workers          int
	graphRetention   time.Duration
	archiveRetention time.Duration
	sample           time.Duration
	drain            time.Duration
	inFlight         int
	headBin          string
	killLeader       bool
	restarts         int
	headArgs         []string // more flags for every head
	headPprof        bool     // heads run with --pprof; heap profiles of each head early and late
	restartProfile   bool     // restarted heads write a CPU profile from start to ready
	dataDir          string   // the heads' data directories (kept); "": a temporary directory, removed
}

// validate checks every flag against its bound; the error names the flag.
func (o soakOptions) validate() error {
	var errs []error
	if o.duration < 10*time.Second || o.duration > 48*time.Hour {
		errs = append(errs, fmt.Errorf("--duration %v is outside [10s, 48h]", o.duration))
	}
	if !(o.rate >= 1 && o.rate <= 100_000) {
		errs = append(errs, fmt.Errorf("--rate %v tasks/s is outside [1, 100000]", o.rate))
	}
	if o.graphSize < 1 || o.graphSize > 10_000 {
		errs = append(errs, fmt.Errorf("--graph-size %d is outside [1, 10000]", o.graphSize))
	}
	if o.clients < 1 || o.clients > 64 {
		errs = append(errs, fmt.Errorf("--clients %d is outside [1, 64]", o.clients))
	}
	if o.workers < 1 || o.workers > 16 {
		errs = append(errs, fmt.Errorf("--workers %d is outside [1, 16]", o.workers))
	}
	if o.graphRetention < time.Second || o.graphRetention > 24*time.Hour {
		errs = append(errs, fmt.Errorf("--graph-retention %v is outside [1s, 24h]", o.graphRetention))
	}
	if o.archiveRetention < 0 {
		errs = append(errs, fmt.Errorf("--archive-retention %v is negative (0: keep the summaries)", o.archiveRetention))
	}
	if o.sample < time.Second || o.sample > 10*time.Minute {
		errs = append(errs, fmt.Errorf("--sample %v is outside [1s, 10m]", o.sample))
	}
	if o.drain < 10*time.Second || o.drain > time.Hour {
		errs = append(errs, fmt.Errorf("--drain %v is outside [10s, 1h]", o.drain))
	}
	if o.restarts < 0 || o.restarts > 100 {
		errs = append(errs, fmt.Errorf("--restarts %d is outside [0, 100]", o.restarts))
	}
	if o.inFlight < 1 || o.inFlight > 10_000 {
		errs = append(errs, fmt.Errorf("--in-flight %d is outside [1, 10000]", o.inFlight))
	}
	return errors.Join(errs...)
}

func soakCmd(g *globals) *cobra.Command {
	o := soakOptions{duration: time.Hour, rate: 1_000_000.0 / 3600, graphSize: 100, clients: 4, workers: 2,
		graphRetention: 10 * time.Minute, archiveRetention: 30 * 24 * time.Hour, sample: 10 * time.Second,
		drain: 5 * time.Minute, inFlight: 256, headBin: "bin/megaflow-head", killLeader: true, restarts: 3}
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "a steady stream of no-op tasks through 3 head processes for an hour: head RSS over time, restart to ready",
		Long: `soak runs 3 megaflow-head processes (loopback, BoltDB data directories under a
temporary directory, --graph-retention as given) and --workers workers in this
process on a no-op runtime (noop.go: a task exits 0 at once; megaflow-worker has no
such runtime, and the workers' memory is not what is measured). --clients
clients of the Go client library submit graphs of --graph-size no-op tasks at
a steady --rate (tasks/s, default 1,000,000 an hour) for --duration, each
graph waited for until it ends; every graph must end SUCCEEDED.

Every --sample it records each head's RSS (VmRSS of /proc/<pid>/status), its
live graphs and tasks (its /metrics), the archived graphs, the leader and the
term, and the load average into soak.csv; every graph's submit and end go to
soak_graphs.csv. After the load it kill -9s a follower head and restarts it on
its data directory, then (--kill-leader) the leader, --restarts times, and times each from the
process's start to ready: /readyz answers 200 and the head has applied the
commit index the leader had at the kill. Writes soak.md, soak.csv,
soak_graphs.csv and soak_rss.png. Build the head first (make build).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			if _, err := os.Stat(o.headBin); err != nil {
				return fmt.Errorf("%s: %w (run make build first, or point --head-bin at the binary)", o.headBin, err)
			}
			return runSoak(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.duration, "duration", o.duration, "how long the load runs (10s to 48h)")
	f.Float64Var(&o.rate, "rate", o.rate, "tasks submitted per second (in graphs of --graph-size)")
	f.IntVar(&o.graphSize, "graph-size", o.graphSize, "no-op tasks per graph")
	f.IntVar(&o.clients, "clients", o.clients, "client connections submitting (round robin)")
	f.IntVar(&o.workers, "workers", o.workers, "workers in this process (no-op runtime)")
	f.DurationVar(&o.graphRetention, "graph-retention", o.graphRetention, "the heads' --graph-retention: a finished graph leaves the live table this long after it ended")
	f.DurationVar(&o.archiveRetention, "archive-retention", o.archiveRetention, "the heads' --archive-retention (0: keep the summaries)")
	f.DurationVar(&o.sample, "sample", o.sample, "how often RSS and graph counts are sampled")
	f.DurationVar(&o.drain, "drain", o.drain, "how long after the load the graphs still running may take to end before they count as lost")
	f.IntVar(&o.inFlight, "in-flight", o.inFlight, "graphs submitted and not yet ended at most; when reached the submitter waits (the achieved rate falls)")
	f.StringVar(&o.headBin, "head-bin", o.headBin, "the megaflow-head binary")
	f.BoolVar(&o.killLeader, "kill-leader", o.killLeader, "after each follower, also kill -9 and restart the leader")
	f.IntVar(&o.restarts, "restarts", o.restarts, "kill -9 and restart rounds after the load (each a follower, then the leader)")
	f.StringArrayVar(&o.headArgs, "head-arg", nil, "one more flag for every head, e.g. --head-arg=--raft-snapshot-threshold=1024 (repeatable)")
	f.BoolVar(&o.headPprof, "head-pprof", false, "run the heads with --pprof and save each head's heap profile (after a GC) at each quarter of the load and at its end, into <out>/soak-logs/heap-<head>-<q1|q2|q3|end>.pb.gz")
	f.BoolVar(&o.restartProfile, "restart-profile", false, "give each restarted head --startup-cpu-profile: a CPU profile from its start to ready, <out>/soak-logs/startup-<head>-<n>.pprof")
	f.StringVar(&o.dataDir, "data-dir", "", "keep the heads' data directories here (kept after the run, e.g. to replay a head's log); empty: a temporary directory, removed at the end")
	return cmd
}

// graphInterval is the time between two graphs' submits that gives rate
// tasks/s in graphs of size tasks.
func graphInterval(rate float64, size int) time.Duration {
	return time.Duration(float64(size) / rate * float64(time.Second))
}

// graphsDue is how many graphs a steady pacer has submitted elapsed after
// its start, one at the start and one every interval: the submitter that
// lags behind catches up at once rather than drifting (no accumulated sleep
// error). 0 before the start.
func graphsDue(elapsed, interval time.Duration) int {
	if elapsed < 0 {
		return 0
	}
	return int(elapsed/interval) + 1
}

// quarterStat compares the mean of the first quarter of a series with the
// mean of its last quarter, by time: the samples at ts (seconds, ascending)
// in [from, from+(to-from)/4) and in [to-(to-from)/4, to]. ratio is
// last/first; NaN everywhere when a quarter has no sample.
type quarterStat struct {
	first, last, ratio float64
	nFirst, nLast      int
}

// quarters returns the quarterStat of the samples vs taken at ts over
// [from, to].
func quarters(ts, vs []float64, from, to float64) quarterStat {
	q := (to - from) / 4
	var a, b []float64
	for i, t := range ts {
		switch {
		case t >= from && t < from+q:
			a = append(a, vs[i])
		case t >= to-q && t <= to:
			b = append(b, vs[i])
		}
	}
	s := quarterStat{first: mean(a), last: mean(b), nFirst: len(a), nLast: len(b)}
	s.ratio = s.last / s.first
	if len(a) == 0 || len(b) == 0 {
		s.ratio = math.NaN()
	}
	return s
}

// soakSample is one row of soak.csv.
type soakSample struct {
	at         float64  // seconds since the load started
	rssKB      [3]int64 // VmRSS
	anonKB     [3]int64 // RssAnon: the heap's share of VmRSS
	fileKB     [3]int64 // RssFile: mapped files (BoltDB's mmap) and the binary
	liveGraphs [3]int64 // from each head's /metrics; -1 when it did not answer
	liveTasks  [3]int64
	heapLive   [3]int64 // go_gc_heap_live_bytes of each head's /metrics (live heap after the last GC); -1 when not read
	archived   int64    // from the leader's ListGraphs; -1 when not read
	leader     string
	term       uint64
	submitted  int64
	ended      int64
	load1      float64
}

// soakGraph is one graph's record (soak_graphs.csv).
type soakGraph struct {
	id             string
	due, submitted time.Time // submitted: acknowledged
	ended          time.Time
	state          string
	err            string
}

// soakHead is one head process and its addresses.
type soakHead struct {
	*proc
	id                          string
	raft, grpc, gossip, httpAdr string
	restarts                    int
}

func (h *soakHead) pid() int {
	if h.cmd == nil || h.cmd.Process == nil {
		return 0
	}
	select {
	case <-h.done:
		return 0
	default:
	}
	return h.cmd.Process.Pid
}

// restartTiming is one kill -9 and restart.
type restartTiming struct {
	role, head       string
	commitAtKill     uint64
	answered         time.Duration // from the process's start to its first /healthz 200 (it serves HTTP)
	readyz, caughtUp time.Duration // from the process's start
	ready            time.Duration // the later of the two
	err              error
}

func runSoak(ctx context.Context, g *globals, o soakOptions) error {
	dir := o.dataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "megaflow-bench-soak-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	logDir := filepath.Join(g.out, "soak-logs")
	_ = os.RemoveAll(logDir)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	log, closer, err := newLogger(filepath.Join(logDir, "workers.log"), g.verbose)
	if err != nil {
		return err
	}
	defer closer.Close()

	heads := make([]*soakHead, 3)
	for i := range heads {
		h := &soakHead{id: fmt.Sprintf("h%d", i+1)}
		for _, p := range []*string{&h.raft, &h.grpc, &h.gossip, &h.httpAdr} {
			if *p, err = localcluster.FreeAddr(); err != nil {
				return err
			}
		}
		heads[i] = h
	}
	var gossip, grpcs []string
	for _, h := range heads {
		gossip, grpcs = append(gossip, h.gossip), append(grpcs, h.grpc)
	}
	for _, h := range heads {
		var join []string
		for _, o := range heads {
			if o != h {
				join = append(join, o.gossip)
			}
		}
		h.proc = &proc{name: "head " + h.id, bin: o.headBin, log: filepath.Join(logDir, h.id+".log"),
			// The heads die with this process even when it is killed.
			attr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
			args: []string{"--node-id", h.id, "--data-dir", filepath.Join(dir, h.id), "--raft-addr", h.raft, "--grpc-addr", h.grpc,
				"--gossip-addr", h.gossip, "--http-addr", h.httpAdr, "--bootstrap-expect", "3", "--join", strings.Join(join, ","),
				"--graph-retention", o.graphRetention.String(), "--archive-retention", o.archiveRetention.String()}}
		if o.headPprof {
			h.proc.args = append(h.proc.args, "--pprof")
		}
		h.proc.args = append(h.proc.args, o.headArgs...)
	}
	defer func() {
		for _, h := range heads {
			h.stop()
		}
	}()
	for _, h := range heads {
		if err := h.start(); err != nil {
			return err
		}
	}
	cls := make([]*client.Client, o.clients)
	for i := range cls {
		if cls[i], err = client.Dial(ctx, grpcs, client.WithBackoff(20*time.Millisecond, 500*time.Millisecond)); err != nil {
			return err
		}
		defer cls[i].Close()
	}
	cl := cls[0]
	status := func(c *client.Client) (*client.ClusterStatus, error) {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return c.ClusterStatus(sctx)
	}
	if err := waitUntil(ctx, 90*time.Second, "a leader among the head processes", func() bool {
		st, err := status(cl)
		return err == nil && st.LeaderId != ""
	}); err != nil {
		return err
	}

	// Workers in this process on the no-op runtime.
	wctx, stopWorkers := context.WithCancel(context.Background())
	var wwg sync.WaitGroup
	var workers []*worker.Worker
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, w := range workers {
			_ = w.Shutdown(sctx)
		}
		stopWorkers()
		wwg.Wait()
	}()
	for i := range o.workers {
		addr, err := localcluster.FreeAddr()
		if err != nil {
			return err
		}
		cfg := worker.DefaultConfig()
		cfg.NodeID, cfg.DataDir, cfg.GossipAddr, cfg.Join = fmt.Sprintf("w%d", i+1), filepath.Join(dir, fmt.Sprintf("w%d", i+1)), addr, gossip
		cfg.Runtime = newNoopRuntime() // every container exits 0 at once
		cfg.Capacity = worker.Capacity{CPUMillis: 1_000_000, MemoryBytes: 1 << 40}
		cfg.MaxConcurrentStarts = 1024
		cfg.ReconnectMin, cfg.ReconnectMax = 20*time.Millisecond, 500*time.Millisecond
		cfg.Logger = log
		w, err := worker.New(cfg)
		if err != nil {
			return fmt.Errorf("worker %d: %w", i+1, err)
		}
		workers = append(workers, w)
		wwg.Add(1)
		go func() { defer wwg.Done(); _ = w.Run(wctx) }()
	}
	if err := waitUntil(ctx, 90*time.Second, fmt.Sprintf("%d alive workers", o.workers), func() bool {
		return aliveWorkers(ctx, cl, 2*time.Second) >= o.workers
	}); err != nil {
		return err
	}
	interval := graphInterval(o.rate, o.graphSize)
	fmt.Printf("soak: 3 head processes (--graph-retention %v), %d workers in-process (no-op runtime), %d clients; %.1f tasks/s in graphs of %d (one every %v) for %v; logs in %s\n",
		o.graphRetention, o.workers, o.clients, o.rate, o.graphSize, interval, o.duration, logDir)

	// The sampler: RSS, counts, leader, every o.sample; the leader every second.
	var submitted, ended atomic.Int64
	var samples []soakSample
	var leaderChanges int
	var firstTerm, lastTerm uint64
	lastLeader := ""
	var smu sync.Mutex // samples, leader fields
	scrape := func(h *soakHead) (graphs, tasks, heapLive int64) {
		heapLive = -1
		hc := http.Client{Timeout: 3 * time.Second}
		res, err := hc.Get("http://" + h.httpAdr + "/metrics")
		if err != nil {
			return -1, -1, -1
		}
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			l := sc.Text()
			var dst *int64
			switch {
			case strings.HasPrefix(l, "megaflow_graphs{"):
				dst = &graphs
			case strings.HasPrefix(l, "megaflow_tasks{"):
				dst = &tasks
			case strings.HasPrefix(l, "go_gc_heap_live_bytes "):
				heapLive = 0
				dst = &heapLive
			default:
				continue
			}
			if i := strings.LastIndexByte(l, ' '); i > 0 {
				if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
					*dst += int64(v)
				}
			}
		}
		return graphs, tasks, heapLive
	}
	archivedCount := func() int64 {
		var n int64
		for tok := ""; ; {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			gs, next, err := cl.ListGraphs(sctx, client.GraphFilter{PageSize: 1000, PageToken: tok, IncludeArchived: true})
			cancel()
			if err != nil {
				return -1
			}
			for _, g := range gs {
				if g.GetArchivedUnixNanos() != 0 {
					n++
				}
			}
			if tok = next; tok == "" {
				return n
			}
		}
	}
	t0 := time.Now()
	sctx, stopSampler := context.WithCancel(ctx)
	var swg sync.WaitGroup
	watchLeader := func() {
		st, err := status(cl)
		if err != nil || st.LeaderId == "" {
			return
		}
		smu.Lock()
		defer smu.Unlock()
		if firstTerm == 0 {
			firstTerm = st.Term
		}
		if lastLeader != "" && st.LeaderId != lastLeader {
			leaderChanges++
		}
		lastLeader, lastTerm = st.LeaderId, max(lastTerm, st.Term)
	}
	takeSample := func() {
		s := soakSample{at: time.Since(t0).Seconds(), archived: -1, submitted: submitted.Load(), ended: ended.Load()}
		for i, h := range heads {
			s.rssKB[i], s.anonKB[i], s.fileKB[i] = rssKB(h.pid())
			s.liveGraphs[i], s.liveTasks[i], s.heapLive[i] = scrape(h)
		}
		s.archived = archivedCount()
		if st, err := status(cl); err == nil {
			s.leader, s.term = st.LeaderId, st.Term
		}
		s.load1 = load1()
		smu.Lock()
		samples = append(samples, s)
		smu.Unlock()
	}
	heapProfiles := func(when string) {
		if !o.headPprof {
			return
		}
		for _, h := range heads {
			if err := saveHeapProfile(h.httpAdr, filepath.Join(logDir, fmt.Sprintf("heap-%s-%s.pb.gz", h.id, when))); err != nil {
				fmt.Printf("  heap profile of %s (%s): %v\n", h.id, when, err)
			}
		}
	}
	swg.Add(1)
	go func() {
		defer swg.Done()
		sec := time.NewTicker(time.Second)
		defer sec.Stop()
		next := time.Now()
		quartersDone := 0
		for {
			watchLeader()
			if !time.Now().Before(next) {
				takeSample()
				next = next.Add(o.sample)
			}
			if quartersDone < 3 && time.Since(t0) >= time.Duration(quartersDone+1)*o.duration/4 {
				quartersDone++
				heapProfiles(fmt.Sprintf("q%d", quartersDone))
			}
			select {
			case <-sctx.Done():
				return
			case <-sec.C:
			}
		}
	}()
	defer func() { stopSampler(); swg.Wait() }()

	// The load: a pacer hands out graph numbers at their due times; each
	// graph is submitted (retried through the heads until acknowledged) and
	// waited for by a goroutine of its own, at most o.inFlight at once.
	lctx, stopLoad := context.WithTimeout(ctx, o.duration)
	defer stopLoad()
	// Graphs already submitted get o.drain after the load to end.
	gctx, stopGraphs := context.WithCancel(context.Background())
	defer stopGraphs()
	var gmu sync.Mutex
	var graphs []*soakGraph
	sem := make(chan struct{}, o.inFlight)
	var gwg sync.WaitGroup
	var lateMax time.Duration
	run := func(k int, gr *soakGraph) {
		defer gwg.Done()
		defer func() { <-sem }()
		c := cls[k%len(cls)]
		gs := &client.GraphSpec{Id: gr.id, Tenant: "soak"}
		for j := range o.graphSize {
			gs.Tasks = append(gs.Tasks, &client.TaskSpec{Name: fmt.Sprintf("t%d", j), Image: "megaflow/noop:1", Command: []string{"true"},
				Resources: &client.Resources{CpuMillis: 100, MemoryBytes: 64 << 20}})
		}
		// Submit is idempotent by id: retry until acknowledged or the drain ends.
		var err error
		for {
			cctx, cancel := context.WithTimeout(gctx, 10*time.Second)
			_, err = c.Submit(cctx, gs)
			cancel()
			if err == nil || !pause(gctx) {
				break
			}
		}
		gmu.Lock()
		if err != nil {
			gr.err = "submit: " + err.Error()
			gmu.Unlock()
			return
		}
		gr.submitted = time.Now()
		gmu.Unlock()
		submitted.Add(1)
		var res *client.Graph
		for {
			res, err = c.Wait(gctx, gr.id)
			if err == nil || !pause(gctx) {
				break
			}
		}
		gmu.Lock()
		defer gmu.Unlock()
		if err != nil {
			gr.err = "wait: " + err.Error()
			return
		}
		gr.ended, gr.state = time.Now(), res.State.String()
		ended.Add(1)
	}
	tick := time.NewTicker(min(interval/2, 50*time.Millisecond))
	defer tick.Stop()
	lastReport := t0
pace:
	for k := 0; ; {
		for due := graphsDue(time.Since(t0), interval); k < due; k++ {
			at := t0.Add(time.Duration(k) * interval)
			if at.Sub(t0) >= o.duration {
				break pace
			}
			select {
			case sem <- struct{}{}:
			case <-lctx.Done():
				break pace
			}
			lateMax = max(lateMax, time.Since(at))
			gr := &soakGraph{id: fmt.Sprintf("soak-%07d", k), due: at}
			gmu.Lock()
			graphs = append(graphs, gr)
			gmu.Unlock()
			gwg.Add(1)
			go run(k, gr)
		}
		if time.Since(lastReport) >= time.Minute {
			lastReport = time.Now()
			smu.Lock()
			var rss string
			if len(samples) > 0 {
				s := samples[len(samples)-1]
				rss = fmt.Sprintf("RSS %d/%d/%d MiB, live graphs %d/%d/%d, archived %d", s.rssKB[0]>>10, s.rssKB[1]>>10, s.rssKB[2]>>10,
					s.liveGraphs[0], s.liveGraphs[1], s.liveGraphs[2], s.archived)
			}
			lc := leaderChanges
			smu.Unlock()
			fmt.Printf("  %5.1f min: %d graphs submitted, %d ended; %s; leader changes %d; load %.1f\n",
				time.Since(t0).Minutes(), submitted.Load(), ended.Load(), rss, lc, load1())
		}
		select {
		case <-lctx.Done():
			break pace
		case <-tick.C:
		}
	}
	loadEnd := time.Now()
	heapProfiles("end")
	fmt.Printf("  load ended after %v: %d graphs handed out; draining (up to %v)\n", loadEnd.Sub(t0).Round(time.Second), len(graphs), o.drain)
	drained := make(chan struct{})
	go func() { gwg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(o.drain):
		stopGraphs()
		<-drained
	case <-ctx.Done():
		stopGraphs()
		<-drained
	}
	drainEnd := time.Now()
	takeSample()
	stopSampler()
	swg.Wait()

	// Restarts: a follower, then the leader.
	var restarts []restartTiming
	var roles []string
	for range o.restarts {
		roles = append(roles, "follower")
		if o.killLeader {
			roles = append(roles, "leader")
		}
	}
	for _, role := range roles {
		if ctx.Err() != nil {
			break
		}
		var extra []string
		if o.restartProfile {
			n := 0
			for _, h := range heads {
				n += h.restarts
			}
			extra = []string{"--startup-cpu-profile", filepath.Join(logDir, fmt.Sprintf("startup-%d-%s.pprof", n+1, role))}
		}
		r := restartHead(ctx, heads, role, extra)
		restarts = append(restarts, r)
		if r.err != nil {
			fmt.Printf("  restart of the %s %s: %v\n", role, r.head, r.err)
		} else {
			fmt.Printf("  restart of the %s %s: /healthz 200 after %v, /readyz 200 after %v, applied the commit index at the kill (%d) after %v: ready %v\n",
				role, r.head, r.answered.Round(time.Millisecond), r.readyz.Round(time.Millisecond), r.commitAtKill, r.caughtUp.Round(time.Millisecond), r.ready.Round(time.Millisecond))
		}
	}
	return writeSoak(g.out, o, soakRun{samples: samples, graphs: graphs, restarts: restarts, leaderChanges: leaderChanges,
		firstTerm: firstTerm, lastTerm: lastTerm, loadDur: loadEnd.Sub(t0), drainDur: drainEnd.Sub(loadEnd), lateMax: lateMax, t0: t0})
}

// restartHead kill -9s the head in role ("follower" or "leader"), starts
// it again on its data directory and times it to ready.
func restartHead(ctx context.Context, heads []*soakHead, role string, extraArgs []string) restartTiming {
	r := restartTiming{role: role}
	var victim *soakHead
	var commit uint64
	for _, h := range heads {
		one, err := client.Dial(ctx, []string{h.grpc})
		if err != nil {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := one.ClusterStatus(sctx)
		cancel()
		one.Close()
		if err != nil {
			continue
		}
		isLeader := st.RaftState == "Leader"
		if isLeader {
			commit = st.CommitIndex
		}
		if victim == nil && isLeader == (role == "leader") {
			victim = h
		}
	}
	if victim == nil || commit == 0 {
		r.err = fmt.Errorf("no %s (or no leader) among the heads", role)
		return r
	}
	r.head, r.commitAtKill = victim.id, commit
	victim.kill9()
	base := victim.args
	victim.args = append(slices.Clip(base), extraArgs...)
	defer func() { victim.args = base }()
	start := time.Now()
	if err := victim.start(); err != nil {
		r.err = err
		return r
	}
	victim.restarts++
	// Each step polls (every 10 ms) only once the one before it holds, so
	// that no call blocks the loop while the process is not listening yet:
	// /healthz (200 once it serves HTTP), /readyz (it waits up to 1 s for
	// readiness itself), then ClusterStatus on a connection dialed once the
	// head serves (one dialed before it listens would sit in gRPC's 1 s
	// reconnect backoff).
	get := func(path string, timeout time.Duration) bool {
		hc := http.Client{Timeout: timeout}
		res, err := hc.Get("http://" + victim.httpAdr + path)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}
	var one *client.Client
	defer func() {
		if one != nil {
			one.Close()
		}
	}()
	r.err = waitUntil(ctx, 2*time.Minute, "the restarted head to be ready", func() bool {
		switch {
		case r.answered == 0:
			if get("/healthz", 200*time.Millisecond) {
				r.answered = time.Since(start)
				var err error
				if one, err = client.Dial(ctx, []string{victim.grpc}, client.WithBackoff(5*time.Millisecond, 20*time.Millisecond)); err != nil {
					one = nil
				}
			}
		case r.readyz == 0:
			if get("/readyz", 2*time.Second) {
				r.readyz = time.Since(start)
			}
		default:
			if one == nil {
				var err error
				if one, err = client.Dial(ctx, []string{victim.grpc}, client.WithBackoff(5*time.Millisecond, 20*time.Millisecond)); err != nil {
					one = nil
					return false
				}
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := one.ClusterStatus(sctx)
			cancel()
			if err == nil && st.HeadId == victim.id && st.AppliedIndex >= commit {
				r.caughtUp = time.Since(start)
			}
		}
		return r.caughtUp > 0
	})
	r.ready = max(r.readyz, r.caughtUp)
	return r
}

// saveHeapProfile writes the inuse heap profile of the head serving HTTP
// on addr (run with --pprof; gc=1: after a GC) to path.
func saveHeapProfile(addr, path string) error {
	hc := http.Client{Timeout: 60 * time.Second}
	res, err := hc.Get("http://" + addr + "/debug/pprof/heap?gc=1")
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /debug/pprof/heap: %s", res.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pause waits 200 ms between two tries of a call; false when ctx ended.
func pause(ctx context.Context) bool {
	t := time.NewTimer(200 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// rssKB returns VmRSS, RssAnon and RssFile of process pid in KiB (from
// /proc/<pid>/status), -1 for each it could not read.
func rssKB(pid int) (rss, anon, file int64) {
	rss, anon, file = -1, -1, -1
	if pid <= 0 {
		return
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			rss = n
		case "RssAnon":
			anon = n
		case "RssFile":
			file = n
		}
	}
	return
}

// load1 returns the 1-minute load average, NaN when unknown.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

type soakRun struct {
	samples             []soakSample
	graphs              []*soakGraph
	restarts            []restartTiming
	leaderChanges       int
	firstTerm, lastTerm uint64
	loadDur, drainDur   time.Duration
	lateMax             time.Duration
	t0                  time.Time
}

func writeSoak(out string, o soakOptions, r soakRun) error {
	// soak.csv: the samples.
	var rows [][]string
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, s := range r.samples {
		row := []string{f2(s.at)}
		for i := range 3 {
			row = append(row, i64(s.rssKB[i]))
		}
		for i := range 3 {
			row = append(row, i64(s.anonKB[i]), i64(s.fileKB[i]))
		}
		for i := range 3 {
			row = append(row, i64(s.liveGraphs[i]))
		}
		for i := range 3 {
			row = append(row, i64(s.liveTasks[i]))
		}
		row = append(row, i64(s.archived), s.leader, strconv.FormatUint(s.term, 10), i64(s.submitted), i64(s.ended), f2(s.load1))
		for i := range 3 {
			row = append(row, i64(s.heapLive[i]))
		}
		rows = append(rows, row)
	}
	if err := writeCSV(filepath.Join(out, "soak.csv"), []string{"t_s", "rss_kib_h1", "rss_kib_h2", "rss_kib_h3",
		"rss_anon_kib_h1", "rss_file_kib_h1", "rss_anon_kib_h2", "rss_file_kib_h2", "rss_anon_kib_h3", "rss_file_kib_h3",
		"live_graphs_h1", "live_graphs_h2", "live_graphs_h3", "live_tasks_h1", "live_tasks_h2", "live_tasks_h3",
		"archived_graphs", "leader", "term", "graphs_submitted", "graphs_ended", "load1",
		"heap_live_bytes_h1", "heap_live_bytes_h2", "heap_live_bytes_h3"}, rows); err != nil {
		return err
	}
	// soak_graphs.csv: every graph.
	rows = rows[:0]
	ms := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return f3(t.Sub(r.t0).Seconds())
	}
	var succeeded, failed, lost, unsubmitted int
	var turnaround []float64
	for _, g := range r.graphs {
		rows = append(rows, []string{g.id, ms(g.due), ms(g.submitted), ms(g.ended), g.state, g.err})
		switch {
		case g.submitted.IsZero():
			unsubmitted++
		case g.ended.IsZero():
			lost++
		case g.state == client.GraphSucceeded.String():
			succeeded++
			turnaround = append(turnaround, g.ended.Sub(g.submitted).Seconds())
		default:
			failed++
		}
	}
	if err := writeCSV(filepath.Join(out, "soak_graphs.csv"), []string{"graph", "due_s", "acknowledged_s", "ended_s", "state", "error"}, rows); err != nil {
		return err
	}
	// The plot.
	var ss []series
	for i := range 3 {
		s := series{name: fmt.Sprintf("h%d", i+1)}
		for _, x := range r.samples {
			if x.rssKB[i] > 0 {
				s.xs, s.ys = append(s.xs, x.at/60), append(s.ys, float64(x.rssKB[i])/1024)
			}
		}
		ss = append(ss, s)
	}
	if err := linePlot(filepath.Join(out, "soak_rss.png"), axes{title: fmt.Sprintf("Head RSS, %.0f tasks/s, --graph-retention %v", o.rate, o.graphRetention),
		x: "minutes since the load started", y: "RSS (MiB)", yFrom0: true}, ss...); err != nil {
		return err
	}

	var loads []float64
	for _, s := range r.samples {
		if !math.IsNaN(s.load1) {
			loads = append(loads, s.load1)
		}
	}
	rep := newReport(out, "soak.md", "megaflow-bench soak")
	rep.p("Load average (1 min) of the whole machine during the run, over the samples: min %.1f, median %.1f, max %.1f (whatever else ran counts in it).",
		percentile(loads, 0), percentile(loads, 50), percentile(loads, 100))
	rep.p("")
	var extra string
	for _, a := range o.headArgs {
		extra += " --head-arg=" + a
	}
	if o.headPprof {
		extra += " --head-pprof"
	}
	if o.restartProfile {
		extra += " --restart-profile"
	}
	if o.headBin != "bin/megaflow-head" {
		extra += " --head-bin " + o.headBin
	}
	rep.p("```sh\nmegaflow-bench soak --duration %v --rate %.2f --graph-size %d --clients %d --workers %d --graph-retention %v --archive-retention %v --sample %v%s\n```",
		o.duration, o.rate, o.graphSize, o.clients, o.workers, o.graphRetention, o.archiveRetention, o.sample, extra)
	rep.p("")
	rep.p("3 megaflow-head processes (loopback, BoltDB under a temporary directory, hashicorp/raft default timing, `--graph-retention %v --archive-retention %v`); %d workers in the harness's process on a no-op runtime (noop.go: a task exits 0 at once, and only live containers are kept; megaflow-worker has no such runtime, and only the heads' memory is measured); %d client connections submit one graph of %d no-op tasks every %v (%.1f tasks/s), each graph waited for (client Wait) until it ends. Every %v: each head's VmRSS, its live graphs and tasks (its /metrics), the archived graphs (ListGraphs with archived), leader and term; the leader is also polled every second for leader changes.",
		o.graphRetention, o.archiveRetention, o.workers, o.clients, o.graphSize, graphInterval(o.rate, o.graphSize), o.rate, o.sample)
	rep.p("")
	tasks := succeeded * o.graphSize
	rep.table([]string{"figure", "value"}, [][]string{
		{"load duration", r.loadDur.Round(time.Second).String()},
		{"graphs handed out / acknowledged", fmt.Sprintf("%d / %d", len(r.graphs), len(r.graphs)-unsubmitted)},
		{"graphs SUCCEEDED (tasks)", fmt.Sprintf("%d (%d tasks)", succeeded, tasks)},
		{"rate achieved (succeeded tasks / load duration)", fmt.Sprintf("%.1f tasks/s (target %.1f)", float64(tasks)/r.loadDur.Seconds(), o.rate)},
		{"graphs ended not SUCCEEDED (failures)", fmt.Sprintf("**%d**", failed)},
		{"graphs acknowledged, never seen to end (lost results)", fmt.Sprintf("**%d**", lost)},
		{"graphs never acknowledged", fmt.Sprintf("**%d**", unsubmitted)},
		{"drain after the load", r.drainDur.Round(time.Millisecond).String()},
		{"submit to end per graph p50 / p99 / max", fmt.Sprintf("%.2f / %.2f / %.2f s", percentile(turnaround, 50), percentile(turnaround, 99), percentile(turnaround, 100))},
		{"pacer's worst lateness (a submit handed out after its due time)", r.lateMax.Round(time.Millisecond).String()},
		{"leader changes (polled every second)", fmt.Sprintf("%d (term %d to %d)", r.leaderChanges, r.firstTerm, r.lastTerm)},
	})
	end := r.loadDur.Seconds()
	statRows := func(from float64) [][]string {
		var out [][]string
		for i := range 3 {
			var ts, vs, ta, va, th, vh []float64
			for _, s := range r.samples {
				if s.heapLive[i] > 0 && s.at <= end {
					th, vh = append(th, s.at), append(vh, float64(s.heapLive[i])/(1<<20))
				}
				if s.rssKB[i] > 0 && s.at <= end {
					ts, vs = append(ts, s.at), append(vs, float64(s.rssKB[i])/1024)
				}
				if s.anonKB[i] > 0 && s.at <= end {
					ta, va = append(ta, s.at), append(va, float64(s.anonKB[i])/1024)
				}
			}
			q, qa, qh := quarters(ts, vs, from, end), quarters(ta, va, from, end), quarters(th, vh, from, end)
			verdict := "within 10%"
			if math.IsNaN(q.ratio) || q.ratio > 1.10 || q.ratio < 0.90 {
				verdict = "**not** within 10%"
			}
			out = append(out, []string{fmt.Sprintf("h%d", i+1), fmt.Sprintf("%.1f (%d)", q.first, q.nFirst), fmt.Sprintf("%.1f (%d)", q.last, q.nLast),
				fmt.Sprintf("%.3f", q.ratio), verdict, fmt.Sprintf("%.1f / %.1f = %.3f", qa.first, qa.last, qa.ratio), fmt.Sprintf("%.1f / %.1f = %.3f", qh.first, qh.last, qh.ratio)})
		}
		return out
	}
	hdr := []string{"head", "first quarter mean RSS MiB (samples)", "last quarter mean RSS MiB (samples)", "last / first", "target: within 10%", "RssAnon MiB first / last quarter", "live heap MiB (go_gc_heap_live_bytes) first / last quarter"}
	rep.p("Head RSS, the issue's statistic: the load's duration in quarters (0 to %.1f min), the mean of each head's samples in the first and in the last. A head restarted during the load (none is: the kills come after it) would count from its restart.", end/60)
	rep.p("")
	rep.table(hdr, statRows(0))
	if warm := o.graphRetention.Seconds() + 60; warm < end/2 {
		rep.p("The first quarter includes the fill: for the first %v no finished graph has left the live table yet, so the table grows until retention starts archiving. The same statistic over the steady part only, from %.1f min (the retention plus 1 min) to the end:", o.graphRetention, warm/60)
		rep.p("")
		rep.table(hdr, statRows(warm))
	} else {
		rep.p("The run is shorter than twice the retention plus a minute: the steady part (after the first graphs were archived) is too short for a second statistic.")
		rep.p("")
	}
	var rr [][]string
	for _, x := range r.restarts {
		if x.err != nil {
			rr = append(rr, []string{x.role, x.head, strconv.FormatUint(x.commitAtKill, 10), "-", "-", "-", "error: " + x.err.Error(), "-"})
			continue
		}
		ok := "yes"
		if x.ready > 3*time.Second {
			ok = "**no**"
		}
		rr = append(rr, []string{x.role, x.head, strconv.FormatUint(x.commitAtKill, 10), fmt.Sprintf("%.0f ms", float64(x.answered)/1e6), fmt.Sprintf("%.0f ms", float64(x.readyz)/1e6),
			fmt.Sprintf("%.0f ms", float64(x.caughtUp)/1e6), fmt.Sprintf("**%.0f ms**", float64(x.ready)/1e6), ok})
	}
	rep.p("Restart to ready, after the load and the drain: kill -9 of the head, then the same binary started on its data directory. Times from the process's start (polled every 10 ms): /healthz answering 200 (the process serves HTTP), /readyz answering 200 (it knows a leader and applied the commit index it knows), and its ClusterStatus showing it applied the commit index the leader had at the kill. Ready is the later of the two; the target is 3 s.")
	rep.p("")
	for _, role := range []string{"follower", "leader"} {
		var rs []float64
		for _, x := range r.restarts {
			if x.role == role && x.err == nil {
				rs = append(rs, float64(x.ready)/1e6)
			}
		}
		if len(rs) > 0 {
			rep.p("- %s: ready min / median / max **%.0f / %.0f / %.0f ms** over %d restarts (target 3,000 ms).", role, percentile(rs, 0), percentile(rs, 50), percentile(rs, 100), len(rs))
		}
	}
	rep.p("")
	rep.table([]string{"kill -9 of", "head", "leader's commit index at the kill", "/healthz 200 (serving)", "/readyz 200", "applied that index", "ready", "under 3 s"}, rr)
	rep.p("![head RSS](soak_rss.png)")
	rep.p("")
	rep.p("soak.csv has the samples (per head RSS in KiB, split into RssAnon and RssFile, live graphs and tasks, archived graphs, leader, term, graphs submitted and ended, load average); soak_graphs.csv every graph's due, acknowledged and end times (seconds from the load's start) and state.")
	if err := rep.save(); err != nil {
		return err
	}
	fmt.Printf("  %d graphs: %d succeeded, %d failed, %d lost, %d never acknowledged; leader changes %d; wrote %s\n",
		len(r.graphs), succeeded, failed, lost, unsubmitted, r.leaderChanges, rep.path)
	if failed+lost+unsubmitted > 0 {
		return fmt.Errorf("soak: %d graphs failed, %d lost, %d never acknowledged (see soak.md, soak_graphs.csv)", failed, lost, unsubmitted)
	}
	if i := slices.IndexFunc(r.restarts, func(x restartTiming) bool { return x.err != nil }); i >= 0 {
		return fmt.Errorf("soak: restart of the %s: %w", r.restarts[i].role, r.restarts[i].err)
	}
	return nil
}
