package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
)

// Sizes of the measurements, before -megaflow.scale.
const (
	bareCommands     = 10_000 // bare throughput: commands in all
	bareAppliers     = 64     // bare throughput: goroutines (the baseline)
	bareAppliersWide = 256    // bare throughput with more goroutines (context)
	bareCommandLen   = 100    // bytes per bare command
	latencySamples   = 1000   // sequential latency: samples per series
	latencyWarmup    = 100    // sequential latency: untimed calls first
	// warmupShare: every throughput measurement is preceded, on the same
	// cluster, by an untimed run of 1/warmupShare of its workload, so that
	// BoltDB files have grown and connections are open on both sides.
	warmupShare = 5
)

// throughputCase is one MegaFlow throughput measurement: graphs graphs of
// tasks rollout tasks each, submitted by workers goroutines.
type throughputCase struct {
	tasks, workers, graphs int
}

var throughputCases = []throughputCase{
	{tasks: 1, workers: 64, graphs: 20_000},
	{tasks: 100, workers: 8, graphs: 1_000},
	{tasks: 10_000, workers: 2, graphs: 30},
}

// bareResult is what measureBare measured.
type bareResult struct {
	appliesPerSec     float64 // bareAppliers goroutines: the denominator of x-bare
	cores             float64 // CPU cores the process kept busy meanwhile
	appliesPerSecWide float64 // bareAppliersWide goroutines
	p50, p99          time.Duration
}

// measureBare starts a bare 3-node hashicorp/raft cluster (bare_test.go)
// and measures (a) applies/s with bareAppliers goroutines applying
// bareCommands commands of bareCommandLen bytes (then again with
// bareAppliersWide goroutines), and (b) the latency of one command at a
// time.
func measureBare(b *testing.B) bareResult {
	b.Helper()
	c := newBareCluster(b, 3)
	defer c.shutdown()
	leader := c.leader()
	cmd := make([]byte, bareCommandLen)
	for i := range cmd {
		cmd[i] = byte('a' + i%26)
	}
	apply := func(int) error { return c.apply(leader, cmd) }
	n := scaled(bareCommands, 1000)
	throughput(b, bareAppliers, n/warmupShare, apply)
	var res bareResult
	r := throughput(b, bareAppliers, n, apply)
	res.appliesPerSec, res.cores = r.perSec, r.cores
	res.appliesPerSecWide = throughput(b, bareAppliersWide, n, apply).perSec
	lat := latencies(b, latencyWarmup, scaled(latencySamples, 100), apply)
	res.p50, res.p99 = percentile(lat, 50), percentile(lat, 99)
	return res
}

