package fsm

import (
	"bytes"
	"strings"
	"testing"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

func (f *testFSM) setQuota(q *wire.Quota) *SetQuotaResult {
	f.tb.Helper()
	return f.ok(OpSetQuota, &wire.SetQuotaCommand{Quota: q, UnixNanos: f.now()}).(*SetQuotaResult)
}

// tenantGraph is a graph of tenant with n tasks of 1 core and 1 GiB.
func tenantGraph(id, tenant string, n int) *wire.GraphSpec {
	g := graphSpec(id)
	g.Tenant = tenant
	for i := range n {
		g.Tasks = append(g.Tasks, rspec(string(rune('a'+i)), 1000, 1, 0))
	}
	return g
}

// The plan verifier refuses placements beyond a tenant's quota or the
// cluster limit, counting the placements before them in the same plan and
// those already running; other tenants are unaffected.
func TestPlanRespectsQuotas(t *testing.T) {
	tests := []struct {
		name    string
		quotas  []*wire.Quota
		want    string // applied task ids
		skipped string // the reason of the first skipped task
	}{
		{"no quota", nil, "a/a a/b a/c b/a b/b", ""},
		{"max running", []*wire.Quota{{Tenant: "team-a", MaxRunning: 2}}, "a/a a/b b/a b/b",
			"tenant team-a is at its quota of 2 running tasks"},
		{"cpu", []*wire.Quota{{Tenant: "team-a", CpuMillis: 1500}}, "a/a b/a b/b",
			"tenant team-a is at its CPU quota"},
		{"memory", []*wire.Quota{{Tenant: "team-b", MemoryBytes: gib}}, "a/a a/b a/c b/a", "tenant team-b is at its memory quota"},
		{"cluster", []*wire.Quota{{MaxRunning: 3}}, "a/a a/b a/c", "the cluster is at its limit of 3 running tasks"},
		{"removed", []*wire.Quota{{Tenant: "team-a", MaxRunning: 1}, {Tenant: "team-a"}}, "a/a a/b a/c b/a b/b", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTestFSM(t, 0)
			f.upsert("w1", 64000, 64, 0)
			f.submit(tenantGraph("a", "team-a", 3))
			f.submit(tenantGraph("b", "team-b", 2))
			for _, q := range tt.quotas {
				f.setQuota(q)
			}
			// One task of team-a already runs when quotas are checked.
			f.place(pa("a/a", 1, "w1"))
			res := f.plan(pa("a/b", 1, "w1"), pa("a/c", 1, "w1"), pa("b/a", 1, "w1"), pa("b/b", 1, "w1"))
			var got []string
			for _, id := range []string{"a/a", "a/b", "a/c", "b/a", "b/b"} {
				if f.task(id).State == assigned {
					got = append(got, id)
				}
			}
			if strings.Join(got, " ") != tt.want {
				t.Fatalf("assigned %v, want %s (skipped %v)", got, tt.want, res.Skipped)
			}
			if tt.skipped == "" && len(res.Skipped) > 0 {
				t.Fatalf("skipped %v", res.Skipped)
			}
			if tt.skipped != "" {
				found := false
				for _, why := range res.Skipped {
					found = found || strings.Contains(why, tt.skipped)
				}
				if !found {
					t.Fatalf("skipped %v, want a reason containing %q", res.Skipped, tt.skipped)
				}
			}
			f.accountingOK()
		})
	}
}

func TestSetQuotaRefusesNegativeLimits(t *testing.T) {
	f := newTestFSM(t, 0)
	e := f.refused(errs.InvalidArgument, OpSetQuota, &wire.SetQuotaCommand{Quota: &wire.Quota{Tenant: "x", Gpus: -1}})
	if !strings.Contains(e.Message, "gpus -1 is negative") {
		t.Fatalf("message %q", e.Message)
	}
	if ts, c := f.View().Quotas(); len(ts) != 0 || c != nil {
		t.Fatalf("quotas %v %v after a refused command", ts, c)
	}
}

// Quotas and the cluster limit survive a snapshot and restore.
func TestSnapshotKeepsQuotas(t *testing.T) {
	src := sampleFSM(t)
	src.setQuota(&wire.Quota{Tenant: "team-a", MaxRunning: 3, CpuMillis: 4000, MemoryBytes: 8 * gib, Gpus: 2})
	src.setQuota(&wire.Quota{MaxRunning: 100})
	b := snapshotBytes(t, src.View())
	dst := newTestFSM(t, 0)
	if err := dst.Restore(nopCloser{bytes.NewReader(b)}); err != nil {
		t.Fatal(err)
	}
	ts, c := dst.View().Quotas()
	if len(ts) != 1 || ts[0].Tenant != "team-a" || ts[0].MaxRunning != 3 || ts[0].Max.GPUs != 2 || ts[0].Max.MemoryBytes != 8*gib ||
		c == nil || c.MaxRunning != 100 {
		t.Fatalf("restored quotas %+v cluster %+v", ts, c)
	}
	if !bytes.Equal(b, snapshotBytes(t, dst.View())) {
		t.Fatal("snapshot of the restored table differs")
	}
}

