package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/megaflow/megaflow/head"
	"github.com/megaflow/megaflow/internal/testcluster"
	"github.com/megaflow/megaflow/internal/wire"
)

// metricsTasks is the table size of BenchmarkMetricsScrape, before
// -megaflow.scale.
const metricsTasks = 20_000

// BenchmarkMetricsScrape measures what one Prometheus scrape of a head
// costs with metricsTasks QUEUED tasks in its table, against the floor of
// the table-derived gauges: one bare pass over the table's tasks (reading
// each task's state) on the same view. The scrape computes every gauge at
// scrape time from a view (head/metrics.go), so its cost grows with the
// table; the ratio says how much it adds to the pass it cannot avoid.
// "gather" is the registry alone, "http" the whole GET /metrics (text
// encoding included). One head, no workers: every task stays QUEUED.
func BenchmarkMetricsScrape(b *testing.B) {
	hideNsPerOp(b)
	n := scaled(metricsTasks, 1000)
	c := testcluster.New(b, testcluster.Options{Heads: 1, Configure: func(cfg *head.Config) { cfg.HTTPAddr = "127.0.0.1:0" }})
	c.WaitLeader(30 * time.Second)
	h := c.Members[0].Head()
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const perGraph = 1000
	for i := 0; i*perGraph < n; i++ {
		g := rolloutGraph(fmt.Sprintf("step-%04d", i), min(perGraph, n-i*perGraph))
		if _, err := cl.Submit(ctx, g); err != nil {
			b.Fatal(err)
		}
	}
	view := h.FSM().View()

	const rounds = 20
	time1 := func(f func()) time.Duration {
		f() // warm
		start := time.Now()
		for range rounds {
			f()
		}
		return time.Since(start) / rounds
	}
	var sink int
	bare := time1(func() {
		counts := map[wire.TaskState]int{}
		for t := range view.Tasks() {
			counts[t.State]++
		}
		sink += len(counts)
	})
	gather := time1(func() {
		if _, err := h.Registry().Gather(); err != nil {
			b.Fatal(err)
		}
	})
	url := "http://" + h.HTTPAddr() + "/metrics"
	var size int
	scrape := time1(func() {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		size = len(body)
	})
	perTask := func(d time.Duration) string { return fmt.Sprintf("%.0f ns/task", float64(d)/float64(n)) }
	rows := []row{
		{"tasks in the table", fmt.Sprint(n), ""},
		{"bare pass (baseline)", fmt.Sprintf("%.2f ms", ms(bare)), perTask(bare)},
		{"gather", fmt.Sprintf("%.2f ms", ms(gather)), fmt.Sprintf("%.1fx the bare pass; %s", float64(gather)/float64(bare), perTask(gather))},
		{"GET /metrics", fmt.Sprintf("%.2f ms", ms(scrape)), fmt.Sprintf("%.1fx the bare pass; %d bytes", float64(scrape)/float64(bare), size)},
	}
	b.ReportMetric(float64(gather)/float64(bare), "gather/bare")
	b.ReportMetric(ms(scrape), "scrape-ms")
	logTable(b, "one scrape of a head's /metrics", rows)
	_ = sink
}