// BenchmarkCommit compares MegaFlow's write path with bare Raft on the same
// machine in the same run. It first measures the baseline (measureBare: a
// bare 3-node hashicorp/raft cluster over TCP loopback with BoltDB, tuned
// with BatchApplyCh and MaxAppendEntries 1024), then, each on a fresh
// 3-head test cluster (real heads, Raft over TCP loopback, BoltDB files):
//
//   - megaflow/tasks=N: committed tasks/s for graphs of N rollout tasks
//     submitted through the client library by concurrent submitters (64
//     for 1-task graphs, 8 for 100-task, 2 for 10,000-task), the client's
//     first head being the leader; Submit returns once the graph is
//     committed by a quorum and applied on the leader. Reports tasks/s, the
//     baseline's applies/s and their ratio x-bare (target ≥ 2: graphs put
//     many tasks in one entry, so a task should cost less than a bare Raft
//     command).
//   - megaflow/raft-direct: a diagnostic, no target. The SubmitGraph
//     entries of 1-task graphs, built as the leader builds them, applied
//     straight to the leader's Raft by 64 goroutines (no client, gRPC or
//     submit handler), and no-op entries (an ignorable op the FSM skips)
//     the same way: where the 1-task case loses its time.
//   - megaflow/latency: p50 and p99 of one 1-task graph submitted at a time,
//     by a client on the leader and one on a follower (which forwards), in
//     turn with single commands on a bare cluster started beside it;
//     p99-x-bare is MegaFlow's p99 over that bare p99 (target ≤ 1.5).
//   - bare/end: the baseline again, to show how much the shared machine
//     moved during the run.
//
// The last sub-benchmark, summary, prints the table. Run it with
// -benchtime 1x: each iteration of a sub-benchmark is a full measurement of
// fixed size (-megaflow.scale shrinks them).
func BenchmarkCommit(b *testing.B) {
	base := measureBare(b)
	var rows []row
	bareRow := func(end *bareResult) {
		note := fmt.Sprintf("%d x %d B; %.1f cores busy; %d appliers: %.0f/s", scaled(bareCommands, 1000),
			bareCommandLen, base.cores, bareAppliersWide, base.appliesPerSecWide)
		if end != nil {
			note += fmt.Sprintf("; at the end: %.0f/s", end.appliesPerSec)
		}
		setRow(&rows, row{fmt.Sprintf("bare raft, %d appliers", bareAppliers),
			fmt.Sprintf("%.0f applies/s", base.appliesPerSec), note})
	}
	bareRow(nil)

	b.Run("bare", func(b *testing.B) {
		hideNsPerOp(b)
		b.ReportMetric(base.appliesPerSec, "applies/s")
		b.ReportMetric(base.cores, "cpu-cores")
		b.ReportMetric(base.appliesPerSecWide, "applies/s-256")
		b.ReportMetric(ms(base.p50), "p50-ms")
		b.ReportMetric(ms(base.p99), "p99-ms")
	})
	for _, tc := range throughputCases {
		b.Run(fmt.Sprintf("megaflow/tasks=%d", tc.tasks), func(b *testing.B) {
			benchThroughput(b, tc, base, &rows)
		})
	}
	b.Run("megaflow/raft-direct", func(b *testing.B) { benchRaftDirect(b, base, &rows) })
	b.Run("megaflow/latency", func(b *testing.B) { benchLatency(b, &rows) })
	// The machine is shared: measure the baseline again, so that a reader
	// sees whether it moved while MegaFlow was measured.
	b.Run("bare/end", func(b *testing.B) {
		end := measureBare(b)
		hideNsPerOp(b)
		b.ReportMetric(end.appliesPerSec, "applies/s")
		b.ReportMetric(end.appliesPerSec/base.appliesPerSec, "x-start")
		b.ReportMetric(ms(end.p99), "p99-ms")
		bareRow(&end)
	})
	summary(b, "BenchmarkCommit (3 nodes on 127.0.0.1, BoltDB fsync, one run)", &rows)
}

// benchThroughput measures committed tasks/s for tc on a fresh cluster.
func benchThroughput(b *testing.B, tc throughputCase, base bareResult, rows *[]row) {
	c := testcluster.New(b, testcluster.Options{Heads: 3, RaftOnDisk: true}) // measured against the bare TCP + BoltDB cluster
	cl, leader := dial(b, c, true)
	ctx := context.Background()
	graphs := scaled(tc.graphs, 2*tc.workers)
	run := func(prefix string, n int) rate {
		specs := make([]*client.GraphSpec, n)
		for i := range specs {
			specs[i] = rolloutGraph(fmt.Sprintf("%s-%06d", prefix, i), tc.tasks)
		}
		return throughput(b, tc.workers, n, func(i int) error {
			_, err := cl.Submit(ctx, specs[i])
			return err
		})
	}
	run("warm", max(tc.workers, graphs/warmupShare))
	var sum, cores float64
	for iter := range b.N {
		r := run(fmt.Sprintf("tput-%d", iter), graphs)
		sum += r.perSec * float64(tc.tasks)
		cores += r.cores
	}
	tasksPerSec, cores := sum/float64(b.N), cores/float64(b.N)
	ratio := tasksPerSec / base.appliesPerSec
	hideNsPerOp(b)
	b.ReportMetric(tasksPerSec, "tasks/s")
	b.ReportMetric(base.appliesPerSec, "bare-applies/s")
	b.ReportMetric(ratio, "x-bare")
	b.ReportMetric(cores, "cpu-cores")
	setRow(rows, row{
		fmt.Sprintf("megaflow, %d-task graphs, %d submitters", tc.tasks, tc.workers),
		fmt.Sprintf("%.0f tasks/s", tasksPerSec),
		fmt.Sprintf("%.2f x bare (target >= 2); %d graphs; %.1f cores busy%s", ratio, graphs, cores, leaderMoved(c, leader)),
	})
}

// noopOp is an op no version of the FSM knows, with the ignorable bit set:
// every head applies it as a no-op (head/fsm op.go).
const noopOp = 0xff

