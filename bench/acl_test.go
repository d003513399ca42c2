package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/testcluster"
)

// BenchmarkACL measures what the security settings (docs/security.md)
// cost, measured as BenchmarkTLS measures (no-op throughput through the
// leader; 1-task submit latency through a follower, which forwards the
// call and, with tokens, the token for the leader to check again), each
// arm on a fresh cluster of 3 heads (Raft over TCP, BoltDB with fsync) and
// one fake worker. Four arms: off; TLS on (every link); ACLs on (every
// call carries a submit token, the worker a worker token); both on, the
// issue's figure. 3 rounds, the arms in a rotated order each round; the
// ratios are arm over off within a round, then min / median / max over
// the rounds (targets for both on: throughput >= 0.9x, p99 <= 1.2x).
func BenchmarkACL(b *testing.B) {
	type arm struct {
		name     string
		tls, acl bool
	}
	arms := []arm{{"off", false, false}, {"TLS", true, false}, {"ACL", false, true}, {"TLS + ACL", true, true}}
	const rounds = 3
	res := make([][]tlsResult, len(arms)) // [arm][round]
	for round := range rounds {
		for k := range arms {
			i := (k + round) % len(arms)
			a := arms[i]
			b.Run(fmt.Sprintf("tls=%v/acl=%v/round=%d", a.tls, a.acl, round), func(b *testing.B) {
				hideNsPerOp(b)
				r := measureTLS(b, a.tls, a.acl)
				res[i] = append(res[i], r)
				b.ReportMetric(r.tasksPerSec, "tasks/s")
				b.ReportMetric(ms(r.p50), "p50-ms")
				b.ReportMetric(ms(r.p99), "p99-ms")
			})
		}
	}
	var rows []row
	for i, a := range arms {
		if len(res[i]) != rounds {
			return // a sub-benchmark failed or was filtered out
		}
		var tput, p50, p99 []float64
		for _, r := range res[i] {
			tput, p50, p99 = append(tput, r.tasksPerSec), append(p50, ms(r.p50)), append(p99, ms(r.p99))
		}
		rows = append(rows, row{a.name + ": throughput tasks/s", spread(tput), "min / median / max of the rounds"},
			row{a.name + ": submit p50 / p99 ms", spread(p50) + "  |  " + spread(p99), "forwarded through a follower"})
	}
	for i, a := range arms[1:] {
		var tput, p50, p99 []float64
		for r := range rounds {
			off, on := res[0][r], res[i+1][r]
			tput = append(tput, on.tasksPerSec/off.tasksPerSec)
			p50 = append(p50, float64(on.p50)/float64(off.p50))
			p99 = append(p99, float64(on.p99)/float64(off.p99))
		}
		note := ""
		if a.tls && a.acl {
			note = "targets: throughput >= 0.9, p99 <= 1.2 (medians)"
		}
		rows = append(rows, row{a.name + " / off: throughput, p50, p99", spread(tput) + "  |  " + spread(p50) + "  |  " + spread(p99), note})
	}
	summary(b, fmt.Sprintf("BenchmarkACL (3 heads + 1 fake worker on 127.0.0.1, BoltDB fsync, %d rounds, arms rotated)", rounds), &rows)
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// aclTokens bootstraps c's ACLs and returns opts with a submit token added
// and a worker token's secret.
func aclTokens(b *testing.B, c *testcluster.Cluster, opts []client.Option) ([]client.Option, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, c.GRPCAddrs(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	_, adminSecret, err := cl.BootstrapACL(ctx)
	if err != nil {
		b.Fatal(err)
	}
	admin, err := client.Dial(ctx, c.GRPCAddrs(), append(opts, client.WithToken(adminSecret))...)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	_, submitSecret, err := admin.CreateToken(ctx, "bench", client.RoleSubmit, 0)
	if err != nil {
		b.Fatal(err)
	}
	_, workerSecret, err := admin.CreateToken(ctx, "", client.RoleWorker, 0)
	if err != nil {
		b.Fatal(err)
	}
	return append(opts[:len(opts):len(opts)], client.WithToken(submitSecret)), workerSecret
}