// A graph's metrics follow its task results: success rate over finished
// tasks, mean, min, max and histogram of the reward, wall time from the
// first start to the last end; they survive a snapshot.
func TestGraphMetrics(t *testing.T) {
	f := newTestFSM(t, 0)
	f.upsert("w1", 64000, 64, 0)
	g := tenantGraph("g", "t", 5)
	g.Tasks[4] = retries(g.Tasks[4], 0)
	f.submit(g)
	f.place(pa("g/a", 1, "w1"), pa("g/b", 1, "w1"), pa("g/c", 1, "w1"), pa("g/d", 1, "w1"), pa("g/e", 1, "w1"))
	start := f.now()
	f.report("w1", ev("g/a", 1, kStarted))
	f.report("w1", exited("g/a", 1, 0, `{"reward": 1.0}`), exited("g/b", 1, 0, `{"reward": 0.25, "x": "y"}`))
	f.report("w1", exited("g/c", 1, 0, `{"reward": "high"}`), exited("g/d", 1, 0, `{"reward": -1}`))
	end := f.now()
	f.report("w1", exited("g/e", 1, 3, ""))
	m := f.View().Graph("g").ToWire().GetMetrics()
	if m.Field != "reward" || m.Finished != 5 || m.Succeeded != 4 || m.SuccessRate != 0.8 || m.Count != 3 ||
		m.Mean != 0.25/3 || m.Min != -1 || m.Max != 1 || m.FirstStartUnixNanos != start || m.LastFinishUnixNanos != end {
		t.Fatalf("metrics %v", m)
	}
	want := []uint32{1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1}
	for i := range want {
		if m.Histogram[i] != want[i] {
			t.Fatalf("histogram %v, want %v", m.Histogram, want)
		}
	}
	dst := newTestFSM(t, 0)
	if err := dst.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, f.View()))}); err != nil {
		t.Fatal(err)
	}
	if got := dst.View().Graph("g").ToWire().GetMetrics(); got.String() != m.String() {
		t.Fatalf("restored metrics %v, want %v", got, m)
	}

	// A label names another field.
	g2 := tenantGraph("g2", "t", 1)
	g2.Labels = map[string]string{"megaflow.io/metric": "score"}
	f.submit(g2)
	f.place(pa("g2/a", 1, "w1"))
	f.report("w1", exited("g2/a", 1, 0, `{"reward": 1, "score": 0.5}`))
	if m := f.View().Graph("g2").ToWire().GetMetrics(); m.Field != "score" || m.Mean != 0.5 || m.Histogram[6] != 1 {
		t.Fatalf("metrics %v", m)
	}
}

// FailQueued fails only tasks still QUEUED with the reason the leader saw
// and queued no later than its cutoff; dependents are resolved.
func TestFailQueued(t *testing.T) {
	f := newTestFSM(t, 0)
	f.upsert("w1", 64000, 64, 0)
	f.submit(graphSpec("g", rspec("a", 1000, 1, 0), rspec("b", 1000, 1, 0), rspec("c", 1000, 1, 0), spec("d", "a")))
	queuedAt := f.task("g/a").QueuedUnixNanos
	if queuedAt == 0 {
		t.Fatal("queued_unix_nanos not set at submission")
	}
	why := "no worker has 1 TiB of memory"
	f.unplaced(map[string]string{"g/a": why, "g/b": why, "g/c": "all workers are full"})
	f.place(pa("g/b", 1, "w1"))
	res := f.ok(OpFailQueued, &wire.FailQueuedCommand{TaskIds: []string{"g/a", "g/b", "g/c"}, Reasons: []string{why, why, why},
		QueuedBeforeUnixNanos: queuedAt, UnixNanos: f.now()}).(*FailQueuedResult)
	if res.Failed != 1 {
		t.Fatalf("failed %d, want 1", res.Failed)
	}
	if got := states(f, "g/a", "g/b", "g/c", "g/d"); got != "FAILED ASSIGNED QUEUED CANCELLED" {
		t.Fatalf("states %s", got)
	}
	if a := f.task("g/a"); a.Reason != why+" (gave up after 0s queued: the heads' --max-queue-wait)" {
		t.Fatalf("reason %q", a.Reason)
	}
	// Queued after the cutoff: left alone.
	f.unplaced(map[string]string{"g/c": why})
	f.ok(OpFailQueued, &wire.FailQueuedCommand{TaskIds: []string{"g/c"}, Reasons: []string{why}, QueuedBeforeUnixNanos: queuedAt - 1, UnixNanos: f.now()})
	if got := states(f, "g/c"); got != "QUEUED" {
		t.Fatalf("g/c %s", got)
	}
	f.refused(errs.InvalidArgument, OpFailQueued, &wire.FailQueuedCommand{TaskIds: []string{"g/c"}})
}