// benchRaftDirect applies entries straight to the leader's Raft on a fresh
// cluster, bypassing the client, gRPC and the submit handler: the 1-task
// graphs' SubmitGraph entries, then no-op entries of bareCommandLen bytes.
func benchRaftDirect(b *testing.B, base bareResult, rows *[]row) {
	c := testcluster.New(b, testcluster.Options{Heads: 3, RaftOnDisk: true}) // measured against the bare TCP + BoltDB cluster
	leader := c.WaitLeader(10 * time.Second)
	r := c.Members[leader].Head().Node().Raft()
	n := scaled(throughputCases[0].graphs, 1000)
	entries := make([][]byte, n+n/warmupShare)
	for i := range entries {
		entries[i] = submitEntry(b, fmt.Sprintf("direct-%06d", i), 1)
	}
	apply := func(e []byte) error {
		f := r.Apply(e, 10*time.Second)
		if err := f.Error(); err != nil {
			return err
		}
		if err, ok := f.Response().(error); ok {
			return err
		}
		return nil
	}
	throughput(b, bareAppliers, n/warmupShare, func(i int) error { return apply(entries[n+i]) })
	var sum, cores, noop float64
	for range b.N {
		s := throughput(b, bareAppliers, n, func(i int) error { return apply(entries[i]) })
		sum += s.perSec
		cores += s.cores
	}
	cmd := make([]byte, bareCommandLen)
	cmd[0] = noopOp
	for range b.N {
		noop += throughput(b, bareAppliers, scaled(bareCommands, 1000), func(int) error { return apply(cmd) }).perSec
	}
	perSec, cores, noop := sum/float64(b.N), cores/float64(b.N), noop/float64(b.N)
	hideNsPerOp(b)
	b.ReportMetric(perSec, "tasks/s")
	b.ReportMetric(perSec/base.appliesPerSec, "x-bare")
	b.ReportMetric(cores, "cpu-cores")
	b.ReportMetric(noop, "noop-applies/s")
	b.ReportMetric(noop/base.appliesPerSec, "noop-x-bare")
	setRow(rows, row{
		"  same entries straight into the leader's Raft",
		fmt.Sprintf("%.0f tasks/s", perSec),
		fmt.Sprintf("%.2f x bare; no-op entries: %.0f/s = %.2f x bare (diagnostic)%s",
			perSec/base.appliesPerSec, noop, noop/base.appliesPerSec, leaderMoved(c, leader)),
	})
}

