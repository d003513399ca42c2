package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/testcluster"
)

// BenchmarkACL measures what API tokens (docs/security.md) cost: ACLs off
// against on in the same run, without TLS, each on a fresh cluster of 3
// heads and one fake worker, measured as BenchmarkTLS measures (no-op
// throughput through the leader; 1-task submit latency through a
// follower, which forwards the token and the leader checks it again). On
// means every call carries a submit token and the worker a worker token.
// Sides run off, on, off, on; figures averaged.
func BenchmarkACL(b *testing.B) {
	var rows []row
	res := map[bool][]tlsResult{}
	for round := range 2 {
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("acl=%v/round=%d", on, round), func(b *testing.B) {
				hideNsPerOp(b)
				r := measureTLS(b, false, on)
				res[on] = append(res[on], r)
				b.ReportMetric(r.tasksPerSec, "tasks/s")
				b.ReportMetric(ms(r.p50), "p50-ms")
				b.ReportMetric(ms(r.p99), "p99-ms")
			})
		}
	}
	for _, on := range []bool{false, true} {
		for i, r := range res[on] {
			rows = append(rows, row{fmt.Sprintf("ACL %v, round %d", onOff(on), i),
				fmt.Sprintf("%.0f tasks/s, submit p50 %.2f ms, p99 %.2f ms", r.tasksPerSec, ms(r.p50), ms(r.p99)), ""})
		}
	}
	if len(res[false]) == 2 && len(res[true]) == 2 {
		for i := range 2 {
			off, on := res[false][i], res[true][i]
			rows = append(rows, row{fmt.Sprintf("ACL on over off, round %d", i),
				fmt.Sprintf("throughput %.2f x, p50 %.2f x, p99 %.2f x", on.tasksPerSec/off.tasksPerSec,
					float64(on.p50)/float64(off.p50), float64(on.p99)/float64(off.p99)), ""})
		}
	}
	summary(b, "BenchmarkACL (3 heads + 1 fake worker on 127.0.0.1, BoltDB fsync, no TLS)", &rows)
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
