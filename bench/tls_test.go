package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/tlsconfig"
	"github.com/megaflow/megaflow/internal/tlsconfig/tlstest"
	"github.com/megaflow/megaflow/runtime/fake"
	"github.com/megaflow/megaflow/worker"
)

// tlsResult is one side of BenchmarkTLS.
type tlsResult struct {
	tasksPerSec float64 // no-op tasks submitted, run and finished per second
	p50, p99    time.Duration
}

// BenchmarkTLS measures what mutual TLS (docs/security.md) costs, TLS off
// against on in the same run, each on a fresh cluster of 3 heads (Raft
// over TCP with BoltDB: with TLS on, Raft's stream layer is TLS) and one
// worker on the fake runtime (no-op tasks exit at once), TLS on meaning
// every link: client, worker stream, forwarding, Raft, gossip key.
//
//   - throughput: graphs of no-op tasks from 4 submitters through the
//     leader, each graph waited for until it succeeded: tasks per second
//     end to end (submit, place, run on the worker, report, commit).
//     x-off is TLS on over off (target >= 0.9).
//   - latency: 1-task graphs submitted one at a time through a follower
//     (client to follower, follower to leader, Raft), p50 and p99.
//     x-off is on over off (target p99 <= 1.2).
//
// Sides run off, on, off, on (each twice on fresh clusters, figures
// averaged) so a drift of the shared machine spreads over both.
func BenchmarkTLS(b *testing.B) {
	var rows []row
	res := map[bool][]tlsResult{}
	for round := range 2 {
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("tls=%v/round=%d", on, round), func(b *testing.B) {
				hideNsPerOp(b)
				r := measureTLS(b, on, false)
				res[on] = append(res[on], r)
				b.ReportMetric(r.tasksPerSec, "tasks/s")
				b.ReportMetric(ms(r.p50), "p50-ms")
				b.ReportMetric(ms(r.p99), "p99-ms")
			})
		}
	}
	avg := func(rs []tlsResult) tlsResult {
		var out tlsResult
		for _, r := range rs {
			out.tasksPerSec += r.tasksPerSec / float64(len(rs))
			out.p50 += r.p50 / time.Duration(len(rs))
			out.p99 += r.p99 / time.Duration(len(rs))
		}
		return out
	}
	off, on := avg(res[false]), avg(res[true])
	if off.tasksPerSec > 0 && off.p99 > 0 {
		rows = append(rows,
			row{"no-op throughput, TLS off", fmt.Sprintf("%.0f tasks/s", off.tasksPerSec), ""},
			row{"no-op throughput, TLS on", fmt.Sprintf("%.0f tasks/s", on.tasksPerSec), fmt.Sprintf("%.2f x off (target >= 0.9)", on.tasksPerSec/off.tasksPerSec)},
			row{"submit latency (forwarded), TLS off", fmt.Sprintf("p50 %.2f ms, p99 %.2f ms", ms(off.p50), ms(off.p99)), ""},
			row{"submit latency (forwarded), TLS on", fmt.Sprintf("p50 %.2f ms, p99 %.2f ms", ms(on.p50), ms(on.p99)),
				fmt.Sprintf("p99 %.2f x off (target <= 1.2)", float64(on.p99)/float64(off.p99))})
	}
	summary(b, "BenchmarkTLS (3 heads + 1 fake worker on 127.0.0.1, BoltDB fsync, one run)", &rows)
}

// measureTLS starts a cluster with TLS on or off (and, with acl, API
// tokens on: the clients and the worker carry tokens) and measures it.
func measureTLS(b *testing.B, on, acl bool) tlsResult {
	var workerTLS *tlsconfig.Store
	headTLS := map[string]*tlsconfig.Store{}
	var cliOpts []client.Option
	var key []byte
	if on {
		set := tlstest.New(b, b.TempDir())
		for _, id := range []string{"h1", "h2", "h3"} {
			headTLS[id] = set.Store(b, tlsconfig.RoleHead, id)
		}
		workerTLS = set.Store(b, tlsconfig.RoleWorker, "w1")
		f := set.Issue(b, tlsconfig.RoleClient, "client")
		cfg, err := client.TLSConfig(f.CA, f.Cert, f.Key)
		if err != nil {
			b.Fatal(err)
		}
		cliOpts = append(cliOpts, client.WithTLS(cfg))
		key = make([]byte, 32)
		_, _ = rand.Read(key)
	}
	c := testcluster.New(b, testcluster.Options{Heads: 3, RaftOnDisk: true, Configure: func(cfg *head.Config) {
		cfg.TLS, cfg.GossipKey = headTLS[cfg.NodeID], key
		cfg.ACL = acl
	}})
	defer c.Stop()
	var workerToken string
	if acl {
		cliOpts, workerToken = aclTokens(b, c, cliOpts)
	}
	w := c.AddWorker(testcluster.WorkerOptions{Runtime: fake.New(nil), Capacity: worker.Capacity{CPUMillis: 1 << 20, MemoryBytes: 1 << 40},
		Configure: func(cfg *worker.Config) { cfg.TLS, cfg.GossipKey, cfg.Token = workerTLS, key, workerToken }})
	testcluster.WaitFor(b, 30*time.Second, "the worker's stream", func() bool {
		for _, h := range c.Running() {
			if h.WorkerConnected(w.ID) {
				return true
			}
		}
		return false
	})
	leader := c.WaitLeader(10 * time.Second)
	addrs := c.GRPCAddrs()
	dial := func(first int) *client.Client {
		order := []string{addrs[first]}
		for i, a := range addrs {
			if i != first {
				order = append(order, a)
			}
		}
		cl, err := client.Dial(context.Background(), order, append(cliOpts, client.WithBackoff(20*time.Millisecond, 500*time.Millisecond))...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cl.Close() })
		return cl
	}
	direct, forwarded := dial(leader), dial((leader+1)%len(addrs))
	ctx := context.Background()
	const tasksPerGraph, submitters = 20, 4
	graphs := scaled(100, 8)
	noop := func(id string, n int) *client.GraphSpec {
		g := &client.GraphSpec{Id: id}
		for i := range n {
			g.Tasks = append(g.Tasks, &client.TaskSpec{Name: fmt.Sprintf("t%03d", i), Image: "busybox",
				Command: []string{"/bin/true"}, Resources: &client.Resources{CpuMillis: 10, MemoryBytes: 1 << 20}})
		}
		return g
	}
	run := func(prefix string, n int) rate {
		return throughput(b, submitters, n, func(i int) error {
			id := fmt.Sprintf("%s-%05d", prefix, i)
			if _, err := direct.Submit(ctx, noop(id, tasksPerGraph)); err != nil {
				return err
			}
			g, err := direct.Wait(ctx, id)
			if err == nil && g.State != client.GraphSucceeded {
				err = fmt.Errorf("graph %s ended %s", id, g.State)
			}
			return err
		})
	}
	run("warm", submitters)
	r := run("tput", graphs)
	lat := latencies(b, latencyWarmup, scaled(300, 50), func(i int) error {
		_, err := forwarded.Submit(ctx, noop(fmt.Sprintf("lat-%d", i+latencyWarmup), 1))
		return err
	})
	return tlsResult{tasksPerSec: r.perSec * tasksPerGraph, p50: percentile(lat, 50), p99: percentile(lat, 99)}
}