// submitEntry builds the log entry of a rollout graph of tasks tasks the
// way the leader's submit handler does (head/service.go): normalized spec,
// digest, header without tasks, one chunk (the graph must fit in one entry).
func submitEntry(b *testing.B, id string, tasks int) []byte {
	b.Helper()
	g := spec.Normalize(rolloutGraph(id, tasks))
	header := proto.Clone(g).(*wire.GraphSpec)
	header.Tasks = nil
	cmd := &wire.SubmitGraphCommand{Header: header, Tasks: g.Tasks, Chunk: 0, Chunks: 1,
		SpecDigest: spec.Digest(g), UnixNanos: time.Now().UnixNano(), TaskCount: uint32(len(g.Tasks))}
	e, err := fsm.Encode(fsm.OpSubmitGraph, cmd)
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// benchLatency measures one 1-task graph at a time, through a client on
// the leader and one on a follower, in turn with one command at a time on
// a bare cluster started beside it, so that a p99 made of the machine's
// worst moments (GC, fsync stalls, neighbours) is shared by both sides of
// the ratio.
func benchLatency(b *testing.B, rows *[]row) {
	c := testcluster.New(b, testcluster.Options{Heads: 3, RaftOnDisk: true}) // measured against the bare TCP + BoltDB cluster
	direct, leader := dial(b, c, true)
	forwarded, _ := dial(b, c, false)
	bare := newBareCluster(b, 3)
	bareLeader := bare.leader()
	ctx := context.Background()
	cmd := make([]byte, bareCommandLen)
	submit := func(cl *client.Client) func(string) error {
		return func(id string) error {
			_, err := cl.Submit(ctx, rolloutGraph(id, 1))
			return err
		}
	}
	type series struct {
		name     string
		do       func(id string) error
		p50, p99 time.Duration
	}
	all := []*series{
		{name: "bare", do: func(string) error { return bare.apply(bareLeader, cmd) }},
		{name: "direct", do: submit(direct)},
		{name: "fwd", do: submit(forwarded)},
	}
	for _, s := range all {
		for i := range latencyWarmup {
			if err := s.do(fmt.Sprintf("warm-%s-%03d", s.name, i)); err != nil {
				b.Fatalf("warm-up %s: %v", s.name, err)
			}
		}
	}
	n := scaled(latencySamples, 100)
	for iter := range b.N {
		lat := make([][]time.Duration, len(all))
		for k := range lat {
			lat[k] = make([]time.Duration, n)
		}
		for i := range n {
			for j := range all {
				k := (i + j) % len(all) // rotate who goes first
				id := fmt.Sprintf("lat-%s-%d-%06d", all[k].name, iter, i)
				start := time.Now()
				if err := all[k].do(id); err != nil {
					b.Fatalf("%s: %v", id, err)
				}
				lat[k][i] = time.Since(start)
			}
		}
		for k, s := range all {
			slices.Sort(lat[k])
			s.p50 += percentile(lat[k], 50) / time.Duration(b.N)
			s.p99 += percentile(lat[k], 99) / time.Duration(b.N)
		}
	}
	bs, ds, fs := all[0], all[1], all[2]
	ratio := float64(ds.p99) / float64(bs.p99)
	fratio := float64(fs.p99) / float64(bs.p99)
	hideNsPerOp(b)
	b.ReportMetric(ms(ds.p50), "p50-ms")
	b.ReportMetric(ms(ds.p99), "p99-ms")
	b.ReportMetric(ms(bs.p50), "bare-p50-ms")
	b.ReportMetric(ms(bs.p99), "bare-p99-ms")
	b.ReportMetric(ratio, "p99-x-bare")
	b.ReportMetric(ms(fs.p50), "fwd-p50-ms")
	b.ReportMetric(ms(fs.p99), "fwd-p99-ms")
	b.ReportMetric(fratio, "fwd-p99-x-bare")
	setRow(rows, row{
		"bare raft, one command at a time",
		fmt.Sprintf("p50 %.2f ms", ms(bs.p50)),
		fmt.Sprintf("p99 %.2f ms; %d samples per series, interleaved", ms(bs.p99), n),
	})
	setRow(rows, row{
		"megaflow, one 1-task graph at a time",
		fmt.Sprintf("p50 %.2f ms", ms(ds.p50)),
		fmt.Sprintf("p99 %.2f ms = %.2f x bare p99 (target <= 1.5)%s", ms(ds.p99), ratio, leaderMoved(c, leader)),
	})
	setRow(rows, row{
		"  same, client on a follower (forwards)",
		fmt.Sprintf("p50 %.2f ms", ms(fs.p50)),
		fmt.Sprintf("p99 %.2f ms = %.2f x bare p99", ms(fs.p99), fratio),
	})
}

// dial returns a client library connection to every head of c whose first
// head is the leader (toLeader) or a follower, and the leader's member
// index. The client keeps talking to its first head while it answers, and a
// follower forwards writes to the leader itself (one more gRPC hop) rather
// than redirecting the client, so the order decides the route of every
// write.
func dial(b *testing.B, c *testcluster.Cluster, toLeader bool) (*client.Client, int) {
	b.Helper()
	leader := c.WaitLeader(10 * time.Second)
	first := leader
	if !toLeader {
		first = (leader + 1) % len(c.Members)
	}
	addrs := []string{c.Members[first].GRPCAddr}
	for i, m := range c.Members {
		if i != first {
			addrs = append(addrs, m.GRPCAddr)
		}
	}
	cl, err := client.Dial(context.Background(), addrs, client.WithBackoff(20*time.Millisecond, 500*time.Millisecond))
	if err != nil {
		b.Fatalf("dial: %v", err)
	}
	b.Cleanup(func() { cl.Close() })
	return cl, leader
}

// leaderMoved returns a note for the table when the leader is no longer
// member leader, which makes the measurement suspect.
func leaderMoved(c *testcluster.Cluster, leader int) string {
	if now := c.WaitLeader(10 * time.Second); now != leader {
		return fmt.Sprintf("; LEADER CHANGED %s -> %s", c.Members[leader].ID, c.Members[now].ID)
	}
	return ""
}
